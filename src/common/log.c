/*
 * Levelled logger: "LEVEL module: message" lines on one stream, serialised by a mutex so
 * lines from vCPU, device and channel threads never interleave mid-line. At debug and trace
 * level each line also carries the seconds since the first line ("debug 1.234 vm: ...").
 * A process forked while another thread holds the lock (a VMM process, src/sandbox) would
 * never log again, so fork takes the lock first and both sides release it.
 */
#include "common/log.h"

#include <pthread.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* The longest repeated warning kept whole (log_warn_repeated); longer ones are cut. */
#define LOG_REPEATED_TEXT_MAX 1024

static const char *const level_names[] = {
	[LOG_LEVEL_TRACE] = "trace", [LOG_LEVEL_DEBUG] = "debug", [LOG_LEVEL_INFO] = "info",
	[LOG_LEVEL_WARN] = "warn",   [LOG_LEVEL_ERROR] = "error", [LOG_LEVEL_OFF] = "off",
};

static enum log_level current_level = LOG_LEVEL_WARN;
static FILE *log_stream;
static int log_stream_set;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static void log_fork_prepare(void)
{
	pthread_mutex_lock(&log_lock);
}

static void log_fork_release(void)
{
	pthread_mutex_unlock(&log_lock);
}

__attribute__((constructor)) static void log_register_fork_handlers(void)
{
	pthread_atfork(log_fork_prepare, log_fork_release, log_fork_release);
}

int log_level_parse(const char *name)
{
	if (!name)
		return -1;
	for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++)
		if (strcasecmp(name, level_names[i]) == 0)
			return (int)i;
	return -1;
}

void log_set_level(enum log_level level)
{
	current_level = level;
}

enum log_level log_get_level(void)
{
	return current_level;
}

void log_set_level_name(const char *name)
{
	int level = log_level_parse(name);

	if (level >= 0)
		current_level = (enum log_level)level;
}

void log_set_stream(FILE *stream)
{
	pthread_mutex_lock(&log_lock);
	log_stream = stream;
	log_stream_set = 1;
	pthread_mutex_unlock(&log_lock);
}

FILE *log_current_stream(void)
{
	FILE *stream;

	pthread_mutex_lock(&log_lock);
	stream = log_stream_set ? log_stream : stderr;
	pthread_mutex_unlock(&log_lock);
	return stream;
}

/* Seconds since the first call: debug logs carry it, to show where the time goes. */
static double log_seconds_since_start(void)
{
	static struct timespec start;
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	if (start.tv_sec == 0 && start.tv_nsec == 0)
		start = now;
	return (double)(now.tv_sec - start.tv_sec) + (double)(now.tv_nsec - start.tv_nsec) / 1e9;
}

void log_message(enum log_level level, const char *module, const char *fmt, ...)
{
	va_list args;
	FILE *out;

	if (level < current_level || level >= LOG_LEVEL_OFF)
		return;
	pthread_mutex_lock(&log_lock);
	out = log_stream_set ? log_stream : stderr;
	if (out) {
		fprintf(out, "%s ", level_names[level]);
		if (current_level <= LOG_LEVEL_DEBUG)
			fprintf(out, "%.3f ", log_seconds_since_start());
		fprintf(out, "%s: ", module);
		va_start(args, fmt);
		vfprintf(out, fmt, args);
		va_end(args);
		fputc('\n', out);
		fflush(out);
	}
	pthread_mutex_unlock(&log_lock);
}

void log_warn_repeated(const char *module, unsigned int nth, unsigned int limit,
		       const char *fmt, ...)
{
	enum log_level level = nth < limit ? LOG_LEVEL_WARN : LOG_LEVEL_DEBUG;
	char text[LOG_REPEATED_TEXT_MAX];
	va_list args;

	if (level < current_level)
		return;
	va_start(args, fmt);
	vsnprintf(text, sizeof(text), fmt, args);
	va_end(args);
	log_message(level, module, "%s%s", text,
		    nth + 1 == limit ? "; later ones are logged at debug level only" : "");
}
