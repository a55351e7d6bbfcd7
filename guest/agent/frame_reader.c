/*
 * Frames from the host, read with proto_header_parse plus plain reads rather than
 * proto_frame_read, because the agent must tell three outcomes apart: an unknown type (skip
 * the payload, log, keep the connection), an over-cap length or a short multiplexed payload
 * (close), and end of stream. Every length is checked against the caller's cap before anything
 * is allocated. Apart from the server so it can be fuzzed on its own.
 */
#include "frame_reader.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/fd_io.h"

#define FRAME_READER_DISCARD_CHUNK 4096

static int frame_reader_discard(int fd, size_t len)
{
	uint8_t sink[FRAME_READER_DISCARD_CHUNK];

	while (len > 0) {
		size_t chunk = len < sizeof(sink) ? len : sizeof(sink);
		ssize_t got = fd_read_full(fd, sink, chunk);

		if (got != (ssize_t)chunk)
			return got < 0 ? (int)got : -EPIPE;
		len -= chunk;
	}
	return 0;
}

static uint32_t frame_reader_le32(const uint8_t *bytes)
{
	uint32_t value = 0;

	for (int i = PROTO_REQUEST_ID_SIZE - 1; i >= 0; i--)
		value = value << CHAR_BIT | bytes[i];
	return value;
}

enum frame_result frame_reader_read(int fd, bool multiplexed, uint32_t max_payload,
				    struct agent_frame *frame, const char **why)
{
	uint8_t header[PROTO_HEADER_SIZE];
	uint32_t payload_len;
	ssize_t got;
	int err;

	memset(frame, 0, sizeof(*frame));
	got = fd_read_full(fd, header, sizeof(header));
	if (got == 0)
		return FRAME_EOF;
	if (got != (ssize_t)sizeof(header)) {
		*why = "read failed";
		return FRAME_FATAL;
	}
	err = proto_header_parse(header, &payload_len, &frame->type);
	if (err == -EMSGSIZE || (err == 0 && payload_len > max_payload)) {
		*why = "declared length over the limit";
		return FRAME_FATAL;
	}
	if (err) {
		*why = "unknown message type";
		return frame_reader_discard(fd, payload_len) ? FRAME_FATAL : FRAME_SKIPPED;
	}
	frame->storage = malloc(payload_len ? payload_len : 1);
	if (!frame->storage) {
		*why = "out of memory";
		return FRAME_FATAL;
	}
	if (fd_read_full(fd, frame->storage, payload_len) != (ssize_t)payload_len) {
		*why = "connection closed mid-frame";
		goto fatal;
	}
	frame->payload = frame->storage;
	frame->len = payload_len;
	if (!multiplexed || frame->type == PROTO_MSG_PING || frame->type == PROTO_MSG_PONG)
		return FRAME_OK;
	if (payload_len < PROTO_REQUEST_ID_SIZE) {
		*why = "payload shorter than the request id";
		goto fatal;
	}
	frame->request_id = frame_reader_le32(frame->storage);
	frame->payload += PROTO_REQUEST_ID_SIZE;
	frame->len -= PROTO_REQUEST_ID_SIZE;
	return FRAME_OK;
fatal:
	free(frame->storage);
	frame->storage = NULL;
	return FRAME_FATAL;
}
