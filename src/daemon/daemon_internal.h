/*
 * What the daemon's files share. The daemon is split by job: request.c parses what clients
 * send (pure functions, fuzzed), store.c keeps runs in SQLite, events.c appends events and
 * wakes whoever streams them, exec.c runs and cancels runs as child processes, http.c routes
 * requests, listen.c makes the sockets and the token, daemon.c ties them together. One mutex
 * (struct daemon.lock) guards the store connection and the table of active runs, so an event's
 * id is assigned and its row written in one step, and a condition variable on the same mutex
 * wakes event streams and cancellers.
 */
#ifndef VOIDBOX_DAEMON_DAEMON_INTERNAL_H
#define VOIDBOX_DAEMON_DAEMON_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "daemon/daemon.h"

/* Limits on what a client sends; every one is checked before anything is stored. */
#define DAEMON_REQUEST_MAX_BYTES (4u * 1024u * 1024u)
#define DAEMON_RUN_ID_MAX 64
#define DAEMON_NAME_MAX 128
#define DAEMON_ERROR_MESSAGE_MAX 512
#define DAEMON_PATH_MAX 4096
/* leaves room in a DAEMON_PATH_MAX path for runs/<id>/<file> below it */
#define DAEMON_STATE_DIR_MAX 3072

/* Policy bounds and defaults (docs/daemon.md, "Policy"). */
#define DAEMON_POLICY_DEFAULT_PARALLEL 4u
#define DAEMON_POLICY_MAX_PARALLEL 64u
#define DAEMON_POLICY_DEFAULT_RETRIES 0u
#define DAEMON_POLICY_MAX_RETRIES 10u
#define DAEMON_POLICY_DEFAULT_STAGE_TIMEOUT 3600u
#define DAEMON_POLICY_MAX_STAGE_TIMEOUT (24u * 3600u)
#define DAEMON_POLICY_DEFAULT_GRACE 30u
#define DAEMON_POLICY_MAX_GRACE 3600u

/* Telemetry: samples kept per run (upstream's default ring size), and per response. */
#define DAEMON_TELEMETRY_KEEP 5000
#define DAEMON_TELEMETRY_PAGE 1000
/*
 * What one run's log.chunk events may take in the store (voidbox serve --max-run-log). Every
 * line of a guest's output becomes a row, so a guest printing newlines without end would
 * otherwise fill the host's disk; a line is counted as its text and DAEMON_LOG_LINE_COST
 * bytes more, what its row and index entry take. Past the cap one log.truncated event says
 * so and later lines are not kept: stage outputs and the report still are.
 */
#define DAEMON_RUN_LOG_DEFAULT_BYTES (64ull * 1024u * 1024u)
#define DAEMON_LOG_LINE_COST 128u
/* a host sample of the run's process (the VMM) this often while it runs */
#define DAEMON_HOST_SAMPLE_MS 1000u

/* The error codes of the API's one error shape {code, message, retryable}. */
enum daemon_error_code {
	DAEMON_ERR_INVALID_SPEC,
	DAEMON_ERR_INVALID_POLICY,
	DAEMON_ERR_INVALID_PARAMS,
	DAEMON_ERR_NOT_FOUND,
	DAEMON_ERR_METHOD_NOT_ALLOWED,
	DAEMON_ERR_ALREADY_TERMINAL,
	DAEMON_ERR_STRUCTURED_OUTPUT_MISSING,
	DAEMON_ERR_ARTIFACT_NOT_FOUND,
	DAEMON_ERR_PAYLOAD_TOO_LARGE,
	DAEMON_ERR_UNAUTHORIZED,
	DAEMON_ERR_INTERNAL_ERROR,
};

struct daemon_error {
	enum daemon_error_code code;
	char message[DAEMON_ERROR_MESSAGE_MAX];
};

const char *daemon_error_name(enum daemon_error_code code);
unsigned daemon_error_http_status(enum daemon_error_code code);
bool daemon_error_retryable(enum daemon_error_code code);
/* Fills err and returns -1, so parsers can `return daemon_error_set(...)`. */
int daemon_error_set(struct daemon_error *err, enum daemon_error_code code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* {code, message, retryable}; NULL on allocation failure. */
json_t *daemon_error_to_json(const struct daemon_error *err);

enum daemon_run_state {
	DAEMON_RUN_PENDING,
	DAEMON_RUN_RUNNING,
	DAEMON_RUN_SUCCEEDED,
	DAEMON_RUN_FAILED,
	DAEMON_RUN_CANCELLED,
};

const char *daemon_run_state_name(enum daemon_run_state state);
/* Accepts upstream's alias "completed" for succeeded. 0 or -EINVAL. */
int daemon_run_state_parse(const char *text, enum daemon_run_state *out);
bool daemon_run_state_terminal(enum daemon_run_state state);

enum daemon_state_filter {
	DAEMON_FILTER_ALL,
	DAEMON_FILTER_ACTIVE,
	DAEMON_FILTER_TERMINAL,
	DAEMON_FILTER_ONE_STATE, /* one named state, in filter_state */
};

struct daemon_policy {
	uint32_t max_parallel_microvms_per_run;
	uint32_t max_stage_retries;
	uint32_t stage_timeout_secs;
	uint32_t cancel_grace_period_secs;
};

void daemon_policy_default(struct daemon_policy *policy);
json_t *daemon_policy_to_json(const struct daemon_policy *policy);

/* POST /v1/runs, parsed. Exactly one of spec_text and file is set. */
struct daemon_create_request {
	char *spec_text;
	char *file;
	char *input; /* NULL: none */
	char run_id[DAEMON_RUN_ID_MAX + 1]; /* "" when the daemon picks one */
	struct daemon_policy policy;
};

int daemon_request_parse_create(const char *body, size_t len, struct daemon_create_request *out,
				struct daemon_error *err);
void daemon_create_request_free(struct daemon_create_request *req);
/* POST /v1/runs/{id}/cancel: an empty body or {reason?}. *reason is NULL or malloc'd. */
int daemon_request_parse_cancel(const char *body, size_t len, char **reason,
				struct daemon_error *err);
/* ?from_event_id=N: NULL or "" is 0. */
int daemon_request_parse_event_id(const char *text, uint64_t *out, struct daemon_error *err);
/* /telemetry?from_seq=N&stage_name=S: from_seq as from_event_id; stage_name NULL or a name. */
int daemon_request_parse_telemetry_query(const char *from_seq, const char *stage_name,
					 uint64_t *out, struct daemon_error *err);
/*
 * A guest telemetry sample relayed by a run (its VM's agent wrote the numbers): a new object
 * with only cpu_percent (0-100) and the six counters (whole numbers >= 0); NULL otherwise.
 */
json_t *daemon_request_guest_sample(const json_t *guest);
/* ?state=active|terminal|<state>: NULL or "" is all. */
int daemon_request_parse_state_filter(const char *text, enum daemon_state_filter *filter,
				      enum daemon_run_state *state, struct daemon_error *err);
/*
 * Checks an Authorization header against "Bearer <token>" in constant time: every byte of
 * token is compared whatever the header holds, so the time says nothing about a prefix.
 */
bool daemon_request_token_matches(const char *header, const char *token);
/* A run id, stage or artifact name: 1..max of [A-Za-z0-9._-], not starting with '.'. */
bool daemon_name_valid(const char *name, size_t max);

enum daemon_route {
	DAEMON_ROUTE_NONE,
	DAEMON_ROUTE_HEALTH,
	DAEMON_ROUTE_RUNS,
	DAEMON_ROUTE_RUN,
	DAEMON_ROUTE_RUN_EVENTS,
	DAEMON_ROUTE_RUN_EVENTS_STREAM,
	DAEMON_ROUTE_RUN_STAGES,
	DAEMON_ROUTE_RUN_OUTPUT_FILE,
	DAEMON_ROUTE_RUN_ARTIFACT,
	DAEMON_ROUTE_RUN_CANCEL,
	DAEMON_ROUTE_RUN_STOP,
	DAEMON_ROUTE_RUN_TELEMETRY,
};

struct daemon_route_match {
	enum daemon_route route;
	char run_id[DAEMON_RUN_ID_MAX + 1];
	char stage[DAEMON_NAME_MAX + 1];
	char artifact[DAEMON_NAME_MAX + 1];
};

/* Matches a request path (no query) to a route; ids failing daemon_name_valid match none. */
enum daemon_route daemon_route_parse(const char *path, struct daemon_route_match *out);

/* ---- store.c: the SQLite run store ---- */

struct daemon_store;

/* A new run's row. */
struct daemon_run_row {
	const char *id;
	const char *file;      /* what the client named ("inline" for an inline spec) */
	const char *spec_path; /* the file the run's process loads */
	const char *input;
	const struct daemon_policy *policy;
};

/* A stage the spec plans, inserted queued at create. */
struct daemon_stage_plan {
	const char *name;
	json_t *depends_on; /* array of names; borrowed */
};

/* What a run's process needs; strings malloc'd. */
struct daemon_run_launch {
	char *spec_path;
	char *input;
	struct daemon_policy policy;
};

int daemon_store_open(const char *dir, struct daemon_store **out, char *err, size_t errlen);
void daemon_store_close(struct daemon_store *store);
const char *daemon_store_path(const struct daemon_store *store);
/*
 * The last failed write as a sentence with what to do (its file system full or read-only);
 * read it under the daemon's lock, right after the call that failed.
 */
const char *daemon_store_failure(const struct daemon_store *store);
int daemon_store_insert_run(struct daemon_store *store, const struct daemon_run_row *row,
			    const struct daemon_stage_plan *stages, size_t stage_count);
/* 0, -ENOENT for an unknown id. */
int daemon_store_run_state(struct daemon_store *store, const char *id,
			   enum daemon_run_state *state);
int daemon_store_run_launch(struct daemon_store *store, const char *id,
			    struct daemon_run_launch *out);
void daemon_run_launch_free(struct daemon_run_launch *launch);
int daemon_store_set_running(struct daemon_store *store, const char *id, uint32_t attempt_id,
			     pid_t pid);
/* Moves a run to a terminal state; report_json may be NULL. */
int daemon_store_finish_run(struct daemon_store *store, const char *id,
			    enum daemon_run_state state, const char *terminal_reason,
			    const char *error, int exit_code, const char *report_json,
			    uint64_t terminal_event_id);
/* The RunState JSON of one run; NULL with -ENOENT/-ENOMEM in *rc. */
json_t *daemon_store_run_json(struct daemon_store *store, const char *id, int *rc);
json_t *daemon_store_runs_json(struct daemon_store *store, enum daemon_state_filter filter,
			       enum daemon_run_state state);
json_t *daemon_store_stages_json(struct daemon_store *store, const char *id);
/* Appends an event (its id: the run's next); returns the id or a negative errno. */
int64_t daemon_store_append_event(struct daemon_store *store, const char *run_id, json_t *event);
/* Events with id > after, oldest first, at most limit (0: all). */
json_t *daemon_store_events_json(struct daemon_store *store, const char *run_id, uint64_t after,
				 size_t limit);
int daemon_store_stage_update(struct daemon_store *store, const char *run_id, const char *name,
			      const char *status, uint32_t attempt, int exit_code,
			      uint64_t duration_ms);
/* Names of the run's stages in status ("running", "queued"), as a JSON array. */
json_t *daemon_store_stages_in(struct daemon_store *store, const char *run_id,
			       const char *status);
/*
 * Appends a telemetry sample (guest and host are {..} objects or NULL, borrowed) and keeps
 * the newest DAEMON_TELEMETRY_KEEP of the run; returns its seq (1, 2, ...) or -errno.
 */
int64_t daemon_store_add_telemetry(struct daemon_store *store, const char *run_id,
				   uint64_t ts_ms, const char *stage_name, const json_t *guest,
				   const json_t *host);
/*
 * Samples with seq >= from_seq (of stage_name only, unless NULL), oldest first, at most
 * DAEMON_TELEMETRY_PAGE; *next_seq is the from_seq that continues after them.
 */
json_t *daemon_store_telemetry_json(struct daemon_store *store, const char *run_id,
				    uint64_t from_seq, const char *stage_name, uint64_t *next_seq);
int daemon_store_put_artifact(struct daemon_store *store, const char *run_id, const char *stage,
			      const char *name, const char *media_type, const void *data,
			      size_t len);
/* 0 with a malloc'd copy, -ENOENT when absent. */
int daemon_store_get_artifact(struct daemon_store *store, const char *run_id, const char *stage,
			      const char *name, char **media_type, void **data, size_t *len);
/* Ids of every non-terminal run (restart recovery), as a JSON array. */
json_t *daemon_store_unfinished_runs(struct daemon_store *store);

/* ---- the daemon itself ---- */

/* One run whose process the daemon started and has not yet reaped. */
struct daemon_active_run {
	char id[DAEMON_RUN_ID_MAX + 1];
	pid_t pid; /* also its process group; 0 between attempts */
	bool cancel_requested;
	uint64_t cancel_deadline_ms; /* SIGKILL after this (monotonic) */
	char *cancel_reason;
	bool stop_requested;	   /* POST .../stop: SERVICE_STOP_SIGNAL was sent */
	uint64_t stop_deadline_ms; /* cancelled after this (monotonic) when still running */
	struct daemon_active_run *next;
};

struct daemon {
	pthread_mutex_t lock;
	pthread_cond_t changed; /* an event was appended, a run ended, or the daemon stops */
	struct daemon_store *store;
	struct daemon_active_run *active;
	size_t active_count;
	bool stopping;
	enum daemon_listen_kind listen_kind;
	char token[DAEMON_NAME_MAX + 1]; /* tcp: the bearer token */
	char state_dir[DAEMON_STATE_DIR_MAX];
	char voidbox_exe[DAEMON_PATH_MAX];
	uint64_t run_log_max_bytes;
};

/* What is left of one run's log cap (struct daemon's run_log_max_bytes). */
struct daemon_log_budget {
	uint64_t left;
	bool truncated; /* the log.truncated event was sent */
};

uint64_t daemon_now_ms(void);      /* wall clock, for timestamps */
uint64_t daemon_monotonic_ms(void); /* for deadlines */

/* ---- events.c ---- */

/*
 * Appends an event to a run and wakes its streams; called WITH d->lock held. payload may be
 * NULL and is stolen. Returns the event id or a negative errno.
 */
int64_t daemon_event_emit_locked(struct daemon *d, const char *run_id, const char *type,
				 const char *level, const char *message, const char *stage,
				 const char *stream, json_t *payload);
int64_t daemon_event_emit(struct daemon *d, const char *run_id, const char *type,
			  const char *level, const char *message, const char *stage,
			  const char *stream, json_t *payload);
/*
 * One log.chunk event per line of text (the last line need not end in '\n'), each charged to
 * budget; the line that does not fit sends one log.truncated event instead, and no line is
 * kept after it.
 */
void daemon_event_emit_lines(struct daemon *d, const char *run_id, const char *stage,
			     const char *stream, const char *text, size_t len,
			     struct daemon_log_budget *budget);
/* True for the event that ends a run's stream (log.closed). */
bool daemon_event_is_last(const json_t *event);

/* ---- exec.c ---- */

/* Starts the run's process on its own thread. 0 or a negative errno (the run is failed). */
int daemon_exec_start(struct daemon *d, const char *run_id);
/*
 * Cancels a run: SIGTERM to its process group, SIGKILL after the policy's grace, waits until
 * it is terminal. Returns 0 when the run is (now) terminal, -ENOENT for an unknown run.
 */
int daemon_exec_cancel(struct daemon *d, const char *run_id, const char *reason);
/*
 * Stops a run gracefully: SERVICE_STOP_SIGNAL to its process, which stops its service stages
 * (their exit codes decide the run's state); a run still going after the policy's grace is
 * cancelled. Waits until it is terminal; same returns as daemon_exec_cancel.
 */
int daemon_exec_stop(struct daemon *d, const char *run_id, const char *reason);
/* Daemon shutdown: cancels every active run and waits for their threads. */
void daemon_exec_stop_all(struct daemon *d);
/* Restart recovery: non-terminal runs become failed with reason daemon_restarted. */
void daemon_exec_recover(struct daemon *d);

/* ---- telemetry.c ---- */

/* The previous sample of one run process, for its CPU share since then. */
struct daemon_host_sampler {
	bool has_previous;
	uint64_t previous_ticks;
	uint64_t previous_ms; /* monotonic */
};

/*
 * {rss_bytes, cpu_percent, io_read_bytes, io_write_bytes} of process pid now (now_ms is
 * monotonic); cpu_percent is 0 on the first sample. NULL when the process is gone.
 */
json_t *daemon_host_sample(struct daemon_host_sampler *sampler, pid_t pid, uint64_t now_ms);

/* "YYYY-MM-DDTHH:MM:SS.mmmZ" (RFC 3339, UTC) of ms since the epoch. */
#define DAEMON_RFC3339_MAX 32
void daemon_rfc3339_ms(uint64_t ms, char out[DAEMON_RFC3339_MAX]);

/*
 * The stages a guest sample of the box called box (may be NULL) is recorded under, given
 * running (the run's running stage names, a JSON array): box itself when it is a running
 * stage (a pipeline box, an agent); else every running stage (a workflow's steps share the
 * spec's one box, and parallel steps each get the sample); else box (between stages). Fills
 * at most max labels (pointers into box and running) and returns how many.
 */
size_t daemon_telemetry_labels(const char *box, const json_t *running, const char **labels,
			       size_t max);

/* ---- http.c ---- */

struct MHD_Daemon;
/* Starts libmicrohttpd on listen_fd (ownership passes to it). NULL with err set on failure. */
struct MHD_Daemon *daemon_http_start(struct daemon *d, int listen_fd, char *err, size_t errlen);
void daemon_http_stop(struct MHD_Daemon *mhd);

/* ---- listen.c ---- */

/*
 * A listening socket for address (unix: mode 0600, a stale socket replaced). *claim receives
 * the claim on a TCP listener's port on 127.0.0.1 or every address (common/loopback_claim.h:
 * no sandbox's guest reaches the API through its gateway), to close after the listener; -1
 * when there is none.
 */
int daemon_listen_open(const struct daemon_address *address, unsigned *bound_port, int *claim,
		       char *err, size_t errlen);
/* Reads the token from path, creating it (0600, random) when absent; refuses a wider mode. */
int daemon_token_load(const char *path, char *token, size_t token_size, char *err,
		      size_t errlen);

/* ---- messaging.c (docs/messaging.md) ---- */

/* <state_dir>/runs/<id>/sidecar.sock; -ENAMETOOLONG when it does not fit a unix socket. */
int daemon_messaging_control_path(const struct daemon *d, const char *run_id, char *out,
				  size_t len);
/* The run's environment: the daemon's plus VOIDBOX_RUN_ID and VOIDBOX_SIDECAR_CONTROL. */
char **daemon_messaging_child_env(const struct daemon *d, const char *run_id);
/*
 * What GET /v1/runs/{id} says of messaging, asked of the run's control socket (so call it
 * without d->lock): {sidecar: false} when nothing answers there (no agent of the run has
 * messaging, or the run is not running), else {sidecar: true, members: [{candidate_id, role,
 * port, url, host_url}]}, url being what the member's guest uses. NULL when out of memory.
 */
json_t *daemon_messaging_run_json(const struct daemon *d, const char *run_id);
void daemon_messaging_child_env_free(char **env);
/*
 * The messaging routes (PUT .../inbox, POST .../messages, GET .../intents). false: url is not
 * one of them. true: *failed says whether err or (*status, *answer) is the reply.
 */
bool daemon_messaging_route(struct daemon *d, const char *url, const char *method,
			    const char *body, size_t len, unsigned *status, json_t **answer,
			    struct daemon_error *err, bool *failed);

#endif
