/*
 * One exec = one thread that owns the child from fork to ExecResponse. A single poll loop feeds
 * stdin (non-blocking, so a large stdin cannot deadlock against a child that writes before it
 * reads), drains stdout/stderr in 4 KiB chunks that are streamed as ExecOutputChunk and also
 * accumulated for the final response, watches the reaper's exit eventfd, and enforces the
 * timeout by killing the whole process group. After the child exits, output still buffered in
 * the pipes is drained for a short grace period so a background grandchild holding the pipe
 * open cannot keep the response from being sent.
 */
#include "exec.h"

#include "agent_log.h"
#include "policy.h"
#include "proto/protocol.h"
#include "reaper.h"
#include "spawn.h"
#include "common/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EXEC_CHUNK_SIZE 4096
#define EXEC_POLL_COUNT 4 /* stdout, stderr, stdin, exit event */
/* The final response carries both streams base64-encoded inside one 64 MiB frame. */
#define EXEC_ACCUMULATE_MAX (16u * 1024u * 1024u)
#define EXEC_DRAIN_AFTER_EXIT_MS 500
#define EXEC_KILL_REAP_WAIT_MS 5000
#define EXEC_MS_PER_SEC 1000
#define EXEC_TRUNCATED_NOTE "\n[voidbox] output truncated: the full response is limited to 16 MiB per stream\n"

enum exec_pipe {
	EXEC_PIPE_STDIN,
	EXEC_PIPE_STDOUT,
	EXEC_PIPE_STDERR,
	EXEC_PIPE_COUNT,
};

struct exec_job {
	struct agent_conn *conn;
	uint32_t request_id;
	struct proto_exec_request request;
};

struct exec_stream {
	enum proto_stream kind;
	int fd;
	uint8_t *data;
	size_t len;
	size_t capacity;
	bool truncated;
	uint64_t seq;
};

struct exec_run {
	struct exec_job *job;
	struct exec_stream out;
	struct exec_stream err;
	int stdin_fd;
	size_t stdin_written;
	struct reaper_child *child;
	bool exited;
	bool timed_out;
	int status;
	char *error;
	uint64_t start_ms;
};

static void exec_send_response(struct exec_job *job, struct proto_exec_response *response)
{
	uint8_t *body;
	size_t len;
	int err;

	err = proto_exec_response_encode(response, &body, &len);
	if (err) {
		agent_error("exec %u: cannot encode response: %s", job->request_id, strerror(-err));
		return;
	}
	conn_send(job->conn, PROTO_MSG_EXEC_RESPONSE, job->request_id, body, len);
	free(body);
}

/* Sends a response for an exec that never ran (policy refusal, spawn failure). */
static void exec_send_failure(struct exec_job *job, const char *error, const char *stderr_text,
			      enum proto_error_code code)
{
	struct proto_exec_response response = {
		.exit_code = PROTO_EXIT_CODE_SIGNALED,
		.error = (char *)error,
		.code = code,
		.has_duration = true,
	};

	if (stderr_text) {
		response.stderr_data.data = (uint8_t *)stderr_text;
		response.stderr_data.len = strlen(stderr_text);
	}
	exec_send_response(job, &response);
}

static void exec_stream_append(struct exec_stream *stream, const uint8_t *data, size_t len,
			       bool enforce_cap)
{
	if (stream->truncated && enforce_cap)
		return;
	if (enforce_cap && stream->len + len > EXEC_ACCUMULATE_MAX) {
		stream->truncated = true;
		return;
	}
	if (stream->len + len > stream->capacity) {
		size_t capacity = stream->capacity ? stream->capacity : EXEC_CHUNK_SIZE;
		uint8_t *grown;

		while (capacity < stream->len + len)
			capacity *= 2;
		grown = realloc(stream->data, capacity);
		if (!grown) {
			stream->truncated = true;
			return;
		}
		stream->data = grown;
		stream->capacity = capacity;
	}
	memcpy(stream->data + stream->len, data, len);
	stream->len += len;
}

static void exec_stream_chunk(struct exec_run *run, struct exec_stream *stream,
			      const uint8_t *data, size_t len)
{
	struct proto_exec_output_chunk chunk = {
		.stream = stream->kind,
		.data = { .data = (uint8_t *)data, .len = len },
		.seq = stream->seq++,
	};
	uint8_t *body;
	size_t body_len;

	exec_stream_append(stream, data, len, true);
	if (proto_exec_output_chunk_encode(&chunk, &body, &body_len) != 0)
		return;
	conn_send(run->job->conn, PROTO_MSG_EXEC_OUTPUT_CHUNK, run->job->request_id, body,
		  body_len);
	free(body);
}

/* Reads once from a readable stream; closes it at EOF or error. */
static void exec_stream_read(struct exec_run *run, struct exec_stream *stream)
{
	uint8_t buf[EXEC_CHUNK_SIZE];
	ssize_t n = read(stream->fd, buf, sizeof(buf));

	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n <= 0) {
		close(stream->fd);
		stream->fd = -1;
		return;
	}
	exec_stream_chunk(run, stream, buf, (size_t)n);
}

static void exec_stdin_close(struct exec_run *run)
{
	if (run->stdin_fd >= 0)
		close(run->stdin_fd);
	run->stdin_fd = -1;
}

static void exec_stdin_write(struct exec_run *run)
{
	const struct proto_bytes *input = &run->job->request.stdin_data;
	ssize_t n = write(run->stdin_fd, input->data + run->stdin_written,
			  input->len - run->stdin_written);

	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n < 0) {
		exec_stdin_close(run);
		return;
	}
	run->stdin_written += (size_t)n;
	if (run->stdin_written == input->len)
		exec_stdin_close(run);
}

static void exec_kill_group(struct exec_run *run)
{
	pid_t pid = reaper_child_pid(run->child);

	kill(-pid, SIGKILL);
	kill(pid, SIGKILL);
}

static void exec_note_exit(struct exec_run *run)
{
	uint64_t value;
	ssize_t rc = read(reaper_child_event_fd(run->child), &value, sizeof(value));

	(void)rc;
	if (reaper_child_poll(run->child, &run->status))
		run->exited = true;
}

/* Milliseconds the next poll may sleep: until the timeout, or the drain grace after exit. */
static int exec_poll_timeout(const struct exec_run *run, uint64_t exit_ms)
{
	uint64_t now = clock_monotonic_ms(), deadline;
	uint64_t timeout_secs = run->job->request.has_timeout ? run->job->request.timeout_secs : 0;

	if (run->exited)
		deadline = exit_ms + EXEC_DRAIN_AFTER_EXIT_MS;
	else if (timeout_secs && !run->timed_out)
		deadline = run->start_ms + timeout_secs * EXEC_MS_PER_SEC;
	else
		return -1;
	return deadline > now ? (int)(deadline - now) : 0;
}

static void exec_io_loop(struct exec_run *run)
{
	uint64_t exit_ms = 0;

	for (;;) {
		struct pollfd fds[EXEC_POLL_COUNT];
		nfds_t nfds = 0;
		int timeout, rc;

		if (run->out.fd < 0 && run->err.fd < 0 && run->exited)
			break;
		if (run->exited && run->stdin_fd >= 0)
			exec_stdin_close(run);
		fds[nfds++] = (struct pollfd){ .fd = run->out.fd, .events = POLLIN };
		fds[nfds++] = (struct pollfd){ .fd = run->err.fd, .events = POLLIN };
		fds[nfds++] = (struct pollfd){ .fd = run->stdin_fd, .events = POLLOUT };
		fds[nfds++] = (struct pollfd){ .fd = run->exited ? -1 : reaper_child_event_fd(run->child),
					       .events = POLLIN };
		timeout = exec_poll_timeout(run, exit_ms);
		rc = poll(fds, nfds, timeout);
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc == 0) {
			if (run->exited)
				break;
			run->timed_out = true;
			exec_kill_group(run);
			continue;
		}
		if (fds[0].revents)
			exec_stream_read(run, &run->out);
		if (fds[1].revents)
			exec_stream_read(run, &run->err);
		if (fds[2].revents & (POLLOUT | POLLERR | POLLHUP))
			exec_stdin_write(run);
		if (fds[3].revents) {
			exec_note_exit(run);
			if (run->exited)
				exit_ms = clock_monotonic_ms();
		}
	}
}

static void exec_finish(struct exec_run *run)
{
	struct proto_exec_response response = { 0 };
	uint64_t timeout_secs = run->job->request.timeout_secs;

	if (run->out.truncated || run->err.truncated)
		exec_stream_append(&run->err, (const uint8_t *)EXEC_TRUNCATED_NOTE,
				   strlen(EXEC_TRUNCATED_NOTE), false);
	if (WIFEXITED(run->status)) {
		response.exit_code = WEXITSTATUS(run->status);
	} else {
		response.exit_code = PROTO_EXIT_CODE_SIGNALED;
		response.code = run->timed_out ? PROTO_ERROR_TIMED_OUT : PROTO_ERROR_KILLED;
		if (run->timed_out) {
			if (asprintf(&run->error, "Process killed after %llus timeout",
				     (unsigned long long)timeout_secs) < 0)
				run->error = NULL;
		} else if (asprintf(&run->error,
				    "Process killed by signal %d (exit_code mapped to -1)",
				    WTERMSIG(run->status)) < 0) {
			run->error = NULL;
		}
	}
	response.stdout_data.data = run->out.data;
	response.stdout_data.len = run->out.len;
	response.stderr_data.data = run->err.data;
	response.stderr_data.len = run->err.len;
	response.error = run->error;
	response.has_duration = true;
	response.duration_ms = clock_monotonic_ms() - run->start_ms;
	exec_send_response(run->job, &response);
}

struct exec_clone_args {
	const struct spawn_plan *plan;
	int report_fd;
};

static pid_t exec_clone(void *ctx)
{
	const struct exec_clone_args *args = ctx;

	return spawn_clone_exec(args->plan, args->report_fd);
}

/* Opens the three child stdio fds; parent ends go into run. Returns 0 or -errno. */
static int exec_open_stdio(struct exec_run *run, struct spawn_plan *plan)
{
	int out[2] = { -1, -1 }, err[2] = { -1, -1 }, in[2] = { -1, -1 };
	int saved;

	if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0)
		goto fail;
	if (run->job->request.stdin_data.len > 0) {
		if (pipe2(in, O_CLOEXEC) < 0 || fcntl(in[1], F_SETFL, O_NONBLOCK) < 0)
			goto fail;
	} else if ((in[0] = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) {
		goto fail;
	}
	plan->stdio[0] = in[0];
	plan->stdio[1] = out[1];
	plan->stdio[2] = err[1];
	run->stdin_fd = in[1];
	run->out.fd = out[0];
	run->err.fd = err[0];
	return 0;
fail:
	saved = errno;
	for (int i = 0; i < 2; i++) {
		if (out[i] >= 0)
			close(out[i]);
		if (err[i] >= 0)
			close(err[i]);
		if (in[i] >= 0)
			close(in[i]);
	}
	return -saved;
}

static void exec_close_child_ends(struct spawn_plan *plan)
{
	for (int i = 0; i < SPAWN_STDIO_COUNT; i++) {
		if (plan->stdio[i] >= 0)
			close(plan->stdio[i]);
		plan->stdio[i] = -1;
	}
}

static void exec_run_cleanup(struct exec_run *run)
{
	if (run->out.fd >= 0)
		close(run->out.fd);
	if (run->err.fd >= 0)
		close(run->err.fd);
	exec_stdin_close(run);
	reaper_child_release(run->child);
	free(run->out.data);
	free(run->err.data);
	free(run->error);
}

/*
 * Starts the child (sharing the agent's memory until it execs, spawn_clone_exec); on failure
 * sends the response itself and returns -errno.
 */
static int exec_spawn(struct exec_run *run, struct spawn_plan *plan)
{
	struct exec_clone_args args = { .plan = plan };
	struct spawn_failure failure;
	int report[2], err, status;
	pid_t pid;

	if (pipe2(report, O_CLOEXEC) < 0)
		return -errno;
	args.report_fd = report[1];
	pid = reaper_fork(exec_clone, &args, &run->child);
	close(report[1]);
	exec_close_child_ends(plan);
	if (pid < 0) {
		close(report[0]);
		return (int)pid;
	}
	if (!spawn_read_failure(report[0], &failure)) {
		close(report[0]);
		return 0;
	}
	close(report[0]);
	reaper_child_wait(run->child, EXEC_KILL_REAP_WAIT_MS, &status);
	err = -failure.err;
	run->error = spawn_failure_message(run->job->request.program, &failure);
	exec_send_failure(run->job, run->error, run->error,
			  proto_error_code_from_errno(err ? err : -EIO));
	return err ? err : -EIO;
}

static void exec_execute(struct exec_job *job)
{
	struct exec_run run = {
		.job = job, .stdin_fd = -1,
		.out = { .kind = PROTO_STREAM_STDOUT, .fd = -1 },
		.err = { .kind = PROTO_STREAM_STDERR, .fd = -1 },
	};
	struct spawn_request request = {
		.kind = SPAWN_KIND_EXEC,
		.program = job->request.program,
		.args = job->request.args,
		.args_count = job->request.args_count,
		.env = job->request.env,
		.env_count = job->request.env_count,
		.working_dir = job->request.working_dir,
	};
	const struct agent_context *ctx = job->conn->ctx;
	struct policy_limits limits;
	struct spawn_plan plan;
	char *error = NULL;
	int err;

	run.start_ms = clock_monotonic_ms();
	err = spawn_plan_build(&plan, &request, ctx->drop_privileges, &error);
	if (err) {
		exec_send_failure(job, error, error, proto_error_code_from_errno(err));
		free(error);
		return;
	}
	if (policy_store_check(ctx->policy, plan.path, &limits) != 0) {
		char *message = NULL, *detail = NULL;

		agent_warn("exec %u: '%s' (%s) refused by the allowlist", job->request_id,
			   job->request.program, plan.path);
		if (asprintf(&message, "Command '%s' is not allowed", job->request.program) >= 0 &&
		    asprintf(&detail, "Command '%s' is not in the allowed commands list",
			     job->request.program) >= 0)
			exec_send_failure(job, message, detail, PROTO_ERROR_DENIED);
		free(message);
		free(detail);
		spawn_plan_free(&plan);
		return;
	}
	plan.limits = limits;
	err = exec_open_stdio(&run, &plan);
	if (!err)
		err = exec_spawn(&run, &plan);
	else
		exec_send_failure(job, "Failed to spawn: cannot create pipes", NULL,
				  PROTO_ERROR_FAILED);
	if (!err) {
		agent_debug("exec %u: started '%s' as pid %d", job->request_id, plan.path,
			    (int)reaper_child_pid(run.child));
		exec_io_loop(&run);
		if (!run.exited) {
			exec_kill_group(&run);
			reaper_child_wait(run.child, -1, &run.status);
		}
		exec_finish(&run);
	}
	exec_close_child_ends(&plan);
	spawn_plan_free(&plan);
	exec_run_cleanup(&run);
}

static void *exec_thread_main(void *arg)
{
	struct exec_job *job = arg;

	exec_execute(job);
	conn_put(job->conn);
	proto_exec_request_free(&job->request);
	free(job);
	return NULL;
}

int exec_start(struct agent_conn *conn, uint32_t request_id, const uint8_t *body, size_t len)
{
	struct exec_job *job = calloc(1, sizeof(*job));
	const char *why = NULL;
	pthread_attr_t attr;
	pthread_t thread;
	int err;

	if (!job)
		return -ENOMEM;
	if (proto_exec_request_decode(body, len, &job->request, &why) != 0) {
		agent_warn("exec %u: malformed ExecRequest: %s", request_id, why ? why : "?");
		free(job);
		return -EPROTO;
	}
	job->conn = conn;
	job->request_id = request_id;
	conn_get(conn);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	err = pthread_create(&thread, &attr, exec_thread_main, job);
	pthread_attr_destroy(&attr);
	if (err) {
		exec_send_failure(job, "Failed to start an exec thread in the guest agent", NULL,
				  PROTO_ERROR_FAILED);
		conn_put(conn);
		proto_exec_request_free(&job->request);
		free(job);
		return -err;
	}
	return 0;
}
