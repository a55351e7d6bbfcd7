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
 * How long sending one frame of len payload bytes may take when nothing tighter bounds it:
 * CHANNEL_SEND_BASE_MS, plus the time the payload takes at CHANNEL_SEND_MIN_BYTES_PER_SEC. A
 * guest that takes its input slower than that (a socket buffer every few seconds, say) has
 * the frame cut off instead of holding the writer, and every caller queued behind it, for
 * as long as it likes. A call with a deadline sends within the earlier of the two.
 */
#define CHANNEL_SEND_BASE_MS 10000LL
#define CHANNEL_SEND_MIN_BYTES_PER_SEC (256LL * 1024)
long long channel_send_budget_ms(size_t len);

/*
 * The errno a failed reply's code stands for: denied -EPERM, not_found -ENOENT, invalid
 * -EINVAL, timed_out -ETIMEDOUT, busy -EBUSY, anything else (or no code) -EIO.
 */
int channel_errno_for_code(enum proto_error_code code);

/* Records the sentence for control_channel_last_error() and returns err. */
int control_channel_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
