/*
 * What control_channel.c shares with control_channel_pty.c and nothing else: the channel's
 * configuration and the thread-local error sentence, so both report failures the same way.
 */
#ifndef VOIDBOX_HOST_CONTROL_CHANNEL_INTERNAL_H
#define VOIDBOX_HOST_CONTROL_CHANNEL_INTERNAL_H

#include "host/control_channel.h"

#define CONTROL_CHANNEL_ERROR_MAX 512

const struct control_channel_config *control_channel_config_of(const struct control_channel *ch);

/*
 * Reads one frame from the guest: the whole frame within timeout_ms, or with
 * PROTO_READ_NO_DEADLINE its first byte whenever it comes (shutdown() wakes the wait) and the
 * rest within CHANNEL_FRAME_TRANSFER_MS. Returns proto_frame_read_timed's codes: -ETIMEDOUT
 * when nothing came (the stream is intact), -ETIME when the guest stopped mid-frame (it is not).
 */
#define CHANNEL_FRAME_TRANSFER_MS 60000
int channel_read_frame(int fd, int timeout_ms, struct proto_frame *frame);

/*
 * The errno a failed reply's code stands for: denied -EPERM, not_found -ENOENT, invalid
 * -EINVAL, timed_out -ETIMEDOUT, busy -EBUSY, anything else (or no code) -EIO.
 */
int channel_errno_for_code(enum proto_error_code code);

/* Records the sentence for control_channel_last_error() and returns err. */
int control_channel_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
