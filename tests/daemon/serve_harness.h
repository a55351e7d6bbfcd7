/*
 * Starting `voidbox serve` from a test and talking to it: shared by the daemon's contract test
 * (tests/daemon/test_daemon.c) and its VM test (tests/vm/vm_daemon.c). The daemon prints the
 * address it bound ("listening on URL") on stdout, so a test can ask for port 0 and learn the
 * port without racing for it. Every wait is a bounded poll that fails instead of hanging; none
 * asserts anything about time. Include after harness.h (it CHECKs).
 */
#ifndef VOIDBOX_TESTS_DAEMON_SERVE_HARNESS_H
#define VOIDBOX_TESTS_DAEMON_SERVE_HARNESS_H

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "daemon/client.h"
#include "process_probe.h"

#define SERVE_LINE_MAX 512
#define SERVE_ERR_MAX 1024
#define SERVE_PATH_MAX 512
#define SERVE_START_WAIT_MS 30000
#define SERVE_POLL_NS (20 * 1000 * 1000L)
#define SERVE_WAIT_ROUNDS 6000 /* x SERVE_POLL_NS: the bound on any wait for a run */
#define SERVE_HTTP_OK 200

struct served {
	pid_t pid;
	struct daemon_client client;
	char url[SERVE_LINE_MAX];
};

static inline void serve_pause(void)
{
	const struct timespec pause = { .tv_nsec = SERVE_POLL_NS };

	nanosleep(&pause, NULL);
}

/* Reads the daemon's "listening on URL" line from fd, bounded. */
static inline bool read_listen_line(int fd, char *url, size_t url_len)
{
	static const char marker[] = "listening on ";
	char line[SERVE_LINE_MAX];
	size_t used = 0;
	long until = process_probe_now_ms() + SERVE_START_WAIT_MS;

	while (used + 1 < sizeof(line) && process_probe_now_ms() < until) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (poll(&pfd, 1, (int)(until - process_probe_now_ms())) <= 0)
			break;
		n = read(fd, line + used, 1);
		if (n <= 0)
			break;
		if (line[used] == '\n') {
			char *found;

			line[used] = '\0';
			found = strstr(line, marker);
			if (!found)
				return false;
			snprintf(url, url_len, "%s", found + strlen(marker));
			return true;
		}
		used++;
	}
	return false;
}

/*
 * Starts `voidbox serve [--listen LISTEN] [--state-dir STATE_DIR] [--token-file F]`, each flag
 * left out when its value is NULL (the daemon's defaults then apply).
 */
/* `voidbox serve` with the flags given (NULL: not given); max_run_log is --max-run-log. */
static inline bool serve_start_with(struct served *served, const char *voidbox_path,
				    const char *state_dir, const char *listen,
				    const char *token_file, const char *max_run_log)
{
	char err[SERVE_ERR_MAX];
	int out[2];

	memset(served, 0, sizeof(*served));
	if (pipe(out) < 0)
		return false;
	served->pid = fork();
	if (served->pid == 0) {
		const char *const flags[][2] = { { "--listen", listen }, { "--state-dir", state_dir },
						 { "--token-file", token_file },
						 { "--max-run-log", max_run_log } };
		const char *argv[2 + 2 * sizeof(flags) / sizeof(flags[0]) + 1] = { voidbox_path,
										     "serve" };
		size_t argc = 2;

		for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
			if (flags[i][1]) {
				argv[argc++] = flags[i][0];
				argv[argc++] = flags[i][1];
			}
		}

		dup2(out[1], STDOUT_FILENO);
		close(out[0]);
		close(out[1]);
		execv(voidbox_path, (char *const *)argv);
		_exit(127);
	}
	close(out[1]);
	if (served->pid < 0 || !read_listen_line(out[0], served->url, sizeof(served->url))) {
		close(out[0]);
		if (served->pid > 0) {
			kill(served->pid, SIGKILL);
			waitpid(served->pid, NULL, 0);
		}
		return false;
	}
	close(out[0]);
	if (daemon_client_init(&served->client, served->url, token_file, NULL, err,
			       sizeof(err)) < 0) {
		fprintf(stderr, "  client: %s\n", err);
		return false;
	}
	return true;
}

static inline bool serve_start(struct served *served, const char *voidbox_path,
			       const char *state_dir, const char *listen, const char *token_file)
{
	return serve_start_with(served, voidbox_path, state_dir, listen, token_file, NULL);
}

/* Stops the daemon with sig and reaps it; returns its exit status (-1: killed). */
static inline int serve_stop(struct served *served, int sig)
{
	int status;

	kill(served->pid, sig);
	if (waitpid(served->pid, &status, 0) != served->pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* One request; returns the parsed body (NULL when none or not JSON) and the status. */
static inline json_t *call(const struct served *served, const char *method, const char *path,
		    const char *body, long *status)
{
	struct daemon_response response;
	char err[SERVE_ERR_MAX];
	json_t *parsed;

	*status = 0;
	if (daemon_client_request(&served->client, method, path, body, &response, err,
				  sizeof(err)) < 0) {
		fprintf(stderr, "  request %s %s: %s\n", method, path, err);
		return NULL;
	}
	*status = response.status;
	parsed = json_loads(response.body, JSON_DECODE_ANY, NULL);
	daemon_response_free(&response);
	return parsed;
}

static inline char *create_body(const char *spec_path, const char *run_id)
{
	json_t *body = json_pack("{s:s, s:s?}", "file", spec_path, "run_id", run_id);
	char *text = json_dumps(body, JSON_COMPACT);

	json_decref(body);
	return text;
}

/* POST /v1/runs for spec_path; returns the run id (malloc'd) or NULL. */
static inline char *create_run(const struct served *served, const char *spec_path, const char *run_id)
{
	char *body = create_body(spec_path, run_id);
	long status;
	json_t *answer = call(served, "POST", "/v1/runs", body, &status);
	char *id = NULL;

	free(body);
	CHECK_INT_EQ(status, SERVE_HTTP_OK);
	if (json_is_string(json_object_get(answer, "run_id")))
		id = strdup(json_string_value(json_object_get(answer, "run_id")));
	CHECK(id != NULL);
	json_decref(answer);
	return id;
}

static inline json_t *get_run(const struct served *served, const char *run_id)
{
	char path[SERVE_PATH_MAX];
	long status;

	snprintf(path, sizeof(path), "/v1/runs/%s", run_id);
	return call(served, "GET", path, NULL, &status);
}

static inline bool state_is_terminal(const json_t *run)
{
	const char *state = json_string_value(json_object_get(run, "status"));

	return state && (strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0 ||
			 strcmp(state, "cancelled") == 0);
}

/* Polls the run until it is terminal (bounded); returns its last state. */
static inline json_t *wait_terminal(const struct served *served, const char *run_id)
{
	json_t *run = NULL;

	for (int i = 0; i < SERVE_WAIT_ROUNDS; i++) {
		json_decref(run);
		run = get_run(served, run_id);
		if (state_is_terminal(run))
			return run;
		serve_pause();
	}
	CHECK(state_is_terminal(run));
	return run;
}

/*
 * Polls until the run's stage is running and its process is known; returns the pid. A run
 * that ended first fails the check at once (its stage can no longer start).
 */
static inline pid_t wait_stage_running(const struct served *served, const char *run_id,
				const char *stage)
{
	for (int i = 0; i < SERVE_WAIT_ROUNDS; i++) {
		json_t *run = get_run(served, run_id);
		json_t *state = json_object_get(json_object_get(run, "stage_states"), stage);
		const char *status = json_string_value(json_object_get(state, "status"));
		pid_t pid = (pid_t)json_integer_value(json_object_get(run, "pid"));
		bool running = status && strcmp(status, "running") == 0 && pid > 0;
		bool ended = state_is_terminal(run);

		json_decref(run);
		if (running)
			return pid;
		if (ended) {
			CHECK(!"the run ended before the stage started");
			return 0;
		}
		serve_pause();
	}
	CHECK(!"the stage never started");
	return 0;
}

/*
 * Prints what the daemon knows of a run to stderr: its state and error, then every event's
 * type, stage and message (the run's own log among them). A VM test calls it when one of its
 * checks failed, so the log shows why the run's VM failed (a boot error, a guest crash).
 */
static inline void serve_show_run(const struct served *served, const char *run_id)
{
	char path[SERVE_PATH_MAX];
	json_t *run = get_run(served, run_id), *events, *event;
	size_t index;
	long status;

	fprintf(stderr, "  run %s: status %s, error: %s\n", run_id,
		json_string_value(json_object_get(run, "status")) ?: "(none)",
		json_string_value(json_object_get(run, "error")) ?: "(none)");
	json_decref(run);
	snprintf(path, sizeof(path), "/v1/runs/%s/events", run_id);
	events = call(served, "GET", path, NULL, &status);
	json_array_foreach(events, index, event) {
		const char *stage = json_string_value(json_object_get(event, "stage_name"));

		fprintf(stderr, "  run %s event %s%s%s: %s\n", run_id,
			json_string_value(json_object_get(event, "event_type")) ?: "?",
			stage ? " of " : "", stage ? stage : "",
			json_string_value(json_object_get(event, "message")) ?: "");
	}
	json_decref(events);
}

/*
 * Polls until the run's output_ready is true (bounded); true only when it was seen while the
 * run was still running (a service published its output_file and keeps going).
 */
static inline bool wait_output_ready_running(const struct served *served, const char *run_id)
{
	for (int i = 0; i < SERVE_WAIT_ROUNDS; i++) {
		json_t *run = get_run(served, run_id);
		const char *status = json_string_value(json_object_get(run, "status"));
		bool ready = json_is_true(json_object_get(run, "output_ready"));
		bool running = status && strcmp(status, "running") == 0;
		bool ended = state_is_terminal(run);

		json_decref(run);
		if (ready || ended)
			return ready && running;
		serve_pause();
	}
	return false;
}

/*
 * The event_id of the run's first event of type (of stage, with a message starting with
 * message: each unless NULL), or 0.
 */
static inline json_int_t first_event_id(const struct served *served, const char *run_id,
					const char *type, const char *stage, const char *message)
{
	char path[SERVE_PATH_MAX];
	json_t *events, *event;
	json_int_t found = 0;
	size_t index;
	long status;

	snprintf(path, sizeof(path), "/v1/runs/%s/events", run_id);
	events = call(served, "GET", path, NULL, &status);
	json_array_foreach(events, index, event) {
		const char *name = json_string_value(json_object_get(event, "event_type"));
		const char *event_stage = json_string_value(json_object_get(event, "stage_name"));
		const char *text = json_string_value(json_object_get(event, "message"));

		if (!found && name && strcmp(name, type) == 0 &&
		    (!stage || (event_stage && strcmp(event_stage, stage) == 0)) &&
		    (!message || (text && strncmp(text, message, strlen(message)) == 0)))
			found = json_integer_value(json_object_get(event, "event_id"));
	}
	json_decref(events);
	return found;
}

static inline void wait_gone(pid_t pid)
{
	for (int i = 0; i < SERVE_WAIT_ROUNDS && !process_probe_gone(pid); i++)
		serve_pause();
	CHECK(process_probe_gone(pid));
	if (!process_probe_gone(pid))
		kill(pid, SIGKILL);
}

#endif
