/*
 * The agent's own log sink. As PID 1 every line goes to /dev/kmsg (one write() per record, so
 * lines never interleave and tty back-pressure can never wedge PID 1); outside a VM the same
 * calls go to stderr so tests and developers see them. Levels are the project's log_level enum.
 */
#ifndef VOIDBOX_AGENT_LOG_H
#define VOIDBOX_AGENT_LOG_H

#include "common/log.h"

enum agent_log_sink {
	AGENT_LOG_SINK_STDERR,
	AGENT_LOG_SINK_KMSG,
};

/*
 * Selects the sink. KMSG opens /dev/kmsg; until it can be opened (before devtmpfs is mounted)
 * records are dropped rather than sent to a tty. Call again after mounting /dev.
 */
void agent_log_init(enum agent_log_sink sink);
void agent_log_set_level(enum log_level level);
void agent_log(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Highest kernel priority, so fatal diagnostics pass even loglevel=0. */
void agent_log_emergency(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define agent_debug(...) agent_log(LOG_LEVEL_DEBUG, __VA_ARGS__)
#define agent_info(...) agent_log(LOG_LEVEL_INFO, __VA_ARGS__)
#define agent_warn(...) agent_log(LOG_LEVEL_WARN, __VA_ARGS__)
#define agent_error(...) agent_log(LOG_LEVEL_ERROR, __VA_ARGS__)

#endif
