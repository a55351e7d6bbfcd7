/*
 * libFuzzer target for the guest agent's frame reader (guest/agent/frame_reader.c): the bytes
 * the host side of the vsock connection sends, read through a real file descriptor until end
 * of stream or a fatal frame, both before authentication (no request ids, a 1 KiB cap) and
 * after (request ids, the protocol's cap). The first input byte picks the mode. A frame the
 * reader accepts must lie inside what was sent; nothing may crash or leak.
 */
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "frame_reader.h"

#define FUZZ_PREAUTH_MAX_PAYLOAD 1024u
#define FUZZ_FLAG_MULTIPLEXED 0x01u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	bool multiplexed;
	int fd;

	if (size == 0)
		return 0;
	multiplexed = data[0] & FUZZ_FLAG_MULTIPLEXED;
	fd = memfd_create("agent-frames", MFD_CLOEXEC);
	if (fd < 0)
		return 0;
	if (write(fd, data + 1, size - 1) != (ssize_t)(size - 1) || lseek(fd, 0, SEEK_SET) != 0) {
		close(fd);
		return 0;
	}
	for (;;) {
		struct agent_frame frame;
		const char *why = NULL;
		enum frame_result result = frame_reader_read(
			fd, multiplexed, multiplexed ? PROTO_MAX_PAYLOAD : FUZZ_PREAUTH_MAX_PAYLOAD,
			&frame, &why);

		if (result == FRAME_OK) {
			if (frame.len > size || (frame.len && !frame.payload))
				abort();
			free(frame.storage);
			continue;
		}
		if (result == FRAME_SKIPPED)
			continue;
		if (result == FRAME_FATAL && !why)
			abort(); /* every fatal frame says why */
		break;
	}
	close(fd);
	return 0;
}
