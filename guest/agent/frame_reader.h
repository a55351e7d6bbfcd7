/*
 * Reading one frame of the host<->agent protocol (docs/protocol.md §2) from a connection.
 */
#ifndef VOIDBOX_AGENT_FRAME_READER_H
#define VOIDBOX_AGENT_FRAME_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/protocol.h"

enum frame_result {
	FRAME_OK,
	FRAME_EOF,
	FRAME_SKIPPED,      /* unknown type, payload consumed */
	FRAME_FATAL,        /* over cap, truncated, or I/O error: close */
};

struct agent_frame {
	uint8_t type;
	uint32_t request_id;
	uint8_t *payload;   /* whole payload (Ping/Pong) or the body after the request id */
	uint8_t *storage;   /* what to free (FRAME_OK only) */
	size_t len;
};

/*
 * Reads one frame whose payload may be at most max_payload bytes; multiplexed frames carry a
 * request id first (not Ping/Pong). On FRAME_SKIPPED and FRAME_FATAL *why says what happened.
 */
enum frame_result frame_reader_read(int fd, bool multiplexed, uint32_t max_payload,
				    struct agent_frame *frame, const char **why);

#endif
