/*
 * Formats a whole record into one buffer and emits it with a single write(), because /dev/kmsg
 * treats each write as one record and stderr lines from several threads must not interleave.
 * Never blocks on a terminal: the kmsg fd is the only sink as PID 1.
 */
#include "agent_log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define AGENT_LOG_PREFIX "voidbox-agent: "
#define AGENT_LOG_RECORD_MAX 1024
#define KMSG_PATH "/dev/kmsg"

/* Kernel printk priorities used as the "<N>" record prefix. */
enum kmsg_priority {
	KMSG_PRIORITY_EMERG = 0,
	KMSG_PRIORITY_ERR = 3,
	KMSG_PRIORITY_WARNING = 4,
	KMSG_PRIORITY_INFO = 6,
	KMSG_PRIORITY_DEBUG = 7,
};

static int log_fd = STDERR_FILENO;
static bool log_to_kmsg;
static _Atomic int log_threshold = LOG_LEVEL_INFO;

static const char *const level_labels[] = {
	[LOG_LEVEL_TRACE] = "trace", [LOG_LEVEL_DEBUG] = "debug", [LOG_LEVEL_INFO] = "info",
	[LOG_LEVEL_WARN] = "warn",   [LOG_LEVEL_ERROR] = "error", [LOG_LEVEL_OFF] = "off",
};

void agent_log_init(enum agent_log_sink sink)
{
	int fd;

	if (sink != AGENT_LOG_SINK_KMSG)
		return;
	/* As PID 1 nothing may reach the console: drop records until /dev/kmsg exists. */
	log_to_kmsg = true;
	if (log_fd >= 0 && log_fd != STDERR_FILENO)
		return;
	fd = open(KMSG_PATH, O_WRONLY | O_CLOEXEC | O_NOCTTY);
	log_fd = fd;
}

void agent_log_set_level(enum log_level level)
{
	atomic_store(&log_threshold, (int)level);
}

static enum kmsg_priority level_to_priority(enum log_level level)
{
	switch (level) {
	case LOG_LEVEL_ERROR:
		return KMSG_PRIORITY_ERR;
	case LOG_LEVEL_WARN:
		return KMSG_PRIORITY_WARNING;
	case LOG_LEVEL_INFO:
		return KMSG_PRIORITY_INFO;
	default:
		return KMSG_PRIORITY_DEBUG;
	}
}

static void log_emit(enum kmsg_priority priority, const char *label, const char *fmt, va_list ap)
{
	char record[AGENT_LOG_RECORD_MAX];
	int head, body;
	size_t len;
	ssize_t rc;

	if (log_to_kmsg)
		head = snprintf(record, sizeof(record), "<%d>" AGENT_LOG_PREFIX, (int)priority);
	else
		head = snprintf(record, sizeof(record), AGENT_LOG_PREFIX "%s: ", label);
	if (head < 0)
		return;
	body = vsnprintf(record + head, sizeof(record) - (size_t)head, fmt, ap);
	if (body < 0)
		return;
	len = (size_t)head + (size_t)body;
	if (len > sizeof(record) - 2)
		len = sizeof(record) - 2;
	record[len++] = '\n';
	record[len] = '\0';
	do {
		rc = write(log_fd, record, len);
	} while (rc < 0 && errno == EINTR);
}

void agent_log(enum log_level level, const char *fmt, ...)
{
	va_list ap;
	int saved_errno = errno;

	if ((int)level < atomic_load(&log_threshold) || level >= LOG_LEVEL_OFF)
		return;
	va_start(ap, fmt);
	log_emit(level_to_priority(level), level_labels[level], fmt, ap);
	va_end(ap);
	errno = saved_errno;
}

void agent_log_emergency(const char *fmt, ...)
{
	va_list ap;
	int saved_errno = errno;

	va_start(ap, fmt);
	log_emit(KMSG_PRIORITY_EMERG, "fatal", fmt, ap);
	va_end(ap);
	errno = saved_errno;
}
