/*
 * The mock box: runs a spec's programs without a VM, deterministically, so the engines above
 * it are tested in milliseconds. An exec is answered, in order, by the caller's handler, the
 * caller's rules, then a small table of built-in programs (echo, cat, tr, true, false, sleep,
 * printenv, mock-exit, mock-barrier, mock-serve); anything else prints "mock: <program>" and
 * exits 0.
 * docs/runtime.md lists the exact behaviour of each.
 *
 * Files live in an in-memory table guarded by one mutex; `cat FILE` reads it, so a program's
 * "output file" can be staged with box_write_file and read back. `mock-barrier` is the one
 * built-in that waits for other execs: it only succeeds when COUNT execs reach the same
 * barrier while all are running, which makes "these steps ran concurrently" observable
 * without timing thresholds. `mock-serve` is the mock's service: it publishes a file, then
 * waits until box_stop_service() names it, so service-mode runs are tested without a VM.
 * The waiting built-ins (sleep, mock-barrier, mock-serve) wait on the box's condition
 * variable, so a cancel (box_cancel_all) ends them at once, as it ends a VM's execs.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/box_internal.h"
#include "common/clock.h"

#define MOCK_BARRIER_DEFAULT_WAIT_SECS 10u
#define MOCK_BARRIER_MAX_COUNT 1024ul
#define MOCK_SLEEP_MAX_SECS 3600.0
#define MOCK_NS_PER_SEC 1000000000L
#define MOCK_MS_PER_SEC 1000u
#define MOCK_DECIMAL 10
#define MOCK_CANCELLED_ERROR "the run was cancelled; the mock's program was ended"

struct mock_file {
	char *path;
	char *data;
	size_t len;
	bool is_dir;
};

struct mock_barrier {
	char *name;
	unsigned long arrived;
};

struct mock_box {
	pthread_mutex_t lock;
	pthread_cond_t changed; /* a barrier gained an arrival */
	struct mock_file *files;
	size_t file_count;
	struct mock_barrier *barriers;
	size_t barrier_count;
	char **stopped_services; /* names box_stop_service() was called with */
	size_t stopped_count;
	bool cancelled; /* box_cancel_all: every exec under way or to come fails */
	const struct box_mock_rule *rules;
	size_t rule_count;
	box_mock_handler_fn handler;
	void *handler_opaque;
};

/* A growable output buffer for one stream. */
struct mock_out {
	char *data;
	size_t len;
	size_t capacity;
	bool failed;
};

static void mock_out_append(struct mock_out *out, const char *data, size_t len)
{
	if (out->failed)
		return;
	if (out->len + len + 1 > out->capacity) {
		size_t capacity = out->capacity ? out->capacity : 64;
		char *grown;

		while (capacity < out->len + len + 1)
			capacity *= 2;
		grown = realloc(out->data, capacity);
		if (!grown) {
			out->failed = true;
			return;
		}
		out->data = grown;
		out->capacity = capacity;
	}
	memcpy(out->data + out->len, data, len);
	out->len += len;
	out->data[out->len] = '\0';
}

static void mock_out_puts(struct mock_out *out, const char *text)
{
	mock_out_append(out, text, strlen(text));
}

static const char *mock_basename(const char *program)
{
	const char *slash = strrchr(program, '/');

	return slash ? slash + 1 : program;
}

/* ---- files ---------------------------------------------------------------------------- */

static struct mock_file *mock_find_file(struct mock_box *mock, const char *path)
{
	for (size_t i = 0; i < mock->file_count; i++)
		if (strcmp(mock->files[i].path, path) == 0)
			return &mock->files[i];
	return NULL;
}

/* Adds an entry; the caller holds the lock. */
static struct mock_file *mock_add_entry(struct mock_box *mock, const char *path, bool is_dir)
{
	struct mock_file *grown;
	char *path_copy = strdup(path);

	if (!path_copy)
		return NULL;
	grown = realloc(mock->files, (mock->file_count + 1) * sizeof(*grown));
	if (!grown) {
		free(path_copy);
		return NULL;
	}
	mock->files = grown;
	grown = &mock->files[mock->file_count++];
	memset(grown, 0, sizeof(*grown));
	grown->path = path_copy;
	grown->is_dir = is_dir;
	return grown;
}

static int mock_require_absolute(const char *path)
{
	if (path && path[0] == '/')
		return 0;
	box_set_error("mock sandbox: path '%s' is not absolute; guest paths start with /",
		      path ? path : "(null)");
	return -EINVAL;
}

/* Records path and each of its parent directories; the caller holds the lock. */
static int mock_mkdir_locked(struct mock_box *mock, const char *path)
{
	char prefix[PATH_MAX];
	size_t len = strlen(path);

	if (len >= sizeof(prefix)) {
		box_set_error("mock sandbox: path too long: %s", path);
		return -ENAMETOOLONG;
	}
	for (size_t end = 1; end <= len; end++) {
		struct mock_file *entry;

		if (end < len && path[end] != '/')
			continue;
		memcpy(prefix, path, end);
		prefix[end] = '\0';
		entry = mock_find_file(mock, prefix);
		if (entry && !entry->is_dir) {
			box_set_error("mock sandbox: %s is a file, not a directory", prefix);
			return -ENOTDIR;
		}
		if (!entry && !mock_add_entry(mock, prefix, true)) {
			box_set_error("mock sandbox: out of memory");
			return -ENOMEM;
		}
	}
	return 0;
}

static int mock_mkdir_p(struct box *box, const char *path)
{
	struct mock_box *mock = box->backend;
	int rc = mock_require_absolute(path);

	if (rc < 0)
		return rc;
	pthread_mutex_lock(&mock->lock);
	rc = mock_mkdir_locked(mock, path);
	pthread_mutex_unlock(&mock->lock);
	return rc;
}

static int mock_write_locked(struct mock_box *mock, const char *path, const void *data,
			     size_t len)
{
	char parent[PATH_MAX];
	const char *slash = strrchr(path, '/');
	struct mock_file *file;
	char *copy;
	int rc;

	/* like the agent, writing creates the parent directories */
	if (slash != path && (size_t)(slash - path) < sizeof(parent)) {
		memcpy(parent, path, (size_t)(slash - path));
		parent[slash - path] = '\0';
		rc = mock_mkdir_locked(mock, parent);
		if (rc < 0)
			return rc;
	}
	file = mock_find_file(mock, path);
	if (file && file->is_dir) {
		box_set_error("mock sandbox: %s is a directory", path);
		return -EISDIR;
	}
	copy = box_copy_bytes(data, len);
	if (!copy || (!file && !(file = mock_add_entry(mock, path, false)))) {
		free(copy);
		box_set_error("mock sandbox: out of memory");
		return -ENOMEM;
	}
	free(file->data);
	file->data = copy;
	file->len = len;
	return 0;
}

static int mock_write_file(struct box *box, const char *path, const void *data, size_t len)
{
	struct mock_box *mock = box->backend;
	int rc = mock_require_absolute(path);

	if (rc < 0)
		return rc;
	pthread_mutex_lock(&mock->lock);
	rc = mock_write_locked(mock, path, data, len);
	pthread_mutex_unlock(&mock->lock);
	return rc;
}

static int mock_read_file(struct box *box, const char *path, char **data, size_t *len)
{
	struct mock_box *mock = box->backend;
	struct mock_file *file;
	int rc = mock_require_absolute(path);

	if (rc < 0)
		return rc;
	pthread_mutex_lock(&mock->lock);
	file = mock_find_file(mock, path);
	if (!file) {
		box_set_error("mock sandbox: %s: no such file", path);
		rc = -ENOENT;
	} else if (file->is_dir) {
		box_set_error("mock sandbox: %s is a directory", path);
		rc = -EISDIR;
	} else if (!(*data = box_copy_bytes(file->data, file->len))) {
		box_set_error("mock sandbox: out of memory");
		rc = -ENOMEM;
	} else {
		*len = file->len;
	}
	pthread_mutex_unlock(&mock->lock);
	return rc;
}

/* ---- built-in programs ---------------------------------------------------------------- */

struct mock_run {
	struct mock_box *mock;
	const struct box_exec_request *req;
	const struct box_env_var *env;
	size_t env_count;
	struct mock_out out;
	struct mock_out err;
	int exit_code;
	char *error;
	bool timed_out;
	bool cancelled; /* a waiting built-in was ended by a cancel */
};

static void mock_echo(struct mock_run *run)
{
	size_t first = 0;
	bool newline = true;

	if (run->req->arg_count > 0 && strcmp(run->req->args[0], "-n") == 0) {
		newline = false;
		first = 1;
	}
	for (size_t i = first; i < run->req->arg_count; i++) {
		if (i > first)
			mock_out_puts(&run->out, " ");
		mock_out_puts(&run->out, run->req->args[i]);
	}
	if (newline)
		mock_out_puts(&run->out, "\n");
}

static void mock_cat(struct mock_run *run)
{
	if (run->req->arg_count == 0) {
		mock_out_append(&run->out, run->req->stdin_data, run->req->stdin_len);
		return;
	}
	pthread_mutex_lock(&run->mock->lock);
	for (size_t i = 0; i < run->req->arg_count; i++) {
		struct mock_file *file = mock_find_file(run->mock, run->req->args[i]);

		if (!file || file->is_dir) {
			mock_out_puts(&run->err, "cat: ");
			mock_out_puts(&run->err, run->req->args[i]);
			mock_out_puts(&run->err, file ? ": Is a directory\n" :
							": No such file or directory\n");
			run->exit_code = 1;
			continue;
		}
		mock_out_append(&run->out, file->data, file->len);
	}
	pthread_mutex_unlock(&run->mock->lock);
}

/* Expands a tr set ("a-z", "abc", "A-Z0-9") into at most UCHAR_MAX + 1 characters. */
static size_t mock_tr_expand(const char *set, unsigned char *chars)
{
	size_t count = 0;

	for (size_t i = 0; set[i] && count <= UCHAR_MAX; i++) {
		unsigned char first = (unsigned char)set[i];

		if (set[i + 1] == '-' && set[i + 2] && (unsigned char)set[i + 2] >= first) {
			unsigned char last = (unsigned char)set[i + 2];

			for (unsigned c = first; c <= last && count <= UCHAR_MAX; c++)
				chars[count++] = (unsigned char)c;
			i += 2;
		} else {
			chars[count++] = first;
		}
	}
	return count;
}

static void mock_tr(struct mock_run *run)
{
	unsigned char from[UCHAR_MAX + 1], to[UCHAR_MAX + 1], map[UCHAR_MAX + 1];
	const unsigned char *in = run->req->stdin_data;
	size_t from_count, to_count;

	if (run->req->arg_count != 2) {
		mock_out_puts(&run->err, "tr: the mock takes exactly two sets: tr SET1 SET2\n");
		run->exit_code = 1;
		return;
	}
	from_count = mock_tr_expand(run->req->args[0], from);
	to_count = mock_tr_expand(run->req->args[1], to);
	for (unsigned c = 0; c <= UCHAR_MAX; c++)
		map[c] = (unsigned char)c;
	/* like tr, a short SET2 is padded with its last character */
	for (size_t i = 0; i < from_count && to_count > 0; i++)
		map[from[i]] = to[i < to_count ? i : to_count - 1];
	for (size_t i = 0; i < run->req->stdin_len; i++) {
		char mapped = (char)map[in[i]];

		mock_out_append(&run->out, &mapped, 1);
	}
}

static void mock_printenv(struct mock_run *run)
{
	for (size_t i = 0; i < run->env_count; i++) {
		const struct box_env_var *var = &run->env[run->env_count - 1 - i];

		if (run->req->arg_count == 0) {
			mock_out_puts(&run->out, run->env[i].name);
			mock_out_puts(&run->out, "=");
			mock_out_puts(&run->out, run->env[i].value);
			mock_out_puts(&run->out, "\n");
		} else if (strcmp(var->name, run->req->args[0]) == 0) {
			mock_out_puts(&run->out, var->value);
			mock_out_puts(&run->out, "\n");
			return;
		}
	}
	if (run->req->arg_count > 0)
		run->exit_code = 1;
}

static void mock_set_timed_out(struct mock_run *run)
{
	run->timed_out = true;
	run->exit_code = BOX_EXIT_NOT_RUN;
	if (asprintf(&run->error, "Process killed after %us timeout", run->req->timeout_secs) <
	    0)
		run->error = NULL;
}

/* An absolute CLOCK_REALTIME deadline secs from now (condition variables use realtime). */
static struct timespec mock_deadline(double secs)
{
	struct timespec deadline;
	long whole = (long)secs;

	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += whole;
	deadline.tv_nsec += (long)((secs - (double)whole) * (double)MOCK_NS_PER_SEC);
	if (deadline.tv_nsec >= MOCK_NS_PER_SEC) {
		deadline.tv_sec++;
		deadline.tv_nsec -= MOCK_NS_PER_SEC;
	}
	return deadline;
}

/* sleep SECS: really waits, but never past the exec's timeout (then it is "killed"). */
static void mock_sleep(struct mock_run *run)
{
	double secs = run->req->arg_count ? strtod(run->req->args[0], NULL) : 0.0;
	bool times_out = run->req->timeout_secs > 0 && secs > run->req->timeout_secs;
	struct mock_box *mock = run->mock;
	struct timespec deadline;

	if (!(secs >= 0.0 && secs <= MOCK_SLEEP_MAX_SECS)) {
		mock_out_puts(&run->err, "sleep: the mock takes 0..3600 seconds\n");
		run->exit_code = 1;
		return;
	}
	if (times_out)
		secs = run->req->timeout_secs;
	deadline = mock_deadline(secs);
	pthread_mutex_lock(&mock->lock);
	while (!mock->cancelled)
		if (pthread_cond_timedwait(&mock->changed, &mock->lock, &deadline) == ETIMEDOUT)
			break;
	run->cancelled = mock->cancelled;
	pthread_mutex_unlock(&mock->lock);
	if (times_out && !run->cancelled)
		mock_set_timed_out(run);
}

/* mock-exit CODE [MESSAGE...]: MESSAGE on stderr, then exit CODE. */
static void mock_exit(struct mock_run *run)
{
	run->exit_code = run->req->arg_count ? atoi(run->req->args[0]) : 0;
	for (size_t i = 1; i < run->req->arg_count; i++) {
		mock_out_puts(&run->err, run->req->args[i]);
		mock_out_puts(&run->err, i + 1 < run->req->arg_count ? " " : "\n");
	}
}

static struct mock_barrier *mock_barrier_get(struct mock_box *mock, const char *name)
{
	struct mock_barrier *grown;
	char *name_copy;

	for (size_t i = 0; i < mock->barrier_count; i++)
		if (strcmp(mock->barriers[i].name, name) == 0)
			return &mock->barriers[i];
	name_copy = strdup(name);
	grown = name_copy ? realloc(mock->barriers, (mock->barrier_count + 1) * sizeof(*grown))
			  : NULL;
	if (!grown) {
		free(name_copy);
		return NULL;
	}
	mock->barriers = grown;
	grown = &mock->barriers[mock->barrier_count++];
	grown->name = name_copy;
	grown->arrived = 0;
	return grown;
}

/*
 * mock-barrier NAME COUNT [WAIT_SECS]: arrives at barrier NAME and waits until COUNT execs
 * have arrived. Exit 0 when they all did, 1 when WAIT_SECS (default 10) passed first.
 */
static void mock_barrier(struct mock_run *run)
{
	struct mock_box *mock = run->mock;
	unsigned long count, wait_secs = MOCK_BARRIER_DEFAULT_WAIT_SECS;
	struct mock_barrier *barrier;
	struct timespec deadline;
	bool complete = true;

	if (run->req->arg_count < 2 ||
	    (count = strtoul(run->req->args[1], NULL, MOCK_DECIMAL)) == 0 ||
	    count > MOCK_BARRIER_MAX_COUNT) {
		mock_out_puts(&run->err, "mock-barrier: usage: mock-barrier NAME COUNT [WAIT_SECS]\n");
		run->exit_code = 1;
		return;
	}
	if (run->req->arg_count > 2)
		wait_secs = strtoul(run->req->args[2], NULL, MOCK_DECIMAL);
	deadline = mock_deadline((double)wait_secs);
	pthread_mutex_lock(&mock->lock);
	barrier = mock_barrier_get(mock, run->req->args[0]);
	if (!barrier) {
		pthread_mutex_unlock(&mock->lock);
		run->error = strdup("mock sandbox: out of memory");
		return;
	}
	barrier->arrived++;
	pthread_cond_broadcast(&mock->changed);
	/* the barrier array may move while we wait, so look it up again after each wake */
	while (!mock->cancelled && (barrier = mock_barrier_get(mock, run->req->args[0])) &&
	       barrier->arrived < count) {
		if (pthread_cond_timedwait(&mock->changed, &mock->lock, &deadline) == ETIMEDOUT) {
			barrier = mock_barrier_get(mock, run->req->args[0]);
			complete = barrier && barrier->arrived >= count;
			break;
		}
	}
	run->cancelled = mock->cancelled;
	pthread_mutex_unlock(&mock->lock);
	if (run->cancelled)
		return;
	if (!complete) {
		mock_out_puts(&run->err, "mock-barrier: ");
		mock_out_puts(&run->err, run->req->args[0]);
		mock_out_puts(&run->err, ": the others did not arrive in time\n");
		run->exit_code = 1;
		return;
	}
	mock_out_puts(&run->out, run->req->args[0]);
	mock_out_puts(&run->out, ": all arrived\n");
}

static bool mock_service_stopped_locked(const struct mock_box *mock, const char *name)
{
	for (size_t i = 0; name && i < mock->stopped_count; i++)
		if (strcmp(mock->stopped_services[i], name) == 0)
			return true;
	return false;
}

/*
 * mock-serve PATH TEXT: writes TEXT to PATH, prints "serving", then waits until the exec's
 * service is stopped (exit 0) or its timeout, else the mock's longest sleep, passes.
 */
static void mock_serve(struct mock_run *run)
{
	struct mock_box *mock = run->mock;
	uint32_t wait_secs = run->req->timeout_secs ? run->req->timeout_secs
						    : (uint32_t)MOCK_SLEEP_MAX_SECS;
	struct timespec deadline = mock_deadline((double)wait_secs);
	bool stopped;
	int rc;

	if (run->req->arg_count != 2 || run->req->args[0][0] != '/') {
		mock_out_puts(&run->err, "mock-serve: usage: mock-serve /PATH TEXT\n");
		run->exit_code = 1;
		return;
	}
	pthread_mutex_lock(&mock->lock);
	rc = mock_write_locked(mock, run->req->args[0], run->req->args[1],
			       strlen(run->req->args[1]));
	while (rc == 0 && !mock->cancelled &&
	       !(stopped = mock_service_stopped_locked(mock, run->req->service_name)))
		if (pthread_cond_timedwait(&mock->changed, &mock->lock, &deadline) == ETIMEDOUT)
			break;
	stopped = mock_service_stopped_locked(mock, run->req->service_name);
	run->cancelled = mock->cancelled;
	pthread_mutex_unlock(&mock->lock);
	if (run->cancelled)
		return;
	if (rc < 0) {
		mock_out_puts(&run->err, "mock-serve: cannot write the file\n");
		run->exit_code = 1;
		return;
	}
	mock_out_puts(&run->out, "serving\n");
	if (!stopped)
		mock_set_timed_out(run);
}

static int mock_stop_service(struct box *box, const char *name)
{
	struct mock_box *mock = box->backend;
	char **grown;
	char *copy = strdup(name);
	int rc = 0;

	pthread_mutex_lock(&mock->lock);
	grown = copy ? realloc(mock->stopped_services,
			       (mock->stopped_count + 1) * sizeof(*grown)) : NULL;
	if (grown) {
		mock->stopped_services = grown;
		grown[mock->stopped_count++] = copy;
		pthread_cond_broadcast(&mock->changed);
	} else {
		free(copy);
		box_set_error("mock sandbox: out of memory");
		rc = -ENOMEM;
	}
	pthread_mutex_unlock(&mock->lock);
	return rc;
}

struct mock_builtin {
	const char *name;
	void (*run)(struct mock_run *run);
};

static void mock_true(struct mock_run *run)
{
	run->exit_code = 0;
}

static void mock_false(struct mock_run *run)
{
	run->exit_code = 1;
}

static const struct mock_builtin mock_builtins[] = {
	{ "echo", mock_echo },
	{ "cat", mock_cat },
	{ "tr", mock_tr },
	{ "true", mock_true },
	{ "false", mock_false },
	{ "sleep", mock_sleep },
	{ "printenv", mock_printenv },
	{ "mock-exit", mock_exit },
	{ "mock-barrier", mock_barrier },
	{ "mock-serve", mock_serve },
};

#define MOCK_BUILTIN_COUNT (sizeof(mock_builtins) / sizeof(mock_builtins[0]))

static bool mock_apply_rule(struct mock_run *run)
{
	const char *program = mock_basename(run->req->program);

	for (size_t i = 0; i < run->mock->rule_count; i++) {
		const struct box_mock_rule *rule = &run->mock->rules[i];

		if (strcmp(mock_basename(rule->program), program) != 0)
			continue;
		if (rule->first_arg &&
		    (run->req->arg_count == 0 || strcmp(rule->first_arg, run->req->args[0]) != 0))
			continue;
		if (rule->stdout_text)
			mock_out_puts(&run->out, rule->stdout_text);
		if (rule->stderr_text)
			mock_out_puts(&run->err, rule->stderr_text);
		run->exit_code = rule->exit_code;
		return true;
	}
	return false;
}

static void mock_run_program(struct mock_run *run)
{
	const char *program = mock_basename(run->req->program);

	if (mock_apply_rule(run))
		return;
	for (size_t i = 0; i < MOCK_BUILTIN_COUNT; i++) {
		if (strcmp(program, mock_builtins[i].name) == 0) {
			mock_builtins[i].run(run);
			return;
		}
	}
	mock_out_puts(&run->out, "mock: ");
	mock_out_puts(&run->out, program);
	mock_out_puts(&run->out, "\n");
}

static int mock_exec(struct box *box, const struct box_exec_request *req,
		     const struct box_env_var *env, size_t env_count, struct box_exec_result *out)
{
	struct mock_run run = {
		.mock = box->backend, .req = req, .env = env, .env_count = env_count,
	};
	uint64_t start = clock_monotonic_ms();
	bool cancelled;

	pthread_mutex_lock(&run.mock->lock);
	cancelled = run.mock->cancelled;
	pthread_mutex_unlock(&run.mock->lock);
	if (cancelled) {
		box_set_error("%s", MOCK_CANCELLED_ERROR);
		return -ECANCELED;
	}
	if (run.mock->handler) {
		int handled = run.mock->handler(run.mock->handler_opaque, req, out);

		if (handled < 0)
			return handled;
		if (handled > 0) {
			/* a handler's answer streams like a built-in's: once per stream */
			if (req->on_chunk && out->stdout_len)
				req->on_chunk(req->chunk_opaque, false, out->stdout_data,
					      out->stdout_len);
			if (req->on_chunk && out->stderr_len)
				req->on_chunk(req->chunk_opaque, true, out->stderr_data,
					      out->stderr_len);
			return 0;
		}
	}
	mock_run_program(&run);
	if (run.out.failed || run.err.failed) {
		free(run.out.data);
		free(run.err.data);
		free(run.error);
		box_set_error("mock sandbox: out of memory");
		return -ENOMEM;
	}
	if (req->on_chunk && run.out.len)
		req->on_chunk(req->chunk_opaque, false, run.out.data, run.out.len);
	if (req->on_chunk && run.err.len)
		req->on_chunk(req->chunk_opaque, true, run.err.data, run.err.len);
	out->exit_code = run.exit_code;
	out->stdout_data = run.out.data;
	out->stdout_len = run.out.len;
	out->stderr_data = run.err.data;
	out->stderr_len = run.err.len;
	out->error = run.error;
	out->timed_out = run.timed_out;
	out->duration_ms = clock_monotonic_ms() - start;
	if (run.cancelled) {
		box_set_error("%s", MOCK_CANCELLED_ERROR);
		return -ECANCELED;
	}
	return 0;
}

static void mock_interrupt(struct box *box, bool force)
{
	struct mock_box *mock = box->backend;

	(void)force; /* nothing of the mock's needs time to end */
	pthread_mutex_lock(&mock->lock);
	mock->cancelled = true;
	pthread_cond_broadcast(&mock->changed);
	pthread_mutex_unlock(&mock->lock);
}

static void mock_close(struct box *box, bool keep_logs)
{
	struct mock_box *mock = box->backend;

	(void)keep_logs;
	for (size_t i = 0; i < mock->file_count; i++) {
		free(mock->files[i].path);
		free(mock->files[i].data);
	}
	for (size_t i = 0; i < mock->barrier_count; i++)
		free(mock->barriers[i].name);
	for (size_t i = 0; i < mock->stopped_count; i++)
		free(mock->stopped_services[i]);
	free(mock->stopped_services);
	free(mock->files);
	free(mock->barriers);
	pthread_cond_destroy(&mock->changed);
	pthread_mutex_destroy(&mock->lock);
	free(mock);
}

static const struct box_ops mock_ops = {
	.exec = mock_exec,
	.write_file = mock_write_file,
	.read_file = mock_read_file,
	.mkdir_p = mock_mkdir_p,
	.stop_service = mock_stop_service,
	.interrupt = mock_interrupt,
	.close = mock_close,
};

int box_mock_open(struct box *box, const struct box_config *cfg, char *err, size_t errlen)
{
	struct mock_box *mock = calloc(1, sizeof(*mock));

	if (!mock) {
		snprintf(err, errlen, "out of memory opening the mock sandbox");
		return -ENOMEM;
	}
	pthread_mutex_init(&mock->lock, NULL);
	pthread_cond_init(&mock->changed, NULL);
	mock->rules = cfg->mock_rules;
	mock->rule_count = cfg->mock_rule_count;
	mock->handler = cfg->mock_handler;
	mock->handler_opaque = cfg->mock_opaque;
	box->backend = mock;
	box->ops = &mock_ops;
	return 0;
}
