/*
 * Run events: every change a client can observe (run.started, stage.started, log.chunk,
 * run.finished, ...) is one row in the store with a per-run id that only grows, so
 * `GET /events?from_event_id=N` and a reconnecting stream resume exactly where they were.
 * Appending and waking happen under the daemon's lock: a stream that saw id N and then waits
 * on d->changed cannot miss N+1. log.closed is always a run's last event; streams end there.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/daemon_internal.h"

#define EVENT_LAST_TYPE "log.closed"
#define EVENT_ASCII_LIMIT 0x80

int64_t daemon_event_emit_locked(struct daemon *d, const char *run_id, const char *type,
				 const char *level, const char *message, const char *stage,
				 const char *stream, json_t *payload)
{
	json_t *event = json_pack("{s:I, s:s, s:s, s:s}", "ts_ms", (json_int_t)daemon_now_ms(),
				  "level", level, "event_type", type, "message",
				  message ? message : "");
	int64_t event_id;

	if (!event) {
		json_decref(payload);
		return -ENOMEM;
	}
	if (stage)
		json_object_set_new(event, "stage_name", json_string(stage));
	if (stream)
		json_object_set_new(event, "stream", json_string(stream));
	if (payload)
		json_object_set_new(event, "payload", payload);
	event_id = daemon_store_append_event(d->store, run_id, event);
	json_decref(event);
	pthread_cond_broadcast(&d->changed);
	return event_id;
}

int64_t daemon_event_emit(struct daemon *d, const char *run_id, const char *type,
			  const char *level, const char *message, const char *stage,
			  const char *stream, json_t *payload)
{
	int64_t event_id;

	pthread_mutex_lock(&d->lock);
	event_id = daemon_event_emit_locked(d, run_id, type, level, message, stage, stream,
					    payload);
	pthread_mutex_unlock(&d->lock);
	return event_id;
}

json_t *daemon_text_json(const char *text, size_t len)
{
	json_t *line = json_stringn(text, len);
	char *copy;

	if (line)
		return line;
	copy = malloc(len + 1);
	if (!copy)
		return NULL;
	for (size_t i = 0; i < len; i++)
		copy[i] = (unsigned char)text[i] < EVENT_ASCII_LIMIT && text[i] ? text[i] : '?';
	line = json_stringn(copy, len);
	free(copy);
	return line;
}

/* Charges one line to budget: false (after the one log.truncated event) when it is spent. */
static bool event_log_charge(struct daemon *d, const char *run_id, const char *stage,
			     struct daemon_log_budget *budget, size_t line_len)
{
	uint64_t cost = (uint64_t)line_len + DAEMON_LOG_LINE_COST;
	char message[DAEMON_ERROR_MESSAGE_MAX];

	if (budget->truncated)
		return false;
	if (cost <= budget->left) {
		budget->left -= cost;
		return true;
	}
	budget->truncated = true;
	snprintf(message, sizeof(message),
		 "the run's log reached its cap of %llu bytes (voidbox serve --max-run-log); later "
		 "log lines are not kept, stage outputs and the report still are",
		 (unsigned long long)d->run_log_max_bytes);
	daemon_event_emit(d, run_id, "log.truncated", "warn", message, stage, NULL, NULL);
	return false;
}

void daemon_event_emit_lines(struct daemon *d, const char *run_id, const char *stage,
			     const char *stream, const char *text, size_t len,
			     struct daemon_log_budget *budget)
{
	size_t start = 0;

	while (start < len) {
		const char *newline = memchr(text + start, '\n', len - start);
		size_t end = newline ? (size_t)(newline - text) : len;
		json_t *line;

		if (!event_log_charge(d, run_id, stage, budget, end - start))
			return;
		line = daemon_text_json(text + start, end - start);

		if (line)
			daemon_event_emit(d, run_id, "log.chunk", "info", json_string_value(line),
					  stage, stream, json_pack("{s:O}", "chunk", line));
		json_decref(line);
		start = end + 1;
	}
}

bool daemon_event_is_last(const json_t *event)
{
	const char *type = json_string_value(json_object_get(event, "event_type"));

	return type && strcmp(type, EVENT_LAST_TYPE) == 0;
}
