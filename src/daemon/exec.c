/*
 * Running and cancelling runs. Each run is one child process, `voidbox --output json run
 * --file SPEC --events-fd 3`, in a process group of its own, watched by one daemon thread:
 * - fd 3 carries one JSON line per stage start, piece of output and finish (src/cli/cli_run.c
 *   writes them), which become stage.* and log.chunk events and the stage's output artifact;
 * - stderr is the run's progress log, streamed line by line as log.chunk events;
 * - stdout is the final run report (JSON), kept on the run when it ends.
 * fd 3 also relays the guest's telemetry, and the thread samples the run process itself (the
 * VMM) every DAEMON_HOST_SAMPLE_MS; both become the run's telemetry (telemetry.c).
 * The VMM lives inside that process, so cancelling is signalling the group: SIGTERM, then
 * SIGKILL once the policy's grace period is over. The child asks the kernel for SIGKILL when
 * the thread that forked it dies (PR_SET_PDEATHSIG), so a daemon killed outright takes its
 * runs' VMs with it, and the next daemon marks those runs failed (daemon_restarted).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "daemon/daemon_internal.h"
#include "runtime/service.h"

#define EXEC_EVENTS_FD 3
#define EXEC_POLL_MS 100
#define EXEC_STREAM_COUNT 3
#define EXEC_LINE_MAX (64u * 1024u)          /* a progress line longer than this is split */
#define EXEC_EVENT_LINE_MAX (8u * 1024u * 1024u) /* one stage event (carries its output) */
#define EXEC_REPORT_MAX (16u * 1024u * 1024u)
#define EXEC_BYTES_PER_MIB (1024u * 1024u)
#define EXEC_READ_CHUNK 65536
#define EXEC_ARGV_MAX 16
#define EXEC_NUMBER_MAX 24
#define EXEC_EXIT_SIGNAL_BASE 128
/* the stages one guest sample is recorded under at most (parallel steps in one box) */
#define EXEC_TELEMETRY_LABELS_MAX 16
#define EXEC_MS_PER_SEC 1000u
#define EXEC_CANCEL_WAIT_SLICE_MS 500
#define EXEC_NS_PER_MS 1000000L
#define EXEC_OUTPUT_ARTIFACT "output"
#define EXEC_RUN_DIR_MODE 0700
#define EXEC_PARALLEL_ENV "VOIDBOX_MAX_PARALLEL_VMS" /* read by `voidbox run` (cli_env.c) */
#define EXEC_ENV_ENTRY_MAX 64
/* how often a run's end that the store refused (its file system full) is tried again */
#define EXEC_STORE_RETRY_MS 1000u

enum exec_stream {
	EXEC_STREAM_EVENTS,
	EXEC_STREAM_STDERR,
	EXEC_STREAM_STDOUT,
};

/* A growable byte buffer for one of the child's pipes. */
struct exec_buffer {
	char *data;
	size_t len;
	size_t capacity;
	size_t limit;
	bool overflowed;
};

struct exec_run {
	struct daemon *d;
	char id[DAEMON_RUN_ID_MAX + 1];
	struct daemon_run_launch launch;
	uint32_t attempt;
	char input_path[DAEMON_PATH_MAX];
	json_t *streamed; /* {stage: true} for stages whose output came as stage.output lines */
	char **child_env; /* the run's environment (messaging.c), built before the fork */
	json_t *published; /* {stage: true} for services whose output_file is the artifact */
	json_t *finished_report; /* this attempt's run.finished report (outputs cut), or NULL */
	struct daemon_log_budget log_budget; /* the whole run's, every attempt's lines */
};

/* How one attempt ended. */
struct exec_outcome {
	int exit_code;
	bool cancelled;
	json_t *report; /* the run report, or NULL when stdout was not one */
	bool report_over_limit; /* stdout held more than EXEC_REPORT_MAX bytes */
};

static struct daemon_active_run *exec_find_active(struct daemon *d, const char *id)
{
	for (struct daemon_active_run *run = d->active; run; run = run->next)
		if (strcmp(run->id, id) == 0)
			return run;
	return NULL;
}

static int exec_buffer_append(struct exec_buffer *buf, const char *data, size_t len)
{
	if (buf->len + len > buf->limit) {
		buf->overflowed = true;
		return 0;
	}
	if (buf->len + len + 1 > buf->capacity) {
		size_t capacity = buf->capacity ? buf->capacity : EXEC_READ_CHUNK;
		char *grown;

		while (capacity < buf->len + len + 1)
			capacity *= 2;
		grown = realloc(buf->data, capacity);
		if (!grown)
			return -ENOMEM;
		buf->data = grown;
		buf->capacity = capacity;
	}
	memcpy(buf->data + buf->len, data, len);
	buf->len += len;
	buf->data[buf->len] = '\0';
	return 0;
}

static void exec_buffer_consume(struct exec_buffer *buf, size_t count)
{
	if (count == 0)
		return;
	memmove(buf->data, buf->data + count, buf->len - count);
	buf->len -= count;
	if (buf->data)
		buf->data[buf->len] = '\0';
}

static const char *exec_media_type(const char *data, size_t len)
{
	json_t *parsed = json_loadb(data, len, JSON_DECODE_ANY, NULL);

	json_decref(parsed);
	return parsed ? "application/json" : "application/octet-stream";
}

/* A running stage's output: log.chunk events now, and not again when the stage finishes. */
static void exec_stage_output(struct exec_run *run, const char *stage, json_t *event)
{
	const char *stream = json_string_value(json_object_get(event, "stream"));
	json_t *data = json_object_get(event, "data");

	if (!json_is_string(data) || !stream)
		return;
	json_object_set_new(run->streamed, stage, json_true());
	daemon_event_emit_lines(run->d, run->id, stage,
				strcmp(stream, "stderr") == 0 ? "stderr" : "stdout",
				json_string_value(data), json_string_length(data), &run->log_budget);
}

/*
 * A service stage published its output_file while it still runs: it becomes the stage's
 * output artifact now (so the run's output_ready turns true while it is running) and a
 * stage.output_ready event says so; it stays the artifact when the stage ends.
 */
static void exec_stage_output_ready(struct exec_run *run, const char *stage, json_t *event)
{
	json_t *output = json_object_get(event, "output");
	json_int_t size = json_integer_value(json_object_get(event, "size_bytes"));
	struct daemon *d = run->d;

	if (!json_is_string(output) || !daemon_name_valid(stage, DAEMON_NAME_MAX))
		return;
	json_object_set_new(run->published, stage, json_true());
	pthread_mutex_lock(&d->lock);
	daemon_store_put_artifact(d->store, run->id, stage, EXEC_OUTPUT_ARTIFACT,
				  exec_media_type(json_string_value(output),
						  json_string_length(output)),
				  json_string_value(output), json_string_length(output));
	daemon_event_emit_locked(d, run->id, "stage.output_ready", "info",
				 "the service published its output", stage, NULL,
				 json_pack("{s:I, s:I}", "size_bytes", size, "stage_attempt",
					   (json_int_t)run->attempt));
	pthread_mutex_unlock(&d->lock);
}

/*
 * A guest sample relayed on fd 3: {"type":"telemetry","box":NAME,"guest":{...}}, recorded
 * under the stage (or stages) running in that box (daemon_telemetry_labels).
 */
static void exec_guest_telemetry(struct exec_run *run, json_t *event)
{
	const char *box = json_string_value(json_object_get(event, "box"));
	json_t *guest = daemon_request_guest_sample(json_object_get(event, "guest"));
	const char *labels[EXEC_TELEMETRY_LABELS_MAX];
	uint64_t now = daemon_now_ms();
	json_t *running;
	size_t count;

	if (!guest) {
		log_warn("daemon", "run %s: ignoring a malformed guest telemetry sample", run->id);
		return;
	}
	if (box && !daemon_name_valid(box, DAEMON_NAME_MAX))
		box = NULL;
	pthread_mutex_lock(&run->d->lock);
	running = daemon_store_stages_in(run->d->store, run->id, "running");
	count = daemon_telemetry_labels(box, running, labels, EXEC_TELEMETRY_LABELS_MAX);
	for (size_t i = 0; i < count; i++)
		daemon_store_add_telemetry(run->d->store, run->id, now, labels[i], guest, NULL);
	pthread_mutex_unlock(&run->d->lock);
	json_decref(running);
	json_decref(guest);
}

/* A host sample of the run's process, when one is due (the first at once). */
static void exec_host_telemetry(struct exec_run *run, pid_t pid,
				struct daemon_host_sampler *sampler)
{
	uint64_t now = daemon_monotonic_ms();
	json_t *host;

	if (sampler->has_previous && now - sampler->previous_ms < DAEMON_HOST_SAMPLE_MS)
		return;
	host = daemon_host_sample(sampler, pid, now);
	if (!host)
		return;
	pthread_mutex_lock(&run->d->lock);
	daemon_store_add_telemetry(run->d->store, run->id, daemon_now_ms(), NULL, NULL, host);
	pthread_mutex_unlock(&run->d->lock);
	json_decref(host);
}

/*
 * The run's last line on fd 3: {"type":"run.finished","report":{...}}, the report with its
 * outputs cut (`voidbox run` drops the stages' outputs and cuts the run's own to 1 MiB). It is
 * what the daemon records when the report on stdout is over EXEC_REPORT_MAX.
 */
static void exec_run_finished(struct exec_run *run, json_t *event)
{
	json_t *report = json_object_get(event, "report");

	if (!json_is_object(report) || !json_is_boolean(json_object_get(report, "success"))) {
		log_warn("daemon", "run %s: ignoring a malformed run.finished line", run->id);
		return;
	}
	json_decref(run->finished_report);
	run->finished_report = json_incref(report);
}

/*
 * A stage line from fd 3: {"type":"stage.started"|"stage.output"|"stage.output_ready"|
 * "stage.finished",
 * "stage":NAME,...}.
 */
static void exec_stage_event(struct exec_run *run, const char *line, size_t len)
{
	json_t *event = json_loadb(line, len, 0, NULL);
	const char *type = json_string_value(json_object_get(event, "type"));
	const char *stage = json_string_value(json_object_get(event, "stage"));
	struct daemon *d = run->d;

	if (type && strcmp(type, "telemetry") == 0) {
		exec_guest_telemetry(run, event);
		json_decref(event);
		return;
	}
	if (type && strcmp(type, "run.finished") == 0) {
		exec_run_finished(run, event);
		json_decref(event);
		return;
	}
	if (!type || !stage) {
		log_warn("daemon", "run %s: ignoring a malformed stage event", run->id);
		json_decref(event);
		return;
	}
	if (strcmp(type, "stage.output") == 0) {
		exec_stage_output(run, stage, event);
	} else if (strcmp(type, "stage.output_ready") == 0) {
		exec_stage_output_ready(run, stage, event);
	} else if (strcmp(type, "stage.started") == 0) {
		pthread_mutex_lock(&d->lock);
		daemon_store_stage_update(d->store, run->id, stage, "running", run->attempt, 0, 0);
		daemon_event_emit_locked(d, run->id, "stage.started", "info", "stage started", stage,
					 NULL, json_pack("{s:I}", "stage_attempt",
							 (json_int_t)run->attempt));
		pthread_mutex_unlock(&d->lock);
	} else if (strcmp(type, "stage.finished") == 0) {
		bool success = json_is_true(json_object_get(event, "success"));
		int exit_code = (int)json_integer_value(json_object_get(event, "exit_code"));
		json_int_t duration = json_integer_value(json_object_get(event, "duration_ms"));
		const char *output = json_string_value(json_object_get(event, "output"));
		size_t output_len = json_string_length(json_object_get(event, "output"));
		const char *error = json_string_value(json_object_get(event, "error"));
		json_t *payload = json_pack("{s:I, s:i, s:I}", "duration_ms", duration, "exit_code",
					    exit_code, "stage_attempt", (json_int_t)run->attempt);

		if (payload && !success)
			json_object_set_new(payload, "error", json_string(error ? error : "failed"));
		if (output && output_len && !json_object_get(run->streamed, stage))
			daemon_event_emit_lines(d, run->id, stage, "stdout", output, output_len,
						&run->log_budget);
		pthread_mutex_lock(&d->lock);
		if (output && daemon_name_valid(stage, DAEMON_NAME_MAX) &&
		    !json_object_get(run->published, stage))
			daemon_store_put_artifact(d->store, run->id, stage, EXEC_OUTPUT_ARTIFACT,
						  exec_media_type(output, output_len), output,
						  output_len);
		daemon_store_stage_update(d->store, run->id, stage,
					  success ? "succeeded" : "failed", run->attempt, exit_code,
					  (uint64_t)duration);
		daemon_event_emit_locked(d, run->id, success ? "stage.completed" : "stage.failed",
					 success ? "info" : "error",
					 success ? "stage succeeded" : (error ? error : "stage failed"),
					 stage, NULL, payload);
		pthread_mutex_unlock(&d->lock);
	}
	json_decref(event);
}

/* Hands every complete line in buf to its consumer; at EOF the rest is one last line. */
static void exec_drain_lines(struct exec_run *run, enum exec_stream stream,
			     struct exec_buffer *buf, bool eof)
{
	size_t start = 0;

	if (buf->len == 0)
		return;
	for (;;) {
		char *newline = memchr(buf->data + start, '\n', buf->len - start);
		size_t end;

		if (newline)
			end = (size_t)(newline - buf->data);
		else if (eof || (stream == EXEC_STREAM_STDERR && buf->len - start >= EXEC_LINE_MAX))
			end = buf->len;
		else
			break;
		if (end > start) {
			if (stream == EXEC_STREAM_EVENTS)
				exec_stage_event(run, buf->data + start, end - start);
			else
				daemon_event_emit_lines(run->d, run->id, NULL, "stderr",
							buf->data + start, end - start,
							&run->log_budget);
		}
		start = newline ? end + 1 : end;
		if (start >= buf->len)
			break;
	}
	exec_buffer_consume(buf, start);
}

/* The child: its own process group, dies with the forking thread, fds 1, 2 and 3 wired. */
static void exec_child(const struct exec_run *run, char *const argv[], char *const envp[],
		       int out_fd, int err_fd, int events_fd, pid_t parent)
{
	sigset_t none;
	int null_fd;

	setpgid(0, 0);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(EXIT_FAILURE);
	/* the stop signal stays blocked until `voidbox run` has its handler (cli_run.c) */
	sigemptyset(&none);
	sigaddset(&none, SERVICE_STOP_SIGNAL);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (null_fd < 0 || dup2(null_fd, STDIN_FILENO) < 0 || dup2(out_fd, STDOUT_FILENO) < 0 ||
	    dup2(err_fd, STDERR_FILENO) < 0 || dup2(events_fd, EXEC_EVENTS_FD) < 0)
		_exit(EXIT_FAILURE);
	execve(run->d->voidbox_exe, argv, envp);
	dprintf(STDERR_FILENO, "voidbox serve: cannot start %s: %s\n", run->d->voidbox_exe,
		strerror(errno));
	_exit(EXIT_FAILURE);
}

/*
 * The run's environment: base (the daemon's, with the messaging variables of messaging.c),
 * with VOIDBOX_MAX_PARALLEL_VMS set to the policy's max_parallel_microvms_per_run (how many
 * pipeline boxes, each a VM, run at once). Built before the fork, since the child may not
 * allocate. NULL on -ENOMEM; free the array only (its strings are base's and entry).
 */
static char **exec_environment(const struct exec_run *run, char *const *base, char *entry,
			       size_t entry_size)
{
	static const char name[] = EXEC_PARALLEL_ENV "=";
	size_t count = 0, n = 0;
	char **envp;

	while (base[count])
		count++;
	envp = calloc(count + 2, sizeof(*envp));
	if (!envp)
		return NULL;
	for (size_t i = 0; i < count; i++)
		if (strncmp(base[i], name, sizeof(name) - 1) != 0)
			envp[n++] = base[i];
	snprintf(entry, entry_size, "%s%u", name, run->launch.policy.max_parallel_microvms_per_run);
	envp[n] = entry;
	return envp;
}

/* Writes the run's input to a file in its directory (argv cannot hold 4 MiB). */
static int exec_write_input(struct exec_run *run)
{
	size_t len;
	FILE *file;
	int rc = 0;

	run->input_path[0] = '\0';
	if (!run->launch.input)
		return 0;
	snprintf(run->input_path, sizeof(run->input_path), "%s/runs/%s", run->d->state_dir,
		 run->id);
	if (mkdir(run->input_path, EXEC_RUN_DIR_MODE) < 0 && errno != EEXIST)
		return -errno;
	snprintf(run->input_path, sizeof(run->input_path), "%s/runs/%s/input", run->d->state_dir,
		 run->id);
	file = fopen(run->input_path, "we");
	if (!file)
		return -errno;
	len = strlen(run->launch.input);
	if (fwrite(run->launch.input, 1, len, file) != len)
		rc = -EIO;
	if (fclose(file) != 0 && rc == 0)
		rc = -errno;
	return rc;
}

/* Records the child's pid, or kills it at once when a cancel came first. */
static void exec_register(struct exec_run *run, pid_t pid)
{
	struct daemon *d = run->d;
	struct daemon_active_run *active;

	pthread_mutex_lock(&d->lock);
	active = exec_find_active(d, run->id);
	if (active) {
		active->pid = pid;
		if (active->cancel_requested)
			kill(-pid, SIGTERM);
	}
	daemon_store_set_running(d->store, run->id, run->attempt, pid);
	pthread_mutex_unlock(&d->lock);
}

/*
 * True when a cancel was asked. With a live (unreaped) pid, escalates to SIGKILL once the
 * cancel's grace period is over; pid 0 only asks.
 */
static bool exec_check_cancel(struct exec_run *run, pid_t pid)
{
	struct daemon *d = run->d;
	struct daemon_active_run *active;
	bool cancelled = false;

	pthread_mutex_lock(&d->lock);
	active = exec_find_active(d, run->id);
	if (active && active->cancel_requested) {
		cancelled = true;
		if (pid > 0 && daemon_monotonic_ms() >= active->cancel_deadline_ms)
			kill(-pid, SIGKILL);
	}
	pthread_mutex_unlock(&d->lock);
	return cancelled;
}

/* Reads the three pipes until all close, streaming lines as they come. */
static void exec_pump(struct exec_run *run, pid_t pid, int fds[EXEC_STREAM_COUNT],
		      struct exec_buffer bufs[EXEC_STREAM_COUNT])
{
	char chunk[EXEC_READ_CHUNK];
	size_t open_count = EXEC_STREAM_COUNT;
	struct daemon_host_sampler sampler = { 0 };

	while (open_count > 0) {
		struct pollfd pfds[EXEC_STREAM_COUNT];

		exec_host_telemetry(run, pid, &sampler);
		for (size_t i = 0; i < EXEC_STREAM_COUNT; i++)
			pfds[i] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
		if (poll(pfds, EXEC_STREAM_COUNT, EXEC_POLL_MS) < 0 && errno != EINTR)
			break;
		exec_check_cancel(run, pid);
		for (size_t i = 0; i < EXEC_STREAM_COUNT; i++) {
			ssize_t n;

			if (fds[i] < 0 || !(pfds[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			n = read(fds[i], chunk, sizeof(chunk));
			if (n < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (n > 0) {
				exec_buffer_append(&bufs[i], chunk, (size_t)n);
				if (i != EXEC_STREAM_STDOUT)
					exec_drain_lines(run, (enum exec_stream)i, &bufs[i], false);
				continue;
			}
			if (i != EXEC_STREAM_STDOUT)
				exec_drain_lines(run, (enum exec_stream)i, &bufs[i], true);
			close(fds[i]);
			fds[i] = -1;
			open_count--;
		}
	}
}

static int exec_wait(pid_t pid)
{
	int status;

	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return EXEC_EXIT_SIGNAL_BASE + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/*
 * The report on stdout was more than the daemon reads: the run.finished line's report (outputs
 * cut) stands in for it, marked "report_cut", and a run.report_cut event says so. Without that
 * line the attempt has no report and its failure says why.
 */
static void exec_report_over_limit(struct exec_run *run, struct exec_outcome *outcome)
{
	char message[DAEMON_ERROR_MESSAGE_MAX];

	outcome->report_over_limit = true;
	if (!run->finished_report)
		return;
	outcome->report = json_deep_copy(run->finished_report);
	if (!outcome->report)
		return;
	json_object_set_new(outcome->report, "report_cut", json_true());
	snprintf(message, sizeof(message),
		 "the run's report is over the daemon's %u MiB: it is kept without the stages' "
		 "outputs and with the run's output cut to its first %u MiB (each stage's output "
		 "artifact holds its first %u MiB)",
		 EXEC_REPORT_MAX / EXEC_BYTES_PER_MIB, DAEMON_EVENT_OUTPUT_MAX / EXEC_BYTES_PER_MIB,
		 DAEMON_EVENT_OUTPUT_MAX / EXEC_BYTES_PER_MIB);
	pthread_mutex_lock(&run->d->lock);
	daemon_event_emit_locked(run->d, run->id, "run.report_cut", "warn", message, NULL, NULL,
				 json_pack("{s:I, s:I}", "report_limit_bytes",
					   (json_int_t)EXEC_REPORT_MAX, "stage_attempt",
					   (json_int_t)run->attempt));
	pthread_mutex_unlock(&run->d->lock);
}

/* Runs one attempt of the run to its end. */
static int exec_attempt(struct exec_run *run, struct exec_outcome *outcome)
{
	char timeout[EXEC_NUMBER_MAX], events_fd[EXEC_NUMBER_MAX];
	struct exec_buffer bufs[EXEC_STREAM_COUNT] = {
		[EXEC_STREAM_EVENTS] = { .limit = EXEC_EVENT_LINE_MAX },
		[EXEC_STREAM_STDERR] = { .limit = EXEC_LINE_MAX * 2 },
		[EXEC_STREAM_STDOUT] = { .limit = EXEC_REPORT_MAX },
	};
	int pipes[EXEC_STREAM_COUNT][2] = { { -1, -1 }, { -1, -1 }, { -1, -1 } };
	int read_fds[EXEC_STREAM_COUNT];
	char *argv[EXEC_ARGV_MAX];
	char parallel_entry[EXEC_ENV_ENTRY_MAX];
	char **envp = NULL;
	size_t argc = 0;
	pid_t pid, parent = getpid();
	int rc = 0;

	memset(outcome, 0, sizeof(*outcome));
	json_decref(run->finished_report);
	run->finished_report = NULL;
	snprintf(timeout, sizeof(timeout), "%u", run->launch.policy.stage_timeout_secs);
	snprintf(events_fd, sizeof(events_fd), "%d", EXEC_EVENTS_FD);
	argv[argc++] = run->d->voidbox_exe;
	argv[argc++] = "--output";
	argv[argc++] = "json";
	argv[argc++] = "run";
	argv[argc++] = "--file";
	argv[argc++] = run->launch.spec_path;
	argv[argc++] = "--events-fd";
	argv[argc++] = events_fd;
	argv[argc++] = "--step-timeout";
	argv[argc++] = timeout;
	if (run->input_path[0]) {
		argv[argc++] = "--input-file";
		argv[argc++] = run->input_path;
	}
	argv[argc] = NULL;
	run->child_env = daemon_messaging_child_env(run->d, run->id);
	envp = exec_environment(run, run->child_env ? run->child_env : environ, parallel_entry,
				sizeof(parallel_entry));
	if (!envp) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < EXEC_STREAM_COUNT; i++)
		if (pipe2(pipes[i], O_CLOEXEC) < 0) {
			rc = -errno;
			goto out;
		}
	pid = fork();
	if (pid < 0) {
		rc = -errno;
		goto out;
	}
	if (pid == 0)
		exec_child(run, argv, envp, pipes[EXEC_STREAM_STDOUT][1],
			   pipes[EXEC_STREAM_STDERR][1], pipes[EXEC_STREAM_EVENTS][1], parent);
	free(envp);
	envp = NULL;
	setpgid(pid, pid);
	daemon_messaging_child_env_free(run->child_env);
	run->child_env = NULL;
	for (size_t i = 0; i < EXEC_STREAM_COUNT; i++) {
		close(pipes[i][1]);
		pipes[i][1] = -1;
		read_fds[i] = pipes[i][0];
		pipes[i][0] = -1;
	}
	exec_register(run, pid);
	exec_pump(run, pid, read_fds, bufs);
	outcome->exit_code = exec_wait(pid);
	outcome->cancelled = exec_check_cancel(run, 0);
	if (bufs[EXEC_STREAM_STDOUT].len && !bufs[EXEC_STREAM_STDOUT].overflowed)
		outcome->report = json_loadb(bufs[EXEC_STREAM_STDOUT].data,
					     bufs[EXEC_STREAM_STDOUT].len, 0, NULL);
	if (bufs[EXEC_STREAM_STDOUT].overflowed)
		exec_report_over_limit(run, outcome);
out:
	for (size_t i = 0; i < EXEC_STREAM_COUNT; i++) {
		if (pipes[i][0] >= 0)
			close(pipes[i][0]);
		if (pipes[i][1] >= 0)
			close(pipes[i][1]);
		free(bufs[i].data);
	}
	free(envp);
	daemon_messaging_child_env_free(run->child_env);
	run->child_env = NULL;
	return rc;
}

/* Stages still queued are skipped; running ones failed (exit -1) when the run was stopped. */
static void exec_close_stages_locked(struct daemon *d, const char *run_id, uint32_t attempt,
				     const char *reason)
{
	json_t *running = daemon_store_stages_in(d->store, run_id, "running");
	json_t *queued = daemon_store_stages_in(d->store, run_id, "queued");
	size_t i;
	json_t *name;

	json_array_foreach(running, i, name) {
		daemon_store_stage_update(d->store, run_id, json_string_value(name), "failed",
					  attempt, -1, 0);
		daemon_event_emit_locked(d, run_id, "stage.failed", "error", reason,
					 json_string_value(name), NULL,
					 json_pack("{s:i, s:i, s:I, s:s}", "duration_ms", 0,
						   "exit_code", -1, "stage_attempt",
						   (json_int_t)attempt, "error", reason));
	}
	json_array_foreach(queued, i, name) {
		daemon_store_stage_update(d->store, run_id, json_string_value(name), "skipped",
					  attempt, 0, 0);
		daemon_event_emit_locked(d, run_id, "stage.skipped", "info", reason,
					 json_string_value(name), NULL,
					 json_pack("{s:s, s:I}", "reason", reason, "stage_attempt",
						   (json_int_t)attempt));
	}
	json_decref(running);
	json_decref(queued);
}

static void exec_timed_wait(struct daemon *d);

/*
 * After the store refused a step of run_id's end: says so the first time, then waits
 * EXEC_STORE_RETRY_MS (woken early only by the daemon stopping). False when the daemon stops,
 * or for a run this daemon is not running (a restart's recovery, which the next start
 * repeats), so neither a stop nor a start waits on a full disk. Called with d->lock held.
 */
static bool exec_store_retry_locked(struct daemon *d, const char *run_id, unsigned *failures)
{
	uint64_t until = daemon_monotonic_ms() + EXEC_STORE_RETRY_MS;

	if (!exec_find_active(d, run_id)) {
		log_error("daemon", "run %s's end is not recorded: %s; the run stays unfinished "
			  "until the daemon's next start marks it failed", run_id,
			  daemon_store_failure(d->store));
		return false;
	}
	if ((*failures)++ == 0)
		log_error("daemon", "run %s has ended but its end is not recorded: %s; it is "
			  "tried again every %u ms until it is", run_id,
			  daemon_store_failure(d->store), EXEC_STORE_RETRY_MS);
	/* other runs' events wake d->changed too, so the wait is until a time, not a signal */
	while (!d->stopping && daemon_monotonic_ms() < until)
		exec_timed_wait(d);
	if (d->stopping)
		log_error("daemon", "the daemon stops before run %s's end could be recorded; its "
			  "next start marks the run failed", run_id);
	return !d->stopping;
}

/*
 * Ends a run in the store: stages closed, the terminal event, the report's output as
 * log.chunk lines, log.closed. report may be NULL; its text is stored as the run's report.
 * log_budget is what is left of the run's log cap (NULL: a run that logged nothing yet).
 * The stages' closing, the terminal event, the run's row and log.closed, which clients wait
 * on, are retried while the store refuses them (exec_store_retry_locked), so a full disk
 * delays a run's end instead of losing it; the output lines are kept in the report either way.
 */
static void exec_finish(struct daemon *d, const char *run_id, uint32_t attempt,
			enum daemon_run_state state, const char *reason, const char *error,
			int exit_code, json_t *report, struct daemon_log_budget *log_budget)
{
	static const char *const terminal_events[] = {
		[DAEMON_RUN_SUCCEEDED] = "run.finished",
		[DAEMON_RUN_FAILED] = "run.failed",
		[DAEMON_RUN_CANCELLED] = "run.cancelled",
	};
	const char *output = json_string_value(json_object_get(report, "output"));
	char *report_text = report ? json_dumps(report, JSON_COMPACT) : NULL;
	struct daemon_log_budget fresh_budget = { .left = d->run_log_max_bytes };
	unsigned failures = 0;
	bool recorded = true;
	int64_t terminal_id;

	pthread_mutex_lock(&d->lock);
	do {
		exec_close_stages_locked(d, run_id, attempt,
					 state == DAEMON_RUN_CANCELLED ? "the run was cancelled" :
					 state == DAEMON_RUN_FAILED ? (reason ? reason :
									"the run failed") :
								      "not run");
		terminal_id = daemon_event_emit_locked(
			d, run_id, terminal_events[state],
			state == DAEMON_RUN_SUCCEEDED ? "info" : "error",
			error ? error : daemon_run_state_name(state), NULL, NULL,
			json_pack("{s:s, s:i, s:s?}", "status", daemon_run_state_name(state),
				  "exit_code", exit_code, "terminal_reason", reason));
	} while (terminal_id <= 0 && (recorded = exec_store_retry_locked(d, run_id, &failures)));
	pthread_mutex_unlock(&d->lock);
	if (recorded && output && output[0])
		daemon_event_emit_lines(d, run_id, NULL, "output", output, strlen(output),
					log_budget ? log_budget : &fresh_budget);
	pthread_mutex_lock(&d->lock);
	while (recorded &&
	       daemon_store_finish_run(d->store, run_id, state, reason, error, exit_code,
				       report_text, (uint64_t)terminal_id) < 0)
		recorded = exec_store_retry_locked(d, run_id, &failures);
	while (recorded && daemon_event_emit_locked(d, run_id, "log.closed", "info",
						    "end of the run's events", NULL, NULL,
						    NULL) <= 0)
		recorded = exec_store_retry_locked(d, run_id, &failures);
	if (recorded && failures > 0)
		log_info("daemon", "run %s's end is recorded", run_id);
	pthread_mutex_unlock(&d->lock);
	free(report_text);
}

/* Removes the run from the active table and wakes cancellers and the shutdown. */
static void exec_forget(struct daemon *d, const char *run_id)
{
	struct daemon_active_run **link;

	pthread_mutex_lock(&d->lock);
	for (link = &d->active; *link; link = &(*link)->next) {
		struct daemon_active_run *run = *link;

		if (strcmp(run->id, run_id) == 0) {
			*link = run->next;
			free(run->cancel_reason);
			free(run);
			d->active_count--;
			break;
		}
	}
	pthread_cond_broadcast(&d->changed);
	pthread_mutex_unlock(&d->lock);
}

/* Why a failed attempt failed, for the run's error. */
static void exec_failure_text(const struct exec_outcome *outcome, char *out, size_t len)
{
	const char *error = json_string_value(json_object_get(outcome->report, "error"));

	if (error)
		snprintf(out, len, "%s", error);
	else if (outcome->report_over_limit)
		snprintf(out, len,
			 "the run's report is over the daemon's %u MiB and the run's process "
			 "(status %d) sent no run.finished line to stand in for it",
			 EXEC_REPORT_MAX / EXEC_BYTES_PER_MIB, outcome->exit_code);
	else if (outcome->exit_code >= EXEC_EXIT_SIGNAL_BASE)
		snprintf(out, len, "the run's process was killed by signal %d",
			 outcome->exit_code - EXEC_EXIT_SIGNAL_BASE);
	else
		snprintf(out, len, "the run's process exited with status %d and no report",
			 outcome->exit_code);
}

/* Whether the daemon is stopping or the run was cancelled: then no further attempt starts. */
static bool exec_should_stop(struct exec_run *run, char **reason)
{
	struct daemon_active_run *active;
	bool stop;

	pthread_mutex_lock(&run->d->lock);
	active = exec_find_active(run->d, run->id);
	stop = run->d->stopping || (active && (active->cancel_requested || active->stop_requested));
	if (reason && active && active->cancel_reason)
		*reason = strdup(active->cancel_reason);
	pthread_mutex_unlock(&run->d->lock);
	return stop;
}

static bool exec_stop_was_requested(struct exec_run *run)
{
	struct daemon_active_run *active;
	bool stop;

	pthread_mutex_lock(&run->d->lock);
	active = exec_find_active(run->d, run->id);
	stop = active && active->stop_requested;
	pthread_mutex_unlock(&run->d->lock);
	return stop;
}

static void exec_end(struct exec_run *run, struct exec_outcome *outcome, int rc)
{
	char error[DAEMON_ERROR_MESSAGE_MAX];
	char *cancel_reason = NULL;
	bool stopping;

	exec_should_stop(run, &cancel_reason);
	pthread_mutex_lock(&run->d->lock);
	stopping = run->d->stopping;
	pthread_mutex_unlock(&run->d->lock);
	if (rc < 0) {
		snprintf(error, sizeof(error), "the daemon could not start the run: %s",
			 strerror(-rc));
		exec_finish(run->d, run->id, run->attempt, DAEMON_RUN_FAILED, "start_failed", error,
			    -1, NULL, &run->log_budget);
	} else if (outcome->cancelled && stopping) {
		exec_finish(run->d, run->id, run->attempt, DAEMON_RUN_FAILED, "daemon_stopped",
			    "the daemon stopped while the run was active", outcome->exit_code,
			    outcome->report, &run->log_budget);
	} else if (outcome->cancelled) {
		exec_finish(run->d, run->id, run->attempt, DAEMON_RUN_CANCELLED, "cancelled",
			    cancel_reason ? cancel_reason : "cancelled by the client",
			    outcome->exit_code, outcome->report, &run->log_budget);
	} else if (outcome->exit_code == 0 &&
		   json_is_true(json_object_get(outcome->report, "success"))) {
		exec_finish(run->d, run->id, run->attempt, DAEMON_RUN_SUCCEEDED,
			    exec_stop_was_requested(run) ? "stopped" : NULL, NULL, 0,
			    outcome->report, &run->log_budget);
	} else {
		exec_failure_text(outcome, error, sizeof(error));
		exec_finish(run->d, run->id, run->attempt, DAEMON_RUN_FAILED, "run_failed", error,
			    outcome->exit_code, outcome->report, &run->log_budget);
	}
	free(cancel_reason);
}

static void *exec_thread(void *opaque)
{
	struct exec_run *run = opaque;
	struct exec_outcome outcome = { 0 };
	int rc = exec_write_input(run);

	run->streamed = json_object();
	run->published = json_object();
	if (!run->streamed || !run->published)
		rc = -ENOMEM;

	for (run->attempt = 1; rc == 0; run->attempt++) {
		char error[DAEMON_ERROR_MESSAGE_MAX];

		rc = exec_attempt(run, &outcome);
		if (rc < 0 || outcome.cancelled ||
		    (outcome.exit_code == 0 &&
		     json_is_true(json_object_get(outcome.report, "success"))) ||
		    run->attempt > run->launch.policy.max_stage_retries || exec_should_stop(run, NULL))
			break;
		exec_failure_text(&outcome, error, sizeof(error));
		pthread_mutex_lock(&run->d->lock);
		exec_close_stages_locked(run->d, run->id, run->attempt, error);
		daemon_event_emit_locked(run->d, run->id, "run.retrying", "warn", error, NULL, NULL,
					 json_pack("{s:I}", "attempt_id",
						   (json_int_t)run->attempt + 1));
		pthread_mutex_unlock(&run->d->lock);
		json_decref(outcome.report);
		outcome.report = NULL;
	}
	exec_end(run, &outcome, rc);
	json_decref(outcome.report);
	if (run->input_path[0])
		unlink(run->input_path);
	exec_forget(run->d, run->id);
	daemon_run_launch_free(&run->launch);
	json_decref(run->streamed);
	json_decref(run->published);
	json_decref(run->finished_report);
	free(run);
	return NULL;
}

int daemon_exec_start(struct daemon *d, const char *run_id)
{
	struct exec_run *run = calloc(1, sizeof(*run));
	struct daemon_active_run *active = calloc(1, sizeof(*active));
	pthread_attr_t attr;
	pthread_t thread;
	int rc;

	if (!run || !active) {
		rc = -ENOMEM;
		goto fail;
	}
	run->d = d;
	run->log_budget.left = d->run_log_max_bytes;
	snprintf(run->id, sizeof(run->id), "%s", run_id);
	snprintf(active->id, sizeof(active->id), "%s", run_id);
	pthread_mutex_lock(&d->lock);
	rc = daemon_store_run_launch(d->store, run_id, &run->launch);
	if (rc == 0) {
		active->next = d->active;
		d->active = active;
		d->active_count++;
	}
	pthread_mutex_unlock(&d->lock);
	if (rc < 0)
		goto fail;
	active = NULL;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = -pthread_create(&thread, &attr, exec_thread, run);
	pthread_attr_destroy(&attr);
	if (rc == 0)
		return 0;
	exec_finish(d, run_id, 0, DAEMON_RUN_FAILED, "start_failed",
		    "the daemon could not start a thread for the run", -1, NULL, NULL);
	exec_forget(d, run_id);
fail:
	if (run)
		daemon_run_launch_free(&run->launch);
	free(run);
	free(active);
	return rc;
}

/* Asks an active run to stop; called with d->lock held. */
static void exec_request_cancel_locked(struct daemon_active_run *active, const char *reason,
				       uint32_t grace_secs)
{
	if (active->cancel_requested)
		return;
	active->cancel_requested = true;
	active->cancel_reason = reason ? strdup(reason) : NULL;
	active->cancel_deadline_ms = daemon_monotonic_ms() + (uint64_t)grace_secs * EXEC_MS_PER_SEC;
	if (active->pid > 0)
		kill(-active->pid, SIGTERM);
}

static void exec_timed_wait(struct daemon *d)
{
	struct timespec deadline;

	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_nsec += EXEC_CANCEL_WAIT_SLICE_MS * EXEC_NS_PER_MS;
	deadline.tv_sec += deadline.tv_nsec / (EXEC_NS_PER_MS * EXEC_MS_PER_SEC);
	deadline.tv_nsec %= EXEC_NS_PER_MS * EXEC_MS_PER_SEC;
	pthread_cond_timedwait(&d->changed, &d->lock, &deadline);
}

/* The policy's grace period of a run; called with d->lock held. */
static uint32_t exec_grace_locked(struct daemon *d, const char *run_id)
{
	struct daemon_run_launch launch;
	uint32_t grace = DAEMON_POLICY_DEFAULT_GRACE;

	if (daemon_store_run_launch(d->store, run_id, &launch) == 0) {
		grace = launch.policy.cancel_grace_period_secs;
		daemon_run_launch_free(&launch);
	}
	return grace;
}

/* Takes d->lock: 1 when the run is not terminal (the lock stays held), else 0 or -errno. */
static int exec_lock_unfinished(struct daemon *d, const char *run_id)
{
	enum daemon_run_state state;
	int rc;

	pthread_mutex_lock(&d->lock);
	rc = daemon_store_run_state(d->store, run_id, &state);
	if (rc < 0 || daemon_run_state_terminal(state)) {
		pthread_mutex_unlock(&d->lock);
		return rc < 0 ? rc : 0;
	}
	return 1;
}

int daemon_exec_cancel(struct daemon *d, const char *run_id, const char *reason)
{
	struct daemon_active_run *active;
	int rc = exec_lock_unfinished(d, run_id);

	if (rc <= 0)
		return rc;
	active = exec_find_active(d, run_id);
	if (active) {
		exec_request_cancel_locked(active, reason, exec_grace_locked(d, run_id));
		while (exec_find_active(d, run_id))
			exec_timed_wait(d);
		pthread_mutex_unlock(&d->lock);
		return 0;
	}
	pthread_mutex_unlock(&d->lock);
	/* known, not terminal, no process: it never started */
	exec_finish(d, run_id, 0, DAEMON_RUN_CANCELLED, "cancelled",
		    reason ? reason : "cancelled by the client", -1, NULL, NULL);
	return 0;
}

int daemon_exec_stop(struct daemon *d, const char *run_id, const char *reason)
{
	struct daemon_active_run *active;
	int rc = exec_lock_unfinished(d, run_id);
	uint32_t grace;

	if (rc <= 0)
		return rc;
	active = exec_find_active(d, run_id);
	if (!active || active->pid <= 0) {
		/* no process to ask (not started, or between attempts): nothing runs to stop */
		pthread_mutex_unlock(&d->lock);
		return daemon_exec_cancel(d, run_id, reason);
	}
	grace = exec_grace_locked(d, run_id);
	if (!active->stop_requested) {
		active->stop_requested = true;
		active->stop_deadline_ms = daemon_monotonic_ms() + (uint64_t)grace * EXEC_MS_PER_SEC;
		daemon_event_emit_locked(d, run_id, "run.stop_requested", "info",
					 reason ? reason : "stop requested by the client", NULL,
					 NULL, json_pack("{s:I}", "grace_period_secs",
							 (json_int_t)grace));
		kill(active->pid, SERVICE_STOP_SIGNAL);
	}
	while ((active = exec_find_active(d, run_id))) {
		if (!active->cancel_requested && daemon_monotonic_ms() >= active->stop_deadline_ms)
			exec_request_cancel_locked(active,
						   "the run did not stop within its grace period",
						   grace);
		exec_timed_wait(d);
	}
	pthread_mutex_unlock(&d->lock);
	return 0;
}

void daemon_exec_stop_all(struct daemon *d)
{
	pthread_mutex_lock(&d->lock);
	d->stopping = true;
	for (struct daemon_active_run *run = d->active; run; run = run->next)
		exec_request_cancel_locked(run, "the daemon stopped", exec_grace_locked(d, run->id));
	pthread_cond_broadcast(&d->changed);
	while (d->active_count > 0)
		exec_timed_wait(d);
	pthread_mutex_unlock(&d->lock);
}

void daemon_exec_recover(struct daemon *d)
{
	json_t *ids, *id;
	size_t i;

	pthread_mutex_lock(&d->lock);
	ids = daemon_store_unfinished_runs(d->store);
	pthread_mutex_unlock(&d->lock);
	json_array_foreach(ids, i, id) {
		log_warn("daemon", "run %s was active when the daemon stopped; marking it failed",
			 json_string_value(id));
		exec_finish(d, json_string_value(id), 0, DAEMON_RUN_FAILED, "daemon_restarted",
			    "the daemon restarted while the run was active; submit it again", -1,
			    NULL, NULL);
	}
	json_decref(ids);
}
