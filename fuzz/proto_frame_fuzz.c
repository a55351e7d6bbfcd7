/*
 * libFuzzer target for everything the host and the guest parse from the peer: frames (from
 * memory and through the blocking fd reader), the Ping/Pong bodies, base64, and every JSON
 * message codec.
 *
 * The first input byte chooses multiplexed framing (bit 0) and whether the fd reader runs
 * with a deadline (bit 1: proto_frame_read_timed, whose poll-before-read path must agree with
 * the plain reader); the rest is a byte stream cut into frames until one is incomplete or
 * refused. Every codec runs on every frame body, not
 * only the one its type names, because a hostile peer picks the type. Each accepted message
 * is re-encoded and decoded again, and a failure there aborts: whatever a decoder accepts, the
 * encoders must be able to send.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "proto/protocol.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_FLAG_MULTIPLEXED 0x01u
#define FUZZ_FLAG_TIMED_READ 0x02u
/* a memfd is always readable: the deadline only has to be long enough never to pass */
#define FUZZ_READ_TIMEOUT_MS 10000

#define FUZZ_ROUND_TRIP(name, body, len)                                                       \
	do {                                                                                   \
		struct proto_##name msg, again;                                                \
		const char *why = NULL;                                                        \
		uint8_t *encoded;                                                              \
		size_t encoded_len;                                                            \
		if (proto_##name##_decode(body, len, &msg, &why) == 0) {                       \
			if (proto_##name##_encode(&msg, &encoded, &encoded_len) != 0)         \
				abort();                                                       \
			if (proto_##name##_decode(encoded, encoded_len, &again, &why) != 0)   \
				abort();                                                       \
			proto_##name##_free(&again);                                           \
			free(encoded);                                                         \
		} else if (!why) {                                                             \
			abort(); /* every refusal must say why */                              \
		}                                                                              \
		proto_##name##_free(&msg);                                                     \
	} while (0)

/* The rekey document: an accepted one re-encodes to a document that decodes the same. */
static void fuzz_rekey(const uint8_t *body, size_t len)
{
	struct proto_rekey rekey, again;
	const char *why = NULL;
	char *encoded = NULL;

	if (proto_rekey_decode(body, len, &rekey, &why) != 0) {
		if (!why)
			abort();
		return;
	}
	if (proto_rekey_encode(&rekey, &encoded) != 0 ||
	    proto_rekey_decode((const uint8_t *)encoded, strlen(encoded), &again, &why) != 0 ||
	    memcmp(&rekey, &again, sizeof(rekey)) != 0)
		abort();
	free(encoded);
}

static void fuzz_body(const uint8_t *body, size_t len)
{
	struct proto_ping ping;
	struct proto_pong pong;
	struct proto_bytes bytes;

	proto_ping_decode(body, len, &ping);
	proto_pong_decode(body, len, &pong);
	if (proto_base64_decode((const char *)body, len, &bytes) == 0)
		free(bytes.data);
	FUZZ_ROUND_TRIP(exec_request, body, len);
	FUZZ_ROUND_TRIP(exec_response, body, len);
	FUZZ_ROUND_TRIP(exec_output_chunk, body, len);
	FUZZ_ROUND_TRIP(write_file, body, len);
	FUZZ_ROUND_TRIP(status_response, body, len);
	FUZZ_ROUND_TRIP(path_request, body, len);
	FUZZ_ROUND_TRIP(read_file_response, body, len);
	FUZZ_ROUND_TRIP(file_stat_response, body, len);
	FUZZ_ROUND_TRIP(subscribe_telemetry, body, len);
	FUZZ_ROUND_TRIP(telemetry_batch, body, len);
	FUZZ_ROUND_TRIP(pty_open, body, len);
	FUZZ_ROUND_TRIP(pty_resize, body, len);
	FUZZ_ROUND_TRIP(pty_closed, body, len);
	FUZZ_ROUND_TRIP(set_policy, body, len);
	fuzz_rekey(body, len);
}

static void fuzz_memory_frames(const uint8_t *data, size_t size, bool multiplexed)
{
	while (size > 0) {
		struct proto_frame frame;
		long used = proto_frame_decode(data, size, multiplexed, &frame);

		if (used <= 0)
			return;
		fuzz_body(frame.body, frame.body_len);
		proto_frame_free(&frame);
		data += used;
		size -= (size_t)used;
	}
}

/* The same stream through proto_frame_read: it must agree with the in-memory decoder. */
static void fuzz_fd_frames(const uint8_t *data, size_t size, bool multiplexed, bool timed)
{
	int fd = memfd_create("proto_frame_fuzz", MFD_CLOEXEC);
	size_t offset = 0;

	if (fd < 0)
		return;
	if (size && write(fd, data, size) != (ssize_t)size)
		goto out;
	lseek(fd, 0, SEEK_SET);
	for (;;) {
		struct proto_frame from_fd, from_memory;
		long used = proto_frame_decode(data + offset, size - offset, multiplexed,
					       &from_memory);
		int rc = timed ? proto_frame_read_timed(fd, multiplexed, FUZZ_READ_TIMEOUT_MS,
							&from_fd)
			       : proto_frame_read(fd, multiplexed, &from_fd);

		if (used > 0 && rc != 0)
			abort();
		if (used > 0) {
			if (from_fd.body_len != from_memory.body_len ||
			    memcmp(from_fd.body, from_memory.body, from_fd.body_len) != 0 ||
			    from_fd.request_id != from_memory.request_id)
				abort();
			offset += (size_t)used;
		}
		proto_frame_free(&from_fd);
		proto_frame_free(&from_memory);
		if (rc != 0 || used <= 0)
			break;
	}
out:
	close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	bool multiplexed;

	if (size == 0)
		return 0;
	multiplexed = data[0] & FUZZ_FLAG_MULTIPLEXED;
	fuzz_memory_frames(data + 1, size - 1, multiplexed);
	fuzz_fd_frames(data + 1, size - 1, multiplexed, data[0] & FUZZ_FLAG_TIMED_READ);
	return 0;
}
