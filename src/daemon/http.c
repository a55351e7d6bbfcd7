/*
 * The HTTP API on libmicrohttpd: one thread per connection, so a live event stream may block
 * in its content reader without holding up other clients. Each request is checked in a fixed
 * order before any route code runs: the bearer token (TCP only, every route, compared in
 * constant time), then the size limit (Content-Length over 4 MiB is refused before the body
 * is read; a chunked body that grows past it is discarded and refused at the end), then the
 * route and method. Every error leaves through http_send_error() with the one JSON shape
 * {code, message, retryable}. Routes and bodies are parsed by request.c. libmicrohttpd is
 * opened when the server starts (src/dynlib/mhd_dl.h), so other commands do not load it.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fd_io.h"
#include "common/log.h"
#include "daemon/daemon_internal.h"
#include "dynlib/mhd_dl.h"
#include "runtime/spec.h"

#define HTTP_SSE_BLOCK_SIZE (64u * 1024u)
#define HTTP_SSE_BATCH 64
#define HTTP_SSE_KEEPALIVE_SECS 15
#define HTTP_SSE_KEEPALIVE ": keepalive\n\n"
#define HTTP_DIR_MODE 0700
#define HTTP_FILE_MODE 0600
#define HTTP_RUN_ID_RANDOM_BYTES 4
#define HTTP_DECIMAL 10
#define HTTP_MIME_JSON "application/json"
#define HTTP_MIME_SSE "text/event-stream"
#define HTTP_PERSISTENCE "sqlite"
#define HTTP_DIAGNOSTICS_SHOWN 3
/* one thread per connection: this many at once, the rest wait in the kernel's backlog */
#define HTTP_CONNECTION_LIMIT 256u
/* a connection silent this long is closed (a live stream sends a keepalive well before) */
#define HTTP_IDLE_TIMEOUT_SECS 120u
#define HTTP_PURPOSE "serving the daemon's HTTP API"

/* One request's body as it arrives. */
struct http_request {
	char *body;
	size_t len;
	bool too_large;
	bool answered; /* a response was queued before the body was read */
};

/* An event stream's position and what it still has to send. */
struct http_stream {
	struct daemon *d;
	char run_id[DAEMON_RUN_ID_MAX + 1];
	uint64_t last_event_id;
	char *pending;
	size_t pending_len;
	size_t pending_off;
	bool done;
};

static enum MHD_Result http_send(struct MHD_Connection *conn, unsigned status, void *data,
				 size_t len, const char *mime)
{
	struct MHD_Response *response =
		mhd_dl.create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
	enum MHD_Result rc;

	if (!response) {
		free(data);
		return MHD_NO;
	}
	mhd_dl.add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, mime);
	rc = mhd_dl.queue_response(conn, status, response);
	mhd_dl.destroy_response(response);
	return rc;
}

/* Sends value (stolen) as JSON. */
static enum MHD_Result http_send_json(struct MHD_Connection *conn, unsigned status, json_t *value)
{
	char *text = value ? json_dumps(value, JSON_COMPACT) : NULL;

	json_decref(value);
	if (!text)
		return MHD_NO;
	return http_send(conn, status, text, strlen(text), HTTP_MIME_JSON);
}

static enum MHD_Result http_send_error(struct MHD_Connection *conn, const struct daemon_error *err)
{
	return http_send_json(conn, daemon_error_http_status(err->code), daemon_error_to_json(err));
}

static enum MHD_Result http_fail(struct MHD_Connection *conn, enum daemon_error_code code,
				 const char *message)
{
	struct daemon_error err;

	daemon_error_set(&err, code, "%s", message);
	return http_send_error(conn, &err);
}

/* ---- POST /v1/runs ---- */

/* The stages a spec plans, in order, each with what it waits for. */
static json_t *http_plan_stages(const struct spec *spec)
{
	json_t *stages = json_array();

	if (!stages)
		return NULL;
	if (spec->kind == SPEC_KIND_WORKFLOW) {
		for (size_t i = 0; i < spec->workflow.step_count; i++) {
			const struct spec_step *step = &spec->workflow.steps[i];
			json_t *depends = json_array();

			for (size_t j = 0; j < step->depends_count; j++)
				json_array_append_new(depends, json_string(step->depends_on[j]));
			json_array_append_new(stages, json_pack("{s:s, s:o}", "name", step->name,
								"depends_on", depends));
		}
	} else if (spec->kind == SPEC_KIND_PIPELINE) {
		for (size_t s = 0; s < spec->pipeline.stage_count; s++) {
			const struct spec_stage *stage = &spec->pipeline.stages[s];
			json_t *depends = json_array();

			for (size_t j = 0; s > 0 && j < spec->pipeline.stages[s - 1].box_count; j++)
				json_array_append_new(depends,
					json_string(spec->pipeline.stages[s - 1].box_names[j]));
			for (size_t j = 0; j < stage->box_count; j++)
				json_array_append_new(stages,
					json_pack("{s:s, s:O}", "name", stage->box_names[j],
						  "depends_on", depends));
			json_decref(depends);
		}
	} else if (spec->kind == SPEC_KIND_AGENT) {
		json_array_append_new(stages, json_pack("{s:s, s:[]}", "name", spec->name,
							"depends_on"));
	}
	return stages;
}

/* Loads the spec the run will run, so a broken one is a 400 now rather than a failed run. */
static struct spec *http_check_spec(const char *path, struct daemon_error *err)
{
	struct spec_diagnostics diag;
	struct spec *spec;

	spec_diagnostics_init(&diag);
	spec = spec_load_file(path, &diag);
	if (!spec) {
		char message[DAEMON_ERROR_MESSAGE_MAX] = "";
		size_t used = 0;

		for (size_t i = 0; i < diag.count && i < HTTP_DIAGNOSTICS_SHOWN; i++) {
			int n = snprintf(message + used, sizeof(message) - used, "%s%s",
					 i ? "; " : "", diag.items[i].message);

			if (n < 0 || (size_t)n >= sizeof(message) - used)
				break;
			used += (size_t)n;
		}
		daemon_error_set(err, DAEMON_ERR_INVALID_SPEC, "the spec is not valid: %s",
				 message[0] ? message : "it cannot be read");
	}
	spec_diagnostics_free(&diag);
	return spec;
}

static int http_new_run_id(char *out, size_t len)
{
	unsigned char bytes[HTTP_RUN_ID_RANDOM_BYTES];

	if (getrandom(bytes, sizeof(bytes), 0) != (ssize_t)sizeof(bytes))
		return -EIO;
	snprintf(out, len, "run-%" PRIu64 "-%02x%02x%02x%02x", daemon_now_ms(), bytes[0],
		 bytes[1], bytes[2], bytes[3]);
	return 0;
}

/*
 * Writes an inline spec into the run's directory; its name tells YAML from JSON. A spec that
 * cannot be written whole is removed, so no cut-short spec is left behind.
 */
static int http_store_inline_spec(struct daemon *d, const char *run_id, const char *text,
				  char *path, size_t path_len)
{
	const char *first = text + strspn(text, " \t\r\n");
	int fd, rc;

	snprintf(path, path_len, "%s/runs/%s", d->state_dir, run_id);
	if (mkdir(path, HTTP_DIR_MODE) < 0 && errno != EEXIST)
		return -errno;
	snprintf(path, path_len, "%s/runs/%s/spec.%s", d->state_dir, run_id,
		 *first == '{' ? "json" : "yaml");
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, HTTP_FILE_MODE);
	if (fd < 0)
		return -errno;
	rc = fd_write_full(fd, text, strlen(text));
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc < 0)
		unlink(path);
	return rc;
}

/* The answer when the spec or the run cannot be written into the state directory. */
static enum MHD_Result http_fail_to_store(struct MHD_Connection *conn, const char *what,
					  const char *dir, int rc)
{
	struct daemon_error err;

	if (rc == -ENOSPC || rc == -EDQUOT)
		daemon_error_set(&err, DAEMON_ERR_INTERNAL_ERROR, "cannot store %s in %s: %s: "
				 "free space there, or restart voidbox serve with --state-dir on "
				 "a file system with room; the run was not started", what, dir,
				 strerror(-rc));
	else
		daemon_error_set(&err, DAEMON_ERR_INTERNAL_ERROR, "cannot store %s in %s: %s; "
				 "the run was not started", what, dir, strerror(-rc));
	return http_send_error(conn, &err);
}

/* The answer to a create whose run_id already exists: idempotent while it is active. */
static enum MHD_Result http_existing_run(struct MHD_Connection *conn, struct daemon *d,
					 const char *run_id, enum daemon_run_state state)
{
	struct daemon_error err;
	json_t *run, *answer;
	int rc;

	if (daemon_run_state_terminal(state)) {
		daemon_error_set(&err, DAEMON_ERR_ALREADY_TERMINAL,
				 "run %s already ended (%s); pick a new run_id to run again", run_id,
				 daemon_run_state_name(state));
		return http_send_error(conn, &err);
	}
	pthread_mutex_lock(&d->lock);
	run = daemon_store_run_json(d->store, run_id, &rc);
	pthread_mutex_unlock(&d->lock);
	answer = json_pack("{s:s, s:O, s:s}", "run_id", run_id, "attempt_id",
			   json_object_get(run, "attempt_id"), "state", daemon_run_state_name(state));
	json_decref(run);
	return http_send_json(conn, MHD_HTTP_OK, answer);
}

/* Inserts the run with its planned stages and first events; why it could not, in why. */
static int http_insert_run(struct daemon *d, const struct daemon_create_request *req,
			   const char *run_id, const char *spec_path, json_t *stages, char *why,
			   size_t why_len)
{
	struct daemon_stage_plan *plan = calloc(json_array_size(stages) + 1, sizeof(*plan));
	struct daemon_run_row row = { .id = run_id, .file = req->file ? req->file : "inline",
				      .spec_path = spec_path, .input = req->input,
				      .policy = &req->policy };
	json_t *stage;
	size_t i;
	int rc;

	if (!plan)
		return -ENOMEM;
	json_array_foreach(stages, i, stage) {
		plan[i].name = json_string_value(json_object_get(stage, "name"));
		plan[i].depends_on = json_object_get(stage, "depends_on");
	}
	pthread_mutex_lock(&d->lock);
	rc = daemon_store_insert_run(d->store, &row, plan, json_array_size(stages));
	if (rc == 0) {
		daemon_event_emit_locked(d, run_id, "run.started", "info", "run accepted", NULL,
					 NULL, json_pack("{s:s, s:i}", "file", row.file,
							 "attempt_id", 1));
		json_array_foreach(stages, i, stage)
			daemon_event_emit_locked(d, run_id, "stage.queued", "info", "stage queued",
						 plan[i].name, NULL,
						 json_pack("{s:O}", "depends_on",
							   plan[i].depends_on));
	} else {
		snprintf(why, why_len, "%s", daemon_store_failure(d->store));
	}
	pthread_mutex_unlock(&d->lock);
	free(plan);
	return rc;
}

static enum MHD_Result http_create_run(struct MHD_Connection *conn, struct daemon *d,
				       const struct http_request *request)
{
	char run_id[DAEMON_RUN_ID_MAX + 1], spec_path[DAEMON_PATH_MAX];
	char why[DAEMON_ERROR_MESSAGE_MAX] = "";
	struct daemon_create_request req;
	enum daemon_run_state state;
	struct daemon_error err;
	struct spec *spec = NULL;
	json_t *stages = NULL;
	enum MHD_Result result;
	int rc;

	if (daemon_request_parse_create(request->body, request->len, &req, &err) < 0)
		return http_send_error(conn, &err);
	if (req.run_id[0]) {
		snprintf(run_id, sizeof(run_id), "%s", req.run_id);
		pthread_mutex_lock(&d->lock);
		rc = daemon_store_run_state(d->store, run_id, &state);
		pthread_mutex_unlock(&d->lock);
		if (rc == 0) {
			daemon_create_request_free(&req);
			return http_existing_run(conn, d, run_id, state);
		}
	} else if (http_new_run_id(run_id, sizeof(run_id)) < 0) {
		daemon_create_request_free(&req);
		return http_fail(conn, DAEMON_ERR_INTERNAL_ERROR, "cannot make a run id");
	}
	if (req.file) {
		snprintf(spec_path, sizeof(spec_path), "%s", req.file);
	} else if ((rc = http_store_inline_spec(d, run_id, req.spec_text, spec_path,
						sizeof(spec_path))) < 0) {
		result = http_fail_to_store(conn, "the spec", d->state_dir, rc);
		goto out;
	}
	spec = http_check_spec(spec_path, &err);
	if (!spec) {
		result = http_send_error(conn, &err);
		goto out;
	}
	stages = http_plan_stages(spec);
	rc = stages ? http_insert_run(d, &req, run_id, spec_path, stages, why, sizeof(why))
		    : -ENOMEM;
	if (rc < 0) {
		daemon_error_set(&err, DAEMON_ERR_INTERNAL_ERROR, "cannot record the run: %s; "
				 "the run was not started",
				 rc == -ENOMEM ? "out of memory" : why);
		result = http_send_error(conn, &err);
		goto out;
	}
	daemon_exec_start(d, run_id);
	result = http_send_json(conn, MHD_HTTP_OK,
				json_pack("{s:s, s:i, s:s}", "run_id", run_id, "attempt_id", 1,
					  "state", "running"));
out:
	json_decref(stages);
	spec_free(spec);
	daemon_create_request_free(&req);
	return result;
}

/* ---- reads ---- */

static enum MHD_Result http_get_run(struct MHD_Connection *conn, struct daemon *d,
				    const char *run_id)
{
	json_t *run;
	int rc;

	pthread_mutex_lock(&d->lock);
	run = daemon_store_run_json(d->store, run_id, &rc);
	for (struct daemon_active_run *active = d->active; run && active; active = active->next)
		if (strcmp(active->id, run_id) == 0 && active->pid > 0)
			json_object_set_new(run, "pid", json_integer(active->pid));
	pthread_mutex_unlock(&d->lock);
	if (rc == -ENOENT)
		return http_fail(conn, DAEMON_ERR_NOT_FOUND, "no run has this id");
	if (!run)
		return http_fail(conn, DAEMON_ERR_INTERNAL_ERROR, "cannot read the run");
	/* asked of the run's own process, so outside the lock */
	json_object_set_new(run, "messaging", daemon_messaging_run_json(d, run_id));
	return http_send_json(conn, MHD_HTTP_OK, run);
}

static enum MHD_Result http_list_runs(struct MHD_Connection *conn, struct daemon *d)
{
	const char *state_text =
		mhd_dl.lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "state");
	enum daemon_state_filter filter;
	enum daemon_run_state state = DAEMON_RUN_PENDING;
	struct daemon_error err;
	json_t *runs;

	if (daemon_request_parse_state_filter(state_text, &filter, &state, &err) < 0)
		return http_send_error(conn, &err);
	pthread_mutex_lock(&d->lock);
	runs = daemon_store_runs_json(d->store, filter, state);
	pthread_mutex_unlock(&d->lock);
	if (!runs)
		return http_fail(conn, DAEMON_ERR_INTERNAL_ERROR, "cannot read the runs");
	return http_send_json(conn, MHD_HTTP_OK, json_pack("{s:o}", "runs", runs));
}

/* True when the run exists; otherwise a 404 was sent. */
static bool http_run_exists(struct MHD_Connection *conn, struct daemon *d, const char *run_id,
			    enum MHD_Result *result)
{
	enum daemon_run_state state;
	int rc;

	pthread_mutex_lock(&d->lock);
	rc = daemon_store_run_state(d->store, run_id, &state);
	pthread_mutex_unlock(&d->lock);
	if (rc == 0)
		return true;
	*result = http_fail(conn, DAEMON_ERR_NOT_FOUND, "no run has this id");
	return false;
}

static enum MHD_Result http_get_stages(struct MHD_Connection *conn, struct daemon *d,
				       const char *run_id)
{
	enum MHD_Result result;
	json_t *stages;

	if (!http_run_exists(conn, d, run_id, &result))
		return result;
	pthread_mutex_lock(&d->lock);
	stages = daemon_store_stages_json(d->store, run_id);
	pthread_mutex_unlock(&d->lock);
	if (!stages)
		return http_fail(conn, DAEMON_ERR_INTERNAL_ERROR, "cannot read the stages");
	return http_send_json(conn, MHD_HTTP_OK, stages);
}

static enum MHD_Result http_get_artifact(struct MHD_Connection *conn, struct daemon *d,
					 const struct daemon_route_match *match, const char *name,
					 enum daemon_error_code missing)
{
	enum MHD_Result result;
	char *media_type;
	void *data;
	size_t len;
	int rc;

	if (!http_run_exists(conn, d, match->run_id, &result))
		return result;
	pthread_mutex_lock(&d->lock);
	rc = daemon_store_get_artifact(d->store, match->run_id, match->stage, name, &media_type,
				       &data, &len);
	pthread_mutex_unlock(&d->lock);
	if (rc == -ENOENT)
		return http_fail(conn, missing, "the stage has no such output (yet)");
	if (rc < 0)
		return http_fail(conn, DAEMON_ERR_INTERNAL_ERROR, "cannot read the artifact");
	result = http_send(conn, MHD_HTTP_OK, data, len, media_type);
	free(media_type);
	return result;
}

/* POST .../cancel and .../stop: both take {reason?} and answer once the run has ended. */
static enum MHD_Result http_end_run(struct MHD_Connection *conn, struct daemon *d,
				    const char *run_id, const struct http_request *request,
				    enum daemon_route route)
{
	struct daemon_error err;
	json_t *run, *answer;
	char *reason;
	int rc;

	if (daemon_request_parse_cancel(request->body, request->len, &reason, &err) < 0)
		return http_send_error(conn, &err);
	rc = route == DAEMON_ROUTE_RUN_STOP ? daemon_exec_stop(d, run_id, reason)
					    : daemon_exec_cancel(d, run_id, reason);
	free(reason);
	if (rc == -ENOENT)
		return http_fail(conn, DAEMON_ERR_NOT_FOUND, "no run has this id");
	pthread_mutex_lock(&d->lock);
	run = daemon_store_run_json(d->store, run_id, &rc);
	pthread_mutex_unlock(&d->lock);
	if (!run)
		return http_fail(conn, DAEMON_ERR_INTERNAL_ERROR, "cannot read the run");
	answer = json_pack("{s:s, s:O, s:O*}", "run_id", run_id, "state",
			   json_object_get(run, "status"), "terminal_event_id",
			   json_object_get(run, "terminal_event_id"));
	json_decref(run);
	return http_send_json(conn, MHD_HTTP_OK, answer);
}

/* ---- events ---- */

static enum MHD_Result http_list_events(struct MHD_Connection *conn, struct daemon *d,
					const char *run_id, uint64_t after)
{
	enum MHD_Result result;
	json_t *events;

	if (!http_run_exists(conn, d, run_id, &result))
		return result;
	pthread_mutex_lock(&d->lock);
	events = daemon_store_events_json(d->store, run_id, after, 0);
	pthread_mutex_unlock(&d->lock);
	if (!events)
		return http_fail(conn, DAEMON_ERR_INTERNAL_ERROR, "cannot read the events");
	return http_send_json(conn, MHD_HTTP_OK, events);
}

/* GET /v1/runs/{id}/telemetry[?from_seq=N][&stage_name=S] */
static enum MHD_Result http_telemetry(struct MHD_Connection *conn, struct daemon *d,
				      const char *run_id)
{
	const char *from = mhd_dl.lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "from_seq");
	const char *stage = mhd_dl.lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND,
							   "stage_name");
	struct daemon_error err;
	uint64_t from_seq, next_seq;
	json_t *run, *samples, *answer;
	int rc;

	if (daemon_request_parse_telemetry_query(from, stage, &from_seq, &err) < 0)
		return http_send_error(conn, &err);
	pthread_mutex_lock(&d->lock);
	run = daemon_store_run_json(d->store, run_id, &rc);
	samples = run ? daemon_store_telemetry_json(d->store, run_id, from_seq, stage, &next_seq)
		      : NULL;
	pthread_mutex_unlock(&d->lock);
	if (!run && rc == -ENOENT)
		return http_fail(conn, DAEMON_ERR_NOT_FOUND, "no run has this id");
	if (!run || !samples) {
		json_decref(run);
		return http_fail(conn, DAEMON_ERR_INTERNAL_ERROR, "cannot read the telemetry");
	}
	answer = json_pack("{s:s, s:O, s:I, s:o}", "run_id", run_id, "attempt_id",
			   json_object_get(run, "attempt_id"), "next_seq", (json_int_t)next_seq,
			   "samples", samples);
	json_decref(run);
	return http_send_json(conn, MHD_HTTP_OK, answer);
}

/* Formats events as SSE frames into stream->pending; notes the end of the run's events. */
static void http_stream_format(struct http_stream *stream, json_t *events)
{
	size_t capacity = 0, used = 0, i;
	char *text = NULL;
	json_t *event;

	json_array_foreach(events, i, event) {
		char *data = json_dumps(event, JSON_COMPACT);
		const char *type = json_string_value(json_object_get(event, "event_type"));
		size_t need;
		char *grown;

		if (!data)
			continue;
		need = strlen(data) + strlen(type ? type : "") + 64;
		if (used + need > capacity) {
			capacity = (used + need) * 2;
			grown = realloc(text, capacity);
			if (!grown) {
				free(data);
				break;
			}
			text = grown;
		}
		stream->last_event_id =
			(uint64_t)json_integer_value(json_object_get(event, "event_id"));
		used += (size_t)snprintf(text + used, capacity - used,
					 "id: %" PRIu64 "\nevent: %s\ndata: %s\n\n",
					 stream->last_event_id, type ? type : "message", data);
		free(data);
		if (daemon_event_is_last(event))
			stream->done = true;
	}
	stream->pending = text;
	stream->pending_len = used;
	stream->pending_off = 0;
}

/* Waits (under the lock) for events after the stream's position, or a keepalive interval. */
static void http_stream_fill(struct http_stream *stream)
{
	struct daemon *d = stream->d;
	struct timespec deadline;
	json_t *events;

	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += HTTP_SSE_KEEPALIVE_SECS;
	pthread_mutex_lock(&d->lock);
	for (;;) {
		events = daemon_store_events_json(d->store, stream->run_id, stream->last_event_id,
						  HTTP_SSE_BATCH);
		if (!events || json_array_size(events) > 0 || d->stopping)
			break;
		json_decref(events);
		events = NULL;
		if (pthread_cond_timedwait(&d->changed, &d->lock, &deadline) == ETIMEDOUT)
			break;
	}
	if (!events && !d->stopping) {
		stream->pending = strdup(HTTP_SSE_KEEPALIVE);
		stream->pending_len = stream->pending ? strlen(HTTP_SSE_KEEPALIVE) : 0;
		stream->pending_off = 0;
	} else if (events && json_array_size(events) > 0) {
		http_stream_format(stream, events);
	} else {
		stream->done = true;
	}
	pthread_mutex_unlock(&d->lock);
	json_decref(events);
}

static ssize_t http_stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct http_stream *stream = cls;
	size_t n;

	if (stream->pending_off == stream->pending_len) {
		free(stream->pending);
		stream->pending = NULL;
		stream->pending_len = stream->pending_off = 0;
		if (stream->done)
			return MHD_CONTENT_READER_END_OF_STREAM;
		http_stream_fill(stream);
		if (!stream->pending)
			return stream->done ? MHD_CONTENT_READER_END_OF_STREAM : 0;
	}
	n = stream->pending_len - stream->pending_off;
	if (n > max)
		n = max;
	memcpy(buf, stream->pending + stream->pending_off, n);
	stream->pending_off += n;
	return (ssize_t)n;
}

static void http_stream_free(void *cls)
{
	struct http_stream *stream = cls;

	free(stream->pending);
	free(stream);
}

static enum MHD_Result http_stream_events(struct MHD_Connection *conn, struct daemon *d,
					  const char *run_id, uint64_t after)
{
	const char *last_id = mhd_dl.lookup_connection_value(conn, MHD_HEADER_KIND, "Last-Event-ID");
	struct http_stream *stream;
	struct MHD_Response *response;
	struct daemon_error err;
	enum MHD_Result result;
	uint64_t resume;

	if (!http_run_exists(conn, d, run_id, &result))
		return result;
	if (last_id && daemon_request_parse_event_id(last_id, &resume, &err) == 0 && resume > after)
		after = resume;
	stream = calloc(1, sizeof(*stream));
	if (!stream)
		return MHD_NO;
	stream->d = d;
	stream->last_event_id = after;
	snprintf(stream->run_id, sizeof(stream->run_id), "%s", run_id);
	response = mhd_dl.create_response_from_callback(MHD_SIZE_UNKNOWN, HTTP_SSE_BLOCK_SIZE,
							http_stream_read, stream, http_stream_free);
	if (!response) {
		http_stream_free(stream);
		return MHD_NO;
	}
	mhd_dl.add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, HTTP_MIME_SSE);
	mhd_dl.add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	result = mhd_dl.queue_response(conn, MHD_HTTP_OK, response);
	mhd_dl.destroy_response(response);
	return result;
}

static bool http_wants_stream(struct MHD_Connection *conn)
{
	const char *accept = mhd_dl.lookup_connection_value(conn, MHD_HEADER_KIND,
							    MHD_HTTP_HEADER_ACCEPT);

	return accept && strstr(accept, HTTP_MIME_SSE);
}

static enum MHD_Result http_events(struct MHD_Connection *conn, struct daemon *d,
				   const struct daemon_route_match *match)
{
	const char *from = mhd_dl.lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND,
							  "from_event_id");
	struct daemon_error err;
	uint64_t after;

	if (daemon_request_parse_event_id(from, &after, &err) < 0)
		return http_send_error(conn, &err);
	if (match->route == DAEMON_ROUTE_RUN_EVENTS_STREAM || http_wants_stream(conn))
		return http_stream_events(conn, d, match->run_id, after);
	return http_list_events(conn, d, match->run_id, after);
}

/* ---- dispatch ---- */

static bool http_method_allowed(enum daemon_route route, const char *method)
{
	bool get = strcmp(method, MHD_HTTP_METHOD_GET) == 0;
	bool post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;

	switch (route) {
	case DAEMON_ROUTE_RUNS:
		return get || post;
	case DAEMON_ROUTE_RUN_CANCEL:
	case DAEMON_ROUTE_RUN_STOP:
		return post;
	case DAEMON_ROUTE_NONE:
		return true;
	default:
		return get;
	}
}

/* The run messaging routes (messaging.c), or the daemon's 404. */
static enum MHD_Result http_messaging(struct MHD_Connection *conn, struct daemon *d,
				      const char *url, const char *method,
				      const struct http_request *request)
{
	struct daemon_error err;
	json_t *answer = NULL;
	unsigned status = 0;
	bool failed;

	if (!daemon_messaging_route(d, url, method, request->body, request->len, &status, &answer,
				    &err, &failed))
		return http_fail(conn, DAEMON_ERR_NOT_FOUND, "route not found");
	return failed ? http_send_error(conn, &err) : http_send_json(conn, status, answer);
}

static enum MHD_Result http_dispatch(struct MHD_Connection *conn, struct daemon *d,
				     const char *url, const char *method,
				     const struct http_request *request)
{
	struct daemon_route_match match;

	daemon_route_parse(url, &match);
	if (!http_method_allowed(match.route, method))
		return http_fail(conn, DAEMON_ERR_METHOD_NOT_ALLOWED,
				 "this route does not take that method (see docs/daemon.md)");
	switch (match.route) {
	case DAEMON_ROUTE_HEALTH:
		return http_send_json(conn, MHD_HTTP_OK,
				      json_pack("{s:s, s:s}", "status", "ok", "persistence",
						HTTP_PERSISTENCE));
	case DAEMON_ROUTE_RUNS:
		if (strcmp(method, MHD_HTTP_METHOD_POST) == 0)
			return http_create_run(conn, d, request);
		return http_list_runs(conn, d);
	case DAEMON_ROUTE_RUN:
		return http_get_run(conn, d, match.run_id);
	case DAEMON_ROUTE_RUN_EVENTS:
	case DAEMON_ROUTE_RUN_EVENTS_STREAM:
		return http_events(conn, d, &match);
	case DAEMON_ROUTE_RUN_STAGES:
		return http_get_stages(conn, d, match.run_id);
	case DAEMON_ROUTE_RUN_OUTPUT_FILE:
		return http_get_artifact(conn, d, &match, "output",
					 DAEMON_ERR_STRUCTURED_OUTPUT_MISSING);
	case DAEMON_ROUTE_RUN_ARTIFACT:
		return http_get_artifact(conn, d, &match, match.artifact,
					 DAEMON_ERR_ARTIFACT_NOT_FOUND);
	case DAEMON_ROUTE_RUN_CANCEL:
	case DAEMON_ROUTE_RUN_STOP:
		return http_end_run(conn, d, match.run_id, request, match.route);
	case DAEMON_ROUTE_RUN_TELEMETRY:
		return http_telemetry(conn, d, match.run_id);
	case DAEMON_ROUTE_NONE:
		break;
	}
	return http_messaging(conn, d, url, method, request);
}

/* The checks made before the body is read: token, then declared size. */
static enum MHD_Result http_first_call(struct MHD_Connection *conn, struct daemon *d,
				       struct http_request *request)
{
	const char *length;
	unsigned long long declared;
	char *end;

	if (d->listen_kind == DAEMON_LISTEN_TCP &&
	    !daemon_request_token_matches(mhd_dl.lookup_connection_value(conn, MHD_HEADER_KIND,
								   MHD_HTTP_HEADER_AUTHORIZATION),
				       d->token)) {
		request->answered = true;
		return http_fail(conn, DAEMON_ERR_UNAUTHORIZED,
				 "send Authorization: Bearer <token> with the token from the daemon's --token-file");
	}
	length = mhd_dl.lookup_connection_value(conn, MHD_HEADER_KIND,
						MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (length) {
		declared = strtoull(length, &end, HTTP_DECIMAL);
		if (declared > DAEMON_REQUEST_MAX_BYTES) {
			request->answered = true;
			return http_fail(conn, DAEMON_ERR_PAYLOAD_TOO_LARGE,
					 "the request body is over 4 MiB; pass a large spec by file path");
		}
	}
	return MHD_YES;
}

static enum MHD_Result http_handle(void *cls, struct MHD_Connection *conn, const char *url,
				   const char *method, const char *version,
				   const char *upload_data, size_t *upload_data_size, void **con_cls)
{
	struct daemon *d = cls;
	struct http_request *request = *con_cls;

	if (!request) {
		request = calloc(1, sizeof(*request));
		if (!request)
			return MHD_NO;
		*con_cls = request;
		return http_first_call(conn, d, request);
	}
	if (request->answered) {
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (*upload_data_size > 0) {
		size_t size = *upload_data_size;
		char *grown;

		*upload_data_size = 0;
		if (request->too_large || request->len + size > DAEMON_REQUEST_MAX_BYTES) {
			request->too_large = true;
			return MHD_YES;
		}
		grown = realloc(request->body, request->len + size + 1);
		if (!grown)
			return MHD_NO;
		request->body = grown;
		memcpy(request->body + request->len, upload_data, size);
		request->len += size;
		request->body[request->len] = '\0';
		return MHD_YES;
	}
	if (request->too_large)
		return http_fail(conn, DAEMON_ERR_PAYLOAD_TOO_LARGE,
				 "the request body is over 4 MiB; pass a large spec by file path");
	return http_dispatch(conn, d, url, method, request);
}

static void http_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			   enum MHD_RequestTerminationCode code)
{
	struct http_request *request = *con_cls;

	if (request) {
		free(request->body);
		free(request);
		*con_cls = NULL;
	}
}

struct MHD_Daemon *daemon_http_start(struct daemon *d, int listen_fd, char *err, size_t errlen)
{
	struct MHD_Daemon *mhd;

	if (mhd_dl_load(HTTP_PURPOSE, err, errlen) < 0)
		return NULL;
	mhd = mhd_dl.start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
					  MHD_USE_ITC | MHD_USE_ERROR_LOG,
				  0, NULL, NULL, http_handle, d,
				  MHD_OPTION_LISTEN_SOCKET, listen_fd,
				  MHD_OPTION_NOTIFY_COMPLETED, http_completed, d,
				  MHD_OPTION_CONNECTION_LIMIT, HTTP_CONNECTION_LIMIT,
				  MHD_OPTION_CONNECTION_TIMEOUT, HTTP_IDLE_TIMEOUT_SECS,
				  MHD_OPTION_END);
	if (!mhd)
		snprintf(err, errlen, "libmicrohttpd could not start on the listening socket");
	return mhd;
}

void daemon_http_stop(struct MHD_Daemon *mhd)
{
	if (mhd)
		mhd_dl.stop_daemon(mhd);
}
