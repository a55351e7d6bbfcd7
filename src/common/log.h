/*
 * Structured, levelled logging for every host-side module.
 *
 * One process-wide level, set once from --log-level / VOIDBOX_LOG_LEVEL; all progress goes
 * to stderr through here so an interactive PTY session can silence it in one place.
 * The guest agent has its own sink (/dev/kmsg) and only shares the level enum.
 */
#ifndef VOIDBOX_COMMON_LOG_H
#define VOIDBOX_COMMON_LOG_H

#include <stdarg.h>
#include <stdio.h>

enum log_level {
	LOG_LEVEL_TRACE,
	LOG_LEVEL_DEBUG,
	LOG_LEVEL_INFO,
	LOG_LEVEL_WARN,
	LOG_LEVEL_ERROR,
	LOG_LEVEL_OFF,
};

/* Parses "trace|debug|info|warn|error|off"; returns -1 for anything else. */
int log_level_parse(const char *name);
void log_set_level(enum log_level level);
enum log_level log_get_level(void);
/* The variable entry points read the level from. */
#define LOG_LEVEL_ENV "VOIDBOX_LOG_LEVEL"
/* Sets the level log_level_parse names (entry points pass $VOIDBOX_LOG_LEVEL); NULL or an
 * unknown name keeps the current level. */
void log_set_level_name(const char *name);
/* Redirects output (default stderr); NULL silences everything. */
void log_set_stream(FILE *stream);
/* Where lines go now: stderr, the stream set, or NULL when silenced. */
FILE *log_current_stream(void);

void log_message(enum log_level level, const char *module, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/*
 * A warning a hostile peer can repeat without end (a guest breaking a device, an agent's
 * malformed frames): its occurrence number nth (counted from 0 by the caller, per device or
 * per stream) is a warning while below limit, the last of those saying later ones are not,
 * and a debug line after, so the peer cannot fill the host's log.
 */
void log_warn_repeated(const char *module, unsigned int nth, unsigned int limit,
		       const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#define log_trace(module, ...) log_message(LOG_LEVEL_TRACE, module, __VA_ARGS__)
#define log_debug(module, ...) log_message(LOG_LEVEL_DEBUG, module, __VA_ARGS__)
#define log_info(module, ...) log_message(LOG_LEVEL_INFO, module, __VA_ARGS__)
#define log_warn(module, ...) log_message(LOG_LEVEL_WARN, module, __VA_ARGS__)
#define log_error(module, ...) log_message(LOG_LEVEL_ERROR, module, __VA_ARGS__)

#endif
