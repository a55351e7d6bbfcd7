/*
 * The run store: one SQLite database (WAL mode, so readers never wait on the writer's fsync)
 * at <state dir>/daemon.db with five tables -- runs, events, stages, artifacts, telemetry --
 * described in docs/daemon.md. The daemon serialises every call through its own lock, so this file keeps
 * one connection and no locking of its own. Each function prepares its statement, binds,
 * steps and finalises in one place: the daemon's request rate is far below what re-preparing
 * costs, and no statement outlives a call. JSON-valued columns (policy, report, payload,
 * depends_on) are stored as text and decoded again when read.
 *
 * A write that fails (its file system full or read-only) is said once in the daemon's log,
 * with what to do, and again when writes work again; callers get -EIO and the sentence from
 * daemon_store_failure, so a client's answer can carry it too.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sqlite3.h>

#include "common/log.h"
#include "daemon/daemon_internal.h"

#define STORE_FILE_NAME "daemon.db"
#define STORE_SCHEMA_VERSION 1
#define STORE_BUSY_TIMEOUT_MS 5000
#define STORE_DIR_MODE 0700
#define STORE_LOG_MODULE "daemon"
/* the store's path, SQLite's message and what to do */
#define STORE_FAILURE_MAX (DAEMON_PATH_MAX + DAEMON_ERROR_MESSAGE_MAX)
/* a stage's output is ready once it has an artifact (a service publishes one while running) */
#define STORE_STAGE_OUTPUT_READY                                                               \
	"EXISTS (SELECT 1 FROM artifacts WHERE artifacts.run_id = stages.run_id"              \
	" AND artifacts.stage = stages.name)"

struct daemon_store {
	sqlite3 *db;
	char path[DAEMON_PATH_MAX];
	bool write_failing; /* a write failed and none has worked since: logged once */
	char failure[STORE_FAILURE_MAX]; /* the last failed write, as a sentence */
};

static const char store_schema[] =
	"CREATE TABLE IF NOT EXISTS runs ("
	" id TEXT PRIMARY KEY, status TEXT NOT NULL, file TEXT NOT NULL,"
	" spec_path TEXT NOT NULL, input TEXT, policy TEXT NOT NULL,"
	" attempt_id INTEGER NOT NULL DEFAULT 0, pid INTEGER NOT NULL DEFAULT 0,"
	" created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, finished_at INTEGER,"
	" terminal_reason TEXT, error TEXT, exit_code INTEGER, report TEXT,"
	" terminal_event_id INTEGER);"
	"CREATE TABLE IF NOT EXISTS events ("
	" run_id TEXT NOT NULL REFERENCES runs(id), event_id INTEGER NOT NULL,"
	" ts_ms INTEGER NOT NULL, level TEXT NOT NULL, event_type TEXT NOT NULL,"
	" message TEXT NOT NULL, stage_name TEXT, stream TEXT, payload TEXT,"
	" PRIMARY KEY (run_id, event_id));"
	"CREATE TABLE IF NOT EXISTS stages ("
	" run_id TEXT NOT NULL REFERENCES runs(id), name TEXT NOT NULL,"
	" position INTEGER NOT NULL, status TEXT NOT NULL, depends_on TEXT NOT NULL,"
	" stage_attempt INTEGER NOT NULL DEFAULT 0, started_at INTEGER, completed_at INTEGER,"
	" duration_ms INTEGER, exit_code INTEGER, PRIMARY KEY (run_id, name));"
	"CREATE TABLE IF NOT EXISTS artifacts ("
	" run_id TEXT NOT NULL REFERENCES runs(id), stage TEXT NOT NULL, name TEXT NOT NULL,"
	" media_type TEXT NOT NULL, size_bytes INTEGER NOT NULL, content BLOB NOT NULL,"
	" PRIMARY KEY (run_id, stage, name));"
	"CREATE TABLE IF NOT EXISTS telemetry ("
	" run_id TEXT NOT NULL REFERENCES runs(id), seq INTEGER NOT NULL, ts_ms INTEGER NOT NULL,"
	" stage_name TEXT, guest TEXT, host TEXT, PRIMARY KEY (run_id, seq));";

static int store_exec(struct daemon_store *store, const char *sql)
{
	return sqlite3_exec(store->db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -EIO;
}

static sqlite3_stmt *store_prepare(struct daemon_store *store, const char *sql)
{
	sqlite3_stmt *stmt = NULL;

	if (sqlite3_prepare_v2(store->db, sql, -1, &stmt, NULL) != SQLITE_OK)
		return NULL;
	return stmt;
}

/* Why the last write failed and what frees it, into store->failure. */
static void store_describe_failure(struct daemon_store *store)
{
	int code = sqlite3_system_errno(store->db);
	const char *advice = "";

	if (code == ENOSPC || code == EDQUOT || sqlite3_errcode(store->db) == SQLITE_FULL)
		advice = ": free space on its file system, or restart voidbox serve with "
			 "--state-dir on one with room";
	else if (code == EROFS || code == EACCES || code == EPERM ||
		 sqlite3_errcode(store->db) == SQLITE_READONLY)
		advice = ": make it writable, or restart voidbox serve with --state-dir "
			 "elsewhere";
	snprintf(store->failure, sizeof(store->failure), "the run store %s cannot be written "
		 "(%s)%s", store->path, sqlite3_errmsg(store->db), advice);
}

/*
 * A write's SQLite result: 0, or -EIO after noting the failure (logged when it is the first
 * since writes last worked).
 */
static int store_wrote(struct daemon_store *store, int sqlite_rc)
{
	if (sqlite_rc == SQLITE_DONE || sqlite_rc == SQLITE_OK) {
		if (store->write_failing)
			log_info(STORE_LOG_MODULE, "the run store %s can be written again",
				 store->path);
		store->write_failing = false;
		return 0;
	}
	store_describe_failure(store);
	if (!store->write_failing)
		log_error(STORE_LOG_MODULE, "%s", store->failure);
	store->write_failing = true;
	return -EIO;
}

/* Steps a statement that writes and returns no rows, and finalises it. */
static int store_done(struct daemon_store *store, sqlite3_stmt *stmt)
{
	int rc = sqlite3_step(stmt);

	sqlite3_finalize(stmt);
	return store_wrote(store, rc);
}

static void store_bind_text(sqlite3_stmt *stmt, int index, const char *text)
{
	if (text)
		sqlite3_bind_text(stmt, index, text, -1, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(stmt, index);
}

/*
 * Prepares sql, binds run_id (unless NULL) to its first parameter and returns container,
 * which the caller fills from the rows; NULL (container released) when either failed.
 */
static json_t *store_query(struct daemon_store *store, const char *sql, const char *run_id,
			   json_t *container, sqlite3_stmt **stmt)
{
	*stmt = store_prepare(store, sql);
	if (!*stmt || !container) {
		sqlite3_finalize(*stmt);
		*stmt = NULL;
		json_decref(container);
		return NULL;
	}
	if (run_id)
		store_bind_text(*stmt, 1, run_id);
	return container;
}

/* Binds a JSON value as its compact text (NULL value: SQL NULL). */
static int store_bind_json(sqlite3_stmt *stmt, int index, const json_t *value)
{
	char *text;

	if (!value) {
		sqlite3_bind_null(stmt, index);
		return 0;
	}
	text = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
	if (!text)
		return -ENOMEM;
	sqlite3_bind_text(stmt, index, text, -1, SQLITE_TRANSIENT);
	free(text);
	return 0;
}

static const char *store_column_text(sqlite3_stmt *stmt, int column)
{
	return (const char *)sqlite3_column_text(stmt, column);
}

/* Sets key to the column's text, its decoded JSON, or its integer; NULL columns are skipped. */
static void store_set_text(json_t *object, const char *key, sqlite3_stmt *stmt, int column)
{
	if (sqlite3_column_type(stmt, column) != SQLITE_NULL)
		json_object_set_new(object, key, json_string(store_column_text(stmt, column)));
}

static void store_set_json(json_t *object, const char *key, sqlite3_stmt *stmt, int column)
{
	json_t *value;

	if (sqlite3_column_type(stmt, column) == SQLITE_NULL)
		return;
	value = json_loads(store_column_text(stmt, column), JSON_DECODE_ANY, NULL);
	if (value)
		json_object_set_new(object, key, value);
}

static void store_set_int(json_t *object, const char *key, sqlite3_stmt *stmt, int column)
{
	if (sqlite3_column_type(stmt, column) != SQLITE_NULL)
		json_object_set_new(object, key, json_integer(sqlite3_column_int64(stmt, column)));
}

int daemon_store_open(const char *dir, struct daemon_store **out, char *err, size_t errlen)
{
	struct daemon_store *store = calloc(1, sizeof(*store));
	char pragma[64];

	*out = NULL;
	if (!store) {
		snprintf(err, errlen, "out of memory opening the run store");
		return -ENOMEM;
	}
	snprintf(store->path, sizeof(store->path), "%s/%s", dir, STORE_FILE_NAME);
	if (sqlite3_open_v2(store->path, &store->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
			    NULL) != SQLITE_OK) {
		snprintf(err, errlen, "cannot open the run store %s: %s (check the directory's permissions or set VOIDBOX_STATE_DIR)",
			 store->path, store->db ? sqlite3_errmsg(store->db) : "out of memory");
		goto fail;
	}
	chmod(store->path, S_IRUSR | S_IWUSR);
	sqlite3_busy_timeout(store->db, STORE_BUSY_TIMEOUT_MS);
	snprintf(pragma, sizeof(pragma), "PRAGMA user_version = %d;", STORE_SCHEMA_VERSION);
	if (store_exec(store, "PRAGMA journal_mode = WAL;") < 0 ||
	    store_exec(store, "PRAGMA foreign_keys = ON;") < 0 ||
	    store_exec(store, store_schema) < 0 || store_exec(store, pragma) < 0) {
		snprintf(err, errlen, "cannot set up the run store %s: %s (move it aside if it is not voidbox's)",
			 store->path, sqlite3_errmsg(store->db));
		goto fail;
	}
	*out = store;
	return 0;
fail:
	sqlite3_close(store->db);
	free(store);
	return -EIO;
}

void daemon_store_close(struct daemon_store *store)
{
	if (!store)
		return;
	sqlite3_close(store->db);
	free(store);
}

const char *daemon_store_path(const struct daemon_store *store)
{
	return store->path;
}

const char *daemon_store_failure(const struct daemon_store *store)
{
	return store->failure[0] ? store->failure : "the run store cannot be written";
}

static int store_insert_stage(struct daemon_store *store, const char *run_id,
			      const struct daemon_stage_plan *stage, size_t position)
{
	sqlite3_stmt *stmt = store_prepare(store,
		"INSERT INTO stages (run_id, name, position, status, depends_on)"
		" VALUES (?, ?, ?, 'queued', ?);");

	if (!stmt)
		return -EIO;
	store_bind_text(stmt, 1, run_id);
	store_bind_text(stmt, 2, stage->name);
	sqlite3_bind_int64(stmt, 3, (sqlite3_int64)position);
	if (store_bind_json(stmt, 4, stage->depends_on) < 0) {
		sqlite3_finalize(stmt);
		return -ENOMEM;
	}
	return store_done(store, stmt);
}

int daemon_store_insert_run(struct daemon_store *store, const struct daemon_run_row *row,
			    const struct daemon_stage_plan *stages, size_t stage_count)
{
	uint64_t now = daemon_now_ms();
	json_t *policy = daemon_policy_to_json(row->policy);
	sqlite3_stmt *stmt;
	int rc = -EIO;

	if (!policy)
		return -ENOMEM;
	if (store_exec(store, "BEGIN;") < 0)
		goto out;
	stmt = store_prepare(store,
		"INSERT INTO runs (id, status, file, spec_path, input, policy, created_at, updated_at)"
		" VALUES (?, 'pending', ?, ?, ?, ?, ?, ?);");
	if (!stmt)
		goto rollback;
	store_bind_text(stmt, 1, row->id);
	store_bind_text(stmt, 2, row->file);
	store_bind_text(stmt, 3, row->spec_path);
	store_bind_text(stmt, 4, row->input);
	store_bind_json(stmt, 5, policy);
	sqlite3_bind_int64(stmt, 6, (sqlite3_int64)now);
	sqlite3_bind_int64(stmt, 7, (sqlite3_int64)now);
	if (store_done(store, stmt) < 0)
		goto rollback;
	for (size_t i = 0; i < stage_count; i++)
		if (store_insert_stage(store, row->id, &stages[i], i) < 0)
			goto rollback;
	rc = store_wrote(store, sqlite3_exec(store->db, "COMMIT;", NULL, NULL, NULL));
	if (rc == 0)
		goto out;
rollback:
	store_exec(store, "ROLLBACK;");
out:
	json_decref(policy);
	return rc;
}

int daemon_store_run_state(struct daemon_store *store, const char *id,
			   enum daemon_run_state *state)
{
	sqlite3_stmt *stmt = store_prepare(store, "SELECT status FROM runs WHERE id = ?;");
	int rc = -ENOENT;

	if (!stmt)
		return -EIO;
	store_bind_text(stmt, 1, id);
	if (sqlite3_step(stmt) == SQLITE_ROW)
		rc = daemon_run_state_parse(store_column_text(stmt, 0), state) == 0 ? 0 : -EIO;
	sqlite3_finalize(stmt);
	return rc;
}

static uint32_t store_policy_value(const json_t *policy, const char *key, uint32_t fallback)
{
	json_t *value = json_object_get(policy, key);

	return json_is_integer(value) ? (uint32_t)json_integer_value(value) : fallback;
}

int daemon_store_run_launch(struct daemon_store *store, const char *id,
			    struct daemon_run_launch *out)
{
	sqlite3_stmt *stmt = store_prepare(store,
		"SELECT spec_path, input, policy FROM runs WHERE id = ?;");
	json_t *policy;
	int rc = -ENOENT;

	memset(out, 0, sizeof(*out));
	daemon_policy_default(&out->policy);
	if (!stmt)
		return -EIO;
	store_bind_text(stmt, 1, id);
	if (sqlite3_step(stmt) == SQLITE_ROW) {
		rc = 0;
		out->spec_path = strdup(store_column_text(stmt, 0));
		if (sqlite3_column_type(stmt, 1) != SQLITE_NULL)
			out->input = strdup(store_column_text(stmt, 1));
		policy = json_loads(store_column_text(stmt, 2), 0, NULL);
		out->policy.max_parallel_microvms_per_run = store_policy_value(
			policy, "max_parallel_microvms_per_run", DAEMON_POLICY_DEFAULT_PARALLEL);
		out->policy.max_stage_retries = store_policy_value(policy, "max_stage_retries",
								   DAEMON_POLICY_DEFAULT_RETRIES);
		out->policy.stage_timeout_secs = store_policy_value(
			policy, "stage_timeout_secs", DAEMON_POLICY_DEFAULT_STAGE_TIMEOUT);
		out->policy.cancel_grace_period_secs = store_policy_value(
			policy, "cancel_grace_period_secs", DAEMON_POLICY_DEFAULT_GRACE);
		json_decref(policy);
		if (!out->spec_path)
			rc = -ENOMEM;
	}
	sqlite3_finalize(stmt);
	if (rc < 0)
		daemon_run_launch_free(out);
	return rc;
}

void daemon_run_launch_free(struct daemon_run_launch *launch)
{
	free(launch->spec_path);
	free(launch->input);
	launch->spec_path = launch->input = NULL;
}

int daemon_store_set_running(struct daemon_store *store, const char *id, uint32_t attempt_id,
			     pid_t pid)
{
	sqlite3_stmt *stmt = store_prepare(store,
		"UPDATE runs SET status = 'running', attempt_id = ?, pid = ?, updated_at = ?"
		" WHERE id = ?;");

	if (!stmt)
		return -EIO;
	sqlite3_bind_int64(stmt, 1, attempt_id);
	sqlite3_bind_int64(stmt, 2, pid);
	sqlite3_bind_int64(stmt, 3, (sqlite3_int64)daemon_now_ms());
	store_bind_text(stmt, 4, id);
	return store_done(store, stmt);
}

int daemon_store_finish_run(struct daemon_store *store, const char *id,
			    enum daemon_run_state state, const char *terminal_reason,
			    const char *error, int exit_code, const char *report_json,
			    uint64_t terminal_event_id)
{
	uint64_t now = daemon_now_ms();
	sqlite3_stmt *stmt = store_prepare(store,
		"UPDATE runs SET status = ?, terminal_reason = ?, error = ?, exit_code = ?,"
		" report = ?, terminal_event_id = ?, finished_at = ?, updated_at = ?, pid = 0"
		" WHERE id = ?;");

	if (!stmt)
		return -EIO;
	store_bind_text(stmt, 1, daemon_run_state_name(state));
	store_bind_text(stmt, 2, terminal_reason);
	store_bind_text(stmt, 3, error);
	sqlite3_bind_int(stmt, 4, exit_code);
	store_bind_text(stmt, 5, report_json);
	sqlite3_bind_int64(stmt, 6, (sqlite3_int64)terminal_event_id);
	sqlite3_bind_int64(stmt, 7, (sqlite3_int64)now);
	sqlite3_bind_int64(stmt, 8, (sqlite3_int64)now);
	store_bind_text(stmt, 9, id);
	return store_done(store, stmt);
}

/* {name: {status, started_at?, completed_at?}} */
static json_t *store_stage_states(struct daemon_store *store, const char *id,
				  size_t *active_count)
{
	sqlite3_stmt *stmt;
	json_t *states = store_query(store,
		"SELECT name, status, started_at, completed_at, " STORE_STAGE_OUTPUT_READY
		" FROM stages WHERE run_id = ? ORDER BY position;",
		id, json_object(), &stmt);

	*active_count = 0;
	if (!states)
		return NULL;
	while (sqlite3_step(stmt) == SQLITE_ROW) {
		json_t *state = json_pack("{s:s}", "status", store_column_text(stmt, 1));

		if (!state)
			break;
		if (strcmp(store_column_text(stmt, 1), "running") == 0)
			(*active_count)++;
		store_set_int(state, "started_at", stmt, 2);
		store_set_int(state, "completed_at", stmt, 3);
		json_object_set_new(state, "output_ready", json_boolean(sqlite3_column_int(stmt, 4)));
		json_object_set_new(states, store_column_text(stmt, 0), state);
	}
	sqlite3_finalize(stmt);
	return states;
}

/* {status, manifest:[{name, stage, media_type, size_bytes, retrieval_path}]} */
static json_t *store_artifact_publication(struct daemon_store *store, const char *id,
					  const char *run_status)
{
	sqlite3_stmt *stmt;
	json_t *manifest = store_query(store,
		"SELECT stage, name, media_type, size_bytes FROM artifacts WHERE run_id = ?"
		" ORDER BY rowid;",
		id, json_array(), &stmt);
	const char *status;

	if (!manifest)
		return NULL;
	while (sqlite3_step(stmt) == SQLITE_ROW) {
		char path[DAEMON_PATH_MAX];

		snprintf(path, sizeof(path), "/v1/runs/%s/stages/%s/artifacts/%s", id,
			 store_column_text(stmt, 0), store_column_text(stmt, 1));
		json_array_append_new(manifest,
			json_pack("{s:s, s:s, s:s, s:I, s:s}", "name", store_column_text(stmt, 1),
				  "stage", store_column_text(stmt, 0), "media_type",
				  store_column_text(stmt, 2), "size_bytes",
				  (json_int_t)sqlite3_column_int64(stmt, 3), "retrieval_path", path));
	}
	sqlite3_finalize(stmt);
	if (strcmp(run_status, "succeeded") == 0 || strcmp(run_status, "failed") == 0 ||
	    strcmp(run_status, "cancelled") == 0)
		status = json_array_size(manifest) ? "published" : "not_started";
	else
		status = json_array_size(manifest) ? "publishing" : "not_started";
	return json_pack("{s:s, s:o}", "status", status, "manifest", manifest);
}

/* Column order shared by the one-run and the list queries. */
#define STORE_RUN_COLUMNS                                                                    \
	"id, status, file, attempt_id, created_at, updated_at, finished_at, terminal_reason,"  \
	" error, exit_code, report, terminal_event_id, policy"

static json_t *store_run_row_json(struct daemon_store *store, sqlite3_stmt *stmt)
{
	const char *id = store_column_text(stmt, 0);
	const char *status = store_column_text(stmt, 1);
	size_t active_stages = 0;
	json_t *run = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I}", "id", id, "status", status,
				"file", store_column_text(stmt, 2), "attempt_id",
				(json_int_t)sqlite3_column_int64(stmt, 3), "started_at",
				(json_int_t)sqlite3_column_int64(stmt, 4), "updated_at",
				(json_int_t)sqlite3_column_int64(stmt, 5));
	json_t *stage_states, *publication;

	if (!run)
		return NULL;
	store_set_int(run, "finished_at", stmt, 6);
	store_set_text(run, "terminal_reason", stmt, 7);
	store_set_text(run, "error", stmt, 8);
	store_set_int(run, "exit_code", stmt, 9);
	store_set_json(run, "report", stmt, 10);
	store_set_int(run, "terminal_event_id", stmt, 11);
	store_set_json(run, "policy", stmt, 12);
	stage_states = store_stage_states(store, id, &active_stages);
	publication = store_artifact_publication(store, id, status);
	json_object_set_new(run, "stage_states", stage_states ? stage_states : json_object());
	json_object_set_new(run, "artifact_publication", publication ? publication : json_null());
	json_object_set_new(run, "active_stage_count", json_integer((json_int_t)active_stages));
	json_object_set_new(run, "active_microvm_count",
			    json_integer(strcmp(status, "running") == 0 && active_stages ? 1 : 0));
	json_object_set_new(run, "output_ready",
			    json_boolean(strcmp(status, "succeeded") == 0 ||
					 (publication &&
					  json_array_size(json_object_get(publication, "manifest")))));
	return run;
}

json_t *daemon_store_run_json(struct daemon_store *store, const char *id, int *rc)
{
	sqlite3_stmt *stmt = store_prepare(store,
		"SELECT " STORE_RUN_COLUMNS " FROM runs WHERE id = ?;");
	json_t *run = NULL;

	*rc = -EIO;
	if (!stmt)
		return NULL;
	store_bind_text(stmt, 1, id);
	if (sqlite3_step(stmt) == SQLITE_ROW) {
		run = store_run_row_json(store, stmt);
		*rc = run ? 0 : -ENOMEM;
	} else {
		*rc = -ENOENT;
	}
	sqlite3_finalize(stmt);
	return run;
}

json_t *daemon_store_runs_json(struct daemon_store *store, enum daemon_state_filter filter,
			       enum daemon_run_state state)
{
	static const char *const where[] = {
		[DAEMON_FILTER_ALL] = "",
		[DAEMON_FILTER_ACTIVE] = " WHERE status IN ('pending', 'running')",
		[DAEMON_FILTER_TERMINAL] = " WHERE status IN ('succeeded', 'failed', 'cancelled')",
		[DAEMON_FILTER_ONE_STATE] = " WHERE status = ?",
	};
	char sql[512];
	sqlite3_stmt *stmt;
	json_t *runs = json_array();

	snprintf(sql, sizeof(sql), "SELECT " STORE_RUN_COLUMNS " FROM runs%s ORDER BY created_at, id;",
		 where[filter]);
	stmt = store_prepare(store, sql);
	if (!stmt || !runs) {
		sqlite3_finalize(stmt);
		json_decref(runs);
		return NULL;
	}
	if (filter == DAEMON_FILTER_ONE_STATE)
		store_bind_text(stmt, 1, daemon_run_state_name(state));
	while (sqlite3_step(stmt) == SQLITE_ROW) {
		json_t *run = store_run_row_json(store, stmt);

		if (run)
			json_array_append_new(runs, run);
	}
	sqlite3_finalize(stmt);
	return runs;
}

json_t *daemon_store_stages_json(struct daemon_store *store, const char *id)
{
	sqlite3_stmt *stmt;
	json_t *stages = store_query(store,
		"SELECT name, status, depends_on, stage_attempt, started_at, completed_at,"
		" duration_ms, exit_code, " STORE_STAGE_OUTPUT_READY
		" FROM stages WHERE run_id = ? ORDER BY position;",
		id, json_array(), &stmt);

	if (!stages)
		return NULL;
	while (sqlite3_step(stmt) == SQLITE_ROW) {
		json_t *stage = json_pack("{s:s, s:s, s:s, s:I}", "stage_name",
					  store_column_text(stmt, 0), "box_name",
					  store_column_text(stmt, 0), "status",
					  store_column_text(stmt, 1), "stage_attempt",
					  (json_int_t)sqlite3_column_int64(stmt, 3));

		if (!stage)
			break;
		store_set_json(stage, "depends_on", stmt, 2);
		store_set_int(stage, "started_at", stmt, 4);
		store_set_int(stage, "completed_at", stmt, 5);
		store_set_int(stage, "duration_ms", stmt, 6);
		store_set_int(stage, "exit_code", stmt, 7);
		json_object_set_new(stage, "output_ready", json_boolean(sqlite3_column_int(stmt, 8)));
		json_array_append_new(stages, stage);
	}
	sqlite3_finalize(stmt);
	return stages;
}

static int64_t store_next_event_id(struct daemon_store *store, const char *run_id)
{
	sqlite3_stmt *stmt = store_prepare(store,
		"SELECT COALESCE(MAX(event_id), 0) + 1 FROM events WHERE run_id = ?;");
	int64_t next = -EIO;

	if (!stmt)
		return -EIO;
	store_bind_text(stmt, 1, run_id);
	if (sqlite3_step(stmt) == SQLITE_ROW)
		next = sqlite3_column_int64(stmt, 0);
	sqlite3_finalize(stmt);
	return next;
}

int64_t daemon_store_append_event(struct daemon_store *store, const char *run_id, json_t *event)
{
	int64_t event_id = store_next_event_id(store, run_id);
	sqlite3_stmt *stmt;

	if (event_id < 0)
		return event_id;
	stmt = store_prepare(store,
		"INSERT INTO events (run_id, event_id, ts_ms, level, event_type, message,"
		" stage_name, stream, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?);");
	if (!stmt)
		return -EIO;
	store_bind_text(stmt, 1, run_id);
	sqlite3_bind_int64(stmt, 2, event_id);
	sqlite3_bind_int64(stmt, 3, json_integer_value(json_object_get(event, "ts_ms")));
	store_bind_text(stmt, 4, json_string_value(json_object_get(event, "level")));
	store_bind_text(stmt, 5, json_string_value(json_object_get(event, "event_type")));
	store_bind_text(stmt, 6, json_string_value(json_object_get(event, "message")));
	store_bind_text(stmt, 7, json_string_value(json_object_get(event, "stage_name")));
	store_bind_text(stmt, 8, json_string_value(json_object_get(event, "stream")));
	store_bind_json(stmt, 9, json_object_get(event, "payload"));
	if (store_done(store, stmt) < 0)
		return -EIO;
	return event_id;
}

json_t *daemon_store_events_json(struct daemon_store *store, const char *run_id, uint64_t after,
				 size_t limit)
{
	sqlite3_stmt *stmt;
	json_t *events = store_query(store,
		"SELECT event_id, ts_ms, level, event_type, message, stage_name, stream, payload"
		" FROM events WHERE run_id = ? AND event_id > ? ORDER BY event_id LIMIT ?;",
		run_id, json_array(), &stmt);

	if (!events)
		return NULL;
	sqlite3_bind_int64(stmt, 2, (sqlite3_int64)(after > INT64_MAX ? INT64_MAX : after));
	sqlite3_bind_int64(stmt, 3, limit ? (sqlite3_int64)limit : -1);
	while (sqlite3_step(stmt) == SQLITE_ROW) {
		json_t *event = json_pack("{s:I, s:I, s:s, s:s, s:s, s:s}", "event_id",
					  (json_int_t)sqlite3_column_int64(stmt, 0), "ts_ms",
					  (json_int_t)sqlite3_column_int64(stmt, 1), "level",
					  store_column_text(stmt, 2), "event_type",
					  store_column_text(stmt, 3), "message",
					  store_column_text(stmt, 4), "run_id", run_id);

		if (!event)
			break;
		store_set_text(event, "stage_name", stmt, 5);
		store_set_text(event, "stream", stmt, 6);
		store_set_json(event, "payload", stmt, 7);
		json_object_set_new(event, "seq", json_integer(sqlite3_column_int64(stmt, 0) - 1));
		json_array_append_new(events, event);
	}
	sqlite3_finalize(stmt);
	return events;
}

int daemon_store_stage_update(struct daemon_store *store, const char *run_id, const char *name,
			      const char *status, uint32_t attempt, int exit_code,
			      uint64_t duration_ms)
{
	bool started = strcmp(status, "running") == 0;
	sqlite3_stmt *stmt = store_prepare(store, started ?
		"UPDATE stages SET status = ?, stage_attempt = ?, started_at = ?,"
		" completed_at = NULL, duration_ms = NULL, exit_code = NULL"
		" WHERE run_id = ? AND name = ?;" :
		"UPDATE stages SET status = ?, stage_attempt = ?, completed_at = ?,"
		" duration_ms = ?, exit_code = ? WHERE run_id = ? AND name = ?;");
	int index = 1;

	if (!stmt)
		return -EIO;
	store_bind_text(stmt, index++, status);
	sqlite3_bind_int64(stmt, index++, attempt);
	sqlite3_bind_int64(stmt, index++, (sqlite3_int64)daemon_now_ms());
	if (!started) {
		sqlite3_bind_int64(stmt, index++, (sqlite3_int64)duration_ms);
		sqlite3_bind_int(stmt, index++, exit_code);
	}
	store_bind_text(stmt, index++, run_id);
	store_bind_text(stmt, index, name);
	return store_done(store, stmt);
}

json_t *daemon_store_stages_in(struct daemon_store *store, const char *run_id,
			       const char *status)
{
	sqlite3_stmt *stmt;
	json_t *names = store_query(store,
		"SELECT name FROM stages WHERE run_id = ? AND status = ? ORDER BY position;",
		run_id, json_array(), &stmt);

	if (!names)
		return NULL;
	store_bind_text(stmt, 2, status);
	while (sqlite3_step(stmt) == SQLITE_ROW)
		json_array_append_new(names, json_string(store_column_text(stmt, 0)));
	sqlite3_finalize(stmt);
	return names;
}

int daemon_store_put_artifact(struct daemon_store *store, const char *run_id, const char *stage,
			      const char *name, const char *media_type, const void *data,
			      size_t len)
{
	sqlite3_stmt *stmt = store_prepare(store,
		"INSERT OR REPLACE INTO artifacts (run_id, stage, name, media_type, size_bytes,"
		" content) VALUES (?, ?, ?, ?, ?, ?);");

	if (!stmt)
		return -EIO;
	store_bind_text(stmt, 1, run_id);
	store_bind_text(stmt, 2, stage);
	store_bind_text(stmt, 3, name);
	store_bind_text(stmt, 4, media_type);
	sqlite3_bind_int64(stmt, 5, (sqlite3_int64)len);
	sqlite3_bind_blob64(stmt, 6, len ? data : "", len, SQLITE_TRANSIENT);
	return store_done(store, stmt);
}

int64_t daemon_store_add_telemetry(struct daemon_store *store, const char *run_id,
				   uint64_t ts_ms, const char *stage_name, const json_t *guest,
				   const json_t *host)
{
	sqlite3_stmt *stmt = store_prepare(store,
		"INSERT INTO telemetry (run_id, seq, ts_ms, stage_name, guest, host)"
		" SELECT ?1, COALESCE(MAX(seq), 0) + 1, ?2, ?3, ?4, ?5 FROM telemetry"
		" WHERE run_id = ?1 RETURNING seq;");
	int64_t seq = -EIO;

	if (!stmt)
		return -EIO;
	store_bind_text(stmt, 1, run_id);
	sqlite3_bind_int64(stmt, 2, (sqlite3_int64)(ts_ms > INT64_MAX ? INT64_MAX : ts_ms));
	store_bind_text(stmt, 3, stage_name);
	if (store_bind_json(stmt, 4, guest) < 0 || store_bind_json(stmt, 5, host) < 0) {
		sqlite3_finalize(stmt);
		return -ENOMEM;
	}
	if (sqlite3_step(stmt) == SQLITE_ROW)
		seq = sqlite3_column_int64(stmt, 0);
	sqlite3_finalize(stmt);
	if (store_wrote(store, seq > 0 ? SQLITE_DONE : sqlite3_errcode(store->db)) < 0)
		return -EIO;
	if (seq <= DAEMON_TELEMETRY_KEEP)
		return seq;
	/* a ring: the oldest samples beyond the newest DAEMON_TELEMETRY_KEEP go */
	stmt = store_prepare(store, "DELETE FROM telemetry WHERE run_id = ? AND seq <= ?;");
	if (!stmt)
		return -EIO;
	store_bind_text(stmt, 1, run_id);
	sqlite3_bind_int64(stmt, 2, seq - DAEMON_TELEMETRY_KEEP);
	return store_done(store, stmt) < 0 ? -EIO : seq;
}

json_t *daemon_store_telemetry_json(struct daemon_store *store, const char *run_id,
				    uint64_t from_seq, const char *stage_name, uint64_t *next_seq)
{
	sqlite3_stmt *stmt;
	json_t *samples = store_query(store,
		"SELECT seq, ts_ms, stage_name, guest, host FROM telemetry WHERE run_id = ?"
		" AND seq >= ? AND (?3 IS NULL OR stage_name = ?3) ORDER BY seq LIMIT ?;",
		run_id, json_array(), &stmt);

	*next_seq = from_seq;
	if (!samples)
		return NULL;
	sqlite3_bind_int64(stmt, 2, (sqlite3_int64)(from_seq > INT64_MAX ? INT64_MAX : from_seq));
	store_bind_text(stmt, 3, stage_name);
	sqlite3_bind_int64(stmt, 4, DAEMON_TELEMETRY_PAGE);
	while (sqlite3_step(stmt) == SQLITE_ROW) {
		sqlite3_int64 ts_ms = sqlite3_column_int64(stmt, 1);
		char timestamp[DAEMON_RFC3339_MAX];
		json_t *sample;

		daemon_rfc3339_ms(ts_ms > 0 ? (uint64_t)ts_ms : 0, timestamp);
		sample = json_pack("{s:I, s:I, s:s}", "seq", (json_int_t)sqlite3_column_int64(stmt, 0),
				   "timestamp_ms", (json_int_t)ts_ms, "timestamp", timestamp);

		if (!sample)
			break;
		store_set_text(sample, "stage_name", stmt, 2);
		store_set_json(sample, "guest", stmt, 3);
		store_set_json(sample, "host", stmt, 4);
		*next_seq = (uint64_t)sqlite3_column_int64(stmt, 0) + 1;
		json_array_append_new(samples, sample);
	}
	sqlite3_finalize(stmt);
	return samples;
}

int daemon_store_get_artifact(struct daemon_store *store, const char *run_id, const char *stage,
			      const char *name, char **media_type, void **data, size_t *len)
{
	sqlite3_stmt *stmt = store_prepare(store,
		"SELECT media_type, content FROM artifacts WHERE run_id = ? AND stage = ?"
		" AND name = ?;");
	int rc = -ENOENT;

	*media_type = NULL;
	*data = NULL;
	*len = 0;
	if (!stmt)
		return -EIO;
	store_bind_text(stmt, 1, run_id);
	store_bind_text(stmt, 2, stage);
	store_bind_text(stmt, 3, name);
	if (sqlite3_step(stmt) == SQLITE_ROW) {
		size_t size = (size_t)sqlite3_column_bytes(stmt, 1);

		*media_type = strdup(store_column_text(stmt, 0));
		*data = malloc(size ? size : 1);
		if (*media_type && *data) {
			if (size)
				memcpy(*data, sqlite3_column_blob(stmt, 1), size);
			*len = size;
			rc = 0;
		} else {
			free(*media_type);
			free(*data);
			*media_type = NULL;
			*data = NULL;
			rc = -ENOMEM;
		}
	}
	sqlite3_finalize(stmt);
	return rc;
}

json_t *daemon_store_unfinished_runs(struct daemon_store *store)
{
	sqlite3_stmt *stmt;
	json_t *ids = store_query(store,
		"SELECT id FROM runs WHERE status IN ('pending', 'running') ORDER BY created_at;",
		NULL, json_array(), &stmt);

	if (!ids)
		return NULL;
	while (sqlite3_step(stmt) == SQLITE_ROW)
		json_array_append_new(ids, json_string(store_column_text(stmt, 0)));
	sqlite3_finalize(stmt);
	return ids;
}
