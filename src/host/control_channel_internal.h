/*
 * What control_channel.c shares with control_channel_pty.c and nothing else: the channel's
 * configuration and the thread-local error sentence, so both report failures the same way.
 */
#ifndef VOIDBOX_HOST_CONTROL_CHANNEL_INTERNAL_H
#define VOIDBOX_HOST_CONTROL_CHANNEL_INTERNAL_H

#include "host/control_channel.h"

#define CONTROL_CHANNEL_ERROR_MAX 512

const struct control_channel_config *control_channel_config_of(const struct control_channel *ch);

/* Records the sentence for control_channel_last_error() and returns err. */
int control_channel_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
