/*
 * `voidbox run|validate|inspect|skills|version` as a user runs them: the built binary (argv[1]) is started
 * with the shipped examples (argv[2]) and with specs written to a temporary directory, and its
 * exit status, stdout (JSON parsed with jansson, human text searched) and stderr are checked.
 * Every run is in mock mode, so no VM is needed; VOIDBOX_HOME points at an empty directory so
 * inspect's resolution does not depend on images built on this machine.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "harness.h"
#include "proto/protocol.h"

#define TEST_PATH_MAX 512
#define TEST_OUTPUT_MAX (256 * 1024)
#define TEST_MAX_ARGS 24
/* the longest stage event line the daemon reads (EXEC_EVENT_LINE_MAX in src/daemon/exec.c) */
#define TEST_DAEMON_EVENT_LINE_MAX (8u * 1024u * 1024u)
/* guest output delivered as one piece: the most --input-file takes, all control bytes */
#define TEST_BIG_OUTPUT_LEN (4u * 1000u * 1000u)
#define TEST_CONTROL_BYTE '\001'
/* a device whose every write fails with ENOSPC */
#define TEST_FULL_DEVICE "/dev/full"

static const char *voidbox_path;
static const char *examples_dir;
static char temp_dir[] = "/tmp/voidbox-cli-test-XXXXXX";
/* everything the tests write into temp_dir, removed at the end */
static const char *const temp_files[] = {
	"stdout", "stderr", "fail.yaml", "input.yaml", "mounts.yaml", "cycle.yaml", "inspect.yaml",
	"sandbox.yaml", "skills.yaml", "events", "input.txt", "guest.yaml", "guest.txt",
	"cancel.yaml",
};

struct cli_result {
	int status;
	char out[TEST_OUTPUT_MAX];
	char err[TEST_OUTPUT_MAX];
};

static void read_all(int fd, char *buf, size_t size)
{
	size_t used = 0;
	ssize_t n;

	while (used + 1 < size && (n = read(fd, buf + used, size - 1 - used)) > 0)
		used += (size_t)n;
	buf[used] = '\0';
}

/*
 * Runs voidbox with args (NULL-terminated), stdout to stdout_target (NULL: a file of temp_dir)
 * and stderr to a file, then reads what they hold.
 */
static void run_voidbox_to(struct cli_result *result, const char *stdout_target,
			   const char *const *args)
{
	char out_path[TEST_PATH_MAX], err_path[TEST_PATH_MAX];
	const char *argv[TEST_MAX_ARGS + 2] = { voidbox_path };
	int status, out_fd, err_fd;
	pid_t pid;

	for (size_t i = 0; args[i] && i < TEST_MAX_ARGS; i++)
		argv[i + 1] = args[i];
	snprintf(out_path, sizeof(out_path), "%s/stdout", temp_dir);
	snprintf(err_path, sizeof(err_path), "%s/stderr", temp_dir);
	pid = fork();
	if (pid == 0) {
		out_fd = stdout_target ? open(stdout_target, O_WRONLY)
				       : open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		err_fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (out_fd < 0 || err_fd < 0)
			_exit(127);
		dup2(out_fd, STDOUT_FILENO);
		dup2(err_fd, STDERR_FILENO);
		execv(voidbox_path, (char *const *)argv);
		_exit(127);
	}
	result->status = -1;
	if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status))
		result->status = WEXITSTATUS(status);
	out_fd = open(out_path, O_RDONLY);
	err_fd = open(err_path, O_RDONLY);
	read_all(out_fd, result->out, sizeof(result->out));
	read_all(err_fd, result->err, sizeof(result->err));
	close(out_fd);
	close(err_fd);
}

static void run_voidbox(struct cli_result *result, const char *const *args)
{
	run_voidbox_to(result, NULL, args);
}

static void write_spec(const char *name, const char *text, char *path, size_t path_len)
{
	FILE *file;

	snprintf(path, path_len, "%s/%s", temp_dir, name);
	file = fopen(path, "w");
	CHECK(file != NULL);
	if (!file)
		return;
	fputs(text, file);
	fclose(file);
}

/* `voidbox COMMAND --help` succeeds and prints USAGE on stdout. */
static void check_help(const char *command, const char *usage)
{
	static struct cli_result result;

	run_voidbox(&result, (const char *const[]){ command, "--help", NULL });
	CHECK_INT_EQ(result.status, 0);
	CHECK(strstr(result.out, usage) != NULL);
}

static json_t *parse_json(const char *text)
{
	json_error_t error;
	json_t *json = json_loads(text, 0, &error);

	if (!json)
		fprintf(stderr, "  not JSON (%s): %s\n", error.text, text);
	return json;
}

static void test_run_example_human_and_json(void)
{
	static struct cli_result result;
	char path[TEST_PATH_MAX];
	json_t *json;

	snprintf(path, sizeof(path), "%s/workflow.yaml", examples_dir);
	/* the example boots a real VM as written; --sandbox-mode mock needs none */
	run_voidbox(&result, (const char *const[]){ "--log-level", "info", "run", "--file", path,
						    "--sandbox-mode", "mock", NULL });
	CHECK_INT_EQ(result.status, 0);
	CHECK(strstr(result.out, "HELLO FROM WORKFLOW") != NULL);
	CHECK(strstr(result.out, "succeeded") != NULL);
	CHECK(strstr(result.err, "[workflow:hello-workflow] step 2/2: \"transform\" running...") !=
	      NULL);

	run_voidbox(&result, (const char *const[]){ "--output", "json", "run", "--file", path,
						    "--sandbox-mode", "mock", NULL });
	CHECK_INT_EQ(result.status, 0);
	json = parse_json(result.out);
	CHECK(json != NULL);
	if (!json)
		return;
	CHECK(json_is_true(json_object_get(json, "success")));
	CHECK_STR_EQ(json_string_value(json_object_get(json, "output")), "HELLO FROM WORKFLOW\n");
	CHECK_STR_EQ(json_string_value(json_object_get(json, "kind")), "workflow");
	CHECK_STR_EQ(json_string_value(json_object_get(json, "name")), "hello-workflow");
	CHECK_INT_EQ(json_array_size(json_object_get(json, "stages")), 2);
	CHECK(json_is_number(json_object_get(json, "total_cost_usd")));
	CHECK(json_is_integer(json_object_get(json, "input_tokens")));
	CHECK(json_is_integer(json_object_get(json, "output_tokens")));
	json_decref(json);
}

/* The shipped agent and fan-out pipeline examples run with --sandbox-mode mock (no VM). */
/* Runs voidbox with fd 3 open on temp_dir/events, the way the daemon does; returns its status. */
static int run_voidbox_with_events(const char *const *args, char *events, size_t events_size)
{
	char events_path[TEST_PATH_MAX];
	const char *argv[TEST_MAX_ARGS + 2] = { voidbox_path };
	int status = -1, fd;
	pid_t pid;

	for (size_t i = 0; args[i] && i < TEST_MAX_ARGS; i++)
		argv[i + 1] = args[i];
	snprintf(events_path, sizeof(events_path), "%s/events", temp_dir);
	pid = fork();
	if (pid == 0) {
		fd = open(events_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int null_fd = open("/dev/null", O_WRONLY);

		if (fd < 0 || null_fd < 0 || dup2(fd, 3) < 0)
			_exit(127);
		dup2(null_fd, STDOUT_FILENO);
		execv(voidbox_path, (char *const *)argv);
		_exit(127);
	}
	if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status))
		status = WEXITSTATUS(status);
	fd = open(events_path, O_RDONLY);
	read_all(fd, events, events_size);
	close(fd);
	return status;
}

/*
 * --events-fd: one JSON line per stage start, piece of output and finish, in the run's order,
 * then run.finished with the report less its stages' outputs; --input-file.
 */
static void test_run_stage_events(void)
{
	static char events[TEST_OUTPUT_MAX];
	static const char *const expected[][2] = {
		{ "stage.started", "fetch" }, { "stage.output", "fetch" },
		{ "stage.finished", "fetch" }, { "stage.started", "transform" },
		{ "stage.output", "transform" }, { "stage.finished", "transform" },
		{ "run.finished", NULL },
	};
	const size_t expected_count = sizeof(expected) / sizeof(expected[0]);
	char path[TEST_PATH_MAX], input_path[TEST_PATH_MAX];
	char *line, *save = NULL;
	size_t count = 0;

	snprintf(path, sizeof(path), "%s/workflow.yaml", examples_dir);
	CHECK_INT_EQ(run_voidbox_with_events((const char *const[]){ "run", "--file", path,
								    "--sandbox-mode", "mock",
								    "--events-fd", "3", NULL },
					     events, sizeof(events)), 0);
	for (line = strtok_r(events, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		json_t *event = parse_json(line);

		CHECK(count < expected_count);
		if (count < expected_count) {
			CHECK_STR_EQ(json_string_value(json_object_get(event, "type")),
				     expected[count][0]);
			if (expected[count][1])
				CHECK_STR_EQ(json_string_value(json_object_get(event, "stage")),
					     expected[count][1]);
			else
				CHECK(json_object_get(event, "stage") == NULL);
		}
		if (count == 1) {
			CHECK_STR_EQ(json_string_value(json_object_get(event, "stream")), "stdout");
			CHECK_STR_EQ(json_string_value(json_object_get(event, "data")),
				     "hello from workflow\n");
		}
		if (count == expected_count - 2) {
			CHECK(json_is_true(json_object_get(event, "success")));
			CHECK_STR_EQ(json_string_value(json_object_get(event, "output")),
				     "HELLO FROM WORKFLOW\n");
		}
		if (count == expected_count - 1) {
			json_t *report = json_object_get(event, "report");
			json_t *stages = json_object_get(report, "stages");

			CHECK(json_is_true(json_object_get(report, "success")));
			CHECK_STR_EQ(json_string_value(json_object_get(report, "output")),
				     "HELLO FROM WORKFLOW\n");
			CHECK_INT_EQ(json_integer_value(json_object_get(report, "output_bytes")),
				     strlen("HELLO FROM WORKFLOW\n"));
			CHECK_INT_EQ(json_array_size(stages), 2);
			CHECK_STR_EQ(json_string_value(json_object_get(json_array_get(stages, 1),
									"name")),
				     "transform");
			CHECK(json_object_get(json_array_get(stages, 1), "output") == NULL);
		}
		count++;
		json_decref(event);
	}
	CHECK_INT_EQ(count, expected_count);
	/* not an open descriptor: a usage error */
	CHECK_INT_EQ(run_voidbox_with_events((const char *const[]){ "run", "--file", path,
								    "--events-fd", "99", NULL },
					     events, sizeof(events)), 2);
	write_spec("input.txt", "from a file", input_path, sizeof(input_path));
	write_spec("input.yaml",
		   "api_version: v1\nkind: workflow\nname: in\nsandbox:\n  mode: mock\n"
		   "workflow:\n  steps:\n    - name: echo\n      run:\n        program: cat\n",
		   path, sizeof(path));
	CHECK_INT_EQ(run_voidbox_with_events((const char *const[]){ "run", "--file", path,
								    "--input-file", input_path,
								    "--events-fd", "3", NULL },
					     events, sizeof(events)), 0);
	CHECK(strstr(events, "\"output\":\"from a file\"") != NULL);
}

/* Writes len bytes of data to temp_dir/name; path gets its name. */
static void write_bytes(const char *name, const char *data, size_t len, char *path,
			size_t path_len)
{
	FILE *file;

	snprintf(path, path_len, "%s/%s", temp_dir, name);
	file = fopen(path, "w");
	CHECK(file != NULL);
	if (!file)
		return;
	CHECK_INT_EQ(fwrite(data, 1, len, file), len);
	fclose(file);
}

/*
 * What a guest prints reaches the host as data, never as terminal control or a broken
 * report: output that is not UTF-8 still makes a JSON report (stray bytes as '?'), escape
 * sequences in a failing step's stderr are spaces in the error on the terminal and in the
 * log, and output delivered as one huge piece goes out as stage.output events the daemon
 * can read whole, the stage's finish after them.
 */
static void test_run_guest_bytes(void)
{
	static const char odd_output[] = "abc\xff\x1b[31mred\n";
	static struct cli_result result;
	char spec_path[TEST_PATH_MAX], input_path[TEST_PATH_MAX], events_path[TEST_PATH_MAX];
	char events[TEST_PATH_MAX];
	char *big, *line = NULL;
	size_t line_cap = 0, output_events = 0;
	bool finished = false;
	ssize_t line_len;
	FILE *file;
	json_t *json;

	write_spec("guest.yaml",
		   "api_version: v1\nkind: workflow\nname: guest\nsandbox:\n  mode: mock\n"
		   "workflow:\n  steps:\n    - name: echo\n      run:\n        program: cat\n",
		   spec_path, sizeof(spec_path));
	write_bytes("guest.txt", odd_output, strlen(odd_output), input_path, sizeof(input_path));
	run_voidbox(&result, (const char *const[]){ "--output", "json", "run", "--file", spec_path,
						    "--input-file", input_path, NULL });
	CHECK_INT_EQ(result.status, 0);
	json = parse_json(result.out);
	CHECK(json != NULL);
	if (json) {
		CHECK(json_is_true(json_object_get(json, "success")));
		CHECK_STR_EQ(json_string_value(json_object_get(json, "output")),
			     "abc?\x1b[31mred\n");
		json_decref(json);
	}

	write_spec("guest.yaml",
		   "api_version: v1\nkind: workflow\nname: guest\nsandbox:\n  mode: mock\n"
		   "workflow:\n  steps:\n    - name: evil\n      run:\n        program: mock-exit\n"
		   "        args: ['3', \"\\e]0;owned\\a\\e[2J\\x9b1m done\"]\n",
		   spec_path, sizeof(spec_path));
	run_voidbox(&result, (const char *const[]){ "run", "--file", spec_path, NULL });
	CHECK_INT_EQ(result.status, 1);
	CHECK(strstr(result.out, "failed with exit code 3:") != NULL);
	CHECK(strstr(result.out, "done") != NULL);
	CHECK(strpbrk(result.out, "\x1b\a") == NULL);
	CHECK(strstr(result.out, "\xc2\x9b") == NULL);
	CHECK(strstr(result.err, "failed with exit code 3:") != NULL);
	CHECK(strpbrk(result.err, "\x1b\a") == NULL);

	big = malloc(TEST_BIG_OUTPUT_LEN);
	CHECK(big != NULL);
	if (!big)
		return;
	memset(big, TEST_CONTROL_BYTE, TEST_BIG_OUTPUT_LEN);
	write_bytes("guest.txt", big, TEST_BIG_OUTPUT_LEN, input_path, sizeof(input_path));
	free(big);
	write_spec("guest.yaml",
		   "api_version: v1\nkind: workflow\nname: guest\nsandbox:\n  mode: mock\n"
		   "workflow:\n  steps:\n    - name: flood\n      run:\n        program: cat\n",
		   spec_path, sizeof(spec_path));
	CHECK_INT_EQ(run_voidbox_with_events((const char *const[]){ "run", "--file", spec_path,
								    "--input-file", input_path,
								    "--events-fd", "3", NULL },
					     events, sizeof(events)), 0);
	snprintf(events_path, sizeof(events_path), "%s/events", temp_dir);
	file = fopen(events_path, "r");
	CHECK(file != NULL);
	while (file && (line_len = getline(&line, &line_cap, file)) > 0) {
		CHECK((size_t)line_len <= TEST_DAEMON_EVENT_LINE_MAX);
		if (strstr(line, "\"type\":\"stage.output\""))
			output_events++;
		if (strstr(line, "\"type\":\"stage.finished\""))
			finished = output_events > 0;
	}
	CHECK(output_events > 1);
	CHECK(finished);
	free(line);
	if (file)
		fclose(file);
}

static void test_run_agent_and_pipeline_examples(void)
{
	static struct cli_result result;
	char path[TEST_PATH_MAX];
	json_t *json;

	snprintf(path, sizeof(path), "%s/agent.yaml", examples_dir);
	run_voidbox(&result, (const char *const[]){ "--output", "json", "run", "--file", path,
						    "--sandbox-mode", "mock", NULL });
	CHECK_INT_EQ(result.status, 0);
	json = parse_json(result.out);
	CHECK(json != NULL);
	if (json) {
		CHECK(json_is_true(json_object_get(json, "success")));
		CHECK_STR_EQ(json_string_value(json_object_get(json, "kind")), "agent");
		CHECK_INT_EQ(json_array_size(json_object_get(json, "stages")), 1);
		CHECK(strstr(json_string_value(json_object_get(json, "output")), "haiku") != NULL);
		json_decref(json);
	}

	snprintf(path, sizeof(path), "%s/pipeline-fanout.yaml", examples_dir);
	run_voidbox(&result, (const char *const[]){ "--output", "json", "run", "--file", path,
						    "--sandbox-mode", "mock", NULL });
	CHECK_INT_EQ(result.status, 0);
	json = parse_json(result.out);
	CHECK(json != NULL);
	if (json) {
		CHECK(json_is_true(json_object_get(json, "success")));
		CHECK_STR_EQ(json_string_value(json_object_get(json, "kind")), "pipeline");
		CHECK(json_array_size(json_object_get(json, "stages")) >= 2);
		json_decref(json);
	}
}

static void test_run_failure_and_input(void)
{
	static struct cli_result result;
	char path[TEST_PATH_MAX];
	json_t *json;

	write_spec("fail.yaml",
		   "kind: workflow\nname: fails\nsandbox: {mode: local}\nworkflow:\n  steps:\n"
		   "    - name: lint\n      run: {program: mock-exit, args: ['7', 'lint: 2 errors']}\n",
		   path, sizeof(path));
	/* --sandbox-mode mock overrides the spec's local, so no VM is needed */
	run_voidbox(&result, (const char *const[]){ "--output", "json", "run", "--file", path,
						    "--sandbox-mode", "mock", NULL });
	CHECK_INT_EQ(result.status, 1);
	json = parse_json(result.out);
	if (json) {
		CHECK(json_is_false(json_object_get(json, "success")));
		CHECK_STR_EQ(json_string_value(json_object_get(json, "error")),
			     "step \"lint\" failed with exit code 7: lint: 2 errors");
		json_decref(json);
	}
	CHECK(strstr(result.err, "step \"lint\" failed with exit code 7") != NULL);

	write_spec("input.yaml",
		   "kind: workflow\nname: in\nsandbox: {mode: mock}\nworkflow:\n  steps:\n"
		   "    - name: up\n      run: {program: tr, args: [a-z, A-Z]}\n",
		   path, sizeof(path));
	run_voidbox(&result, (const char *const[]){ "run", "--file", path, "--input", "piped in",
						    NULL });
	CHECK_INT_EQ(result.status, 0);
	CHECK(strstr(result.out, "PIPED IN") != NULL);

	run_voidbox(&result, (const char *const[]){ "run", "--file", path, "--sandbox-mode", "vm",
						    NULL });
	CHECK_INT_EQ(result.status, 2);
	run_voidbox(&result, (const char *const[]){ "run", NULL });
	CHECK_INT_EQ(result.status, 2);
	CHECK(strstr(result.err, "--file SPEC is required") != NULL);
	check_help("run", "usage: voidbox run --file SPEC");
}

static void test_run_refuses_unsupported(void)
{
	static struct cli_result result;
	char path[TEST_PATH_MAX];

	write_spec("observe.yaml",
		   "kind: workflow\nname: m\nsandbox:\n  mode: mock\n"
		   "observe: {traces: true}\nworkflow:\n  steps:\n"
		   "    - name: a\n      run: {program: echo}\n",
		   path, sizeof(path));
	run_voidbox(&result, (const char *const[]){ "run", "--file", path, NULL });
	CHECK_INT_EQ(result.status, 1);
	CHECK(strstr(result.err, "not supported yet") != NULL);
	CHECK(strstr(result.err, "observe.yaml:5:") != NULL);
	CHECK(strstr(result.out, "FAILED") != NULL);
}

/* sandbox.mounts is a supported feature: the spec runs (a mock box shares nothing). */
static void test_run_accepts_mounts(void)
{
	static struct cli_result result;
	char path[TEST_PATH_MAX];

	write_spec("mounts.yaml",
		   "kind: workflow\nname: m\nsandbox:\n  mode: mock\n  mounts:\n"
		   "    - {host: /tmp, guest: /data, mode: rw}\nworkflow:\n  steps:\n"
		   "    - name: a\n      run: {program: echo}\n",
		   path, sizeof(path));
	run_voidbox(&result, (const char *const[]){ "run", "--file", path, NULL });
	CHECK_INT_EQ(result.status, 0);
	CHECK(strstr(result.err, "not supported yet") == NULL);
}

/* kind sandbox: "is ready" on stderr, then it stays up until SIGTERM and exits 0. */
static void test_run_sandbox_kind_waits_for_signal(void)
{
	static char err[TEST_OUTPUT_MAX];
	char path[TEST_PATH_MAX], out_path[TEST_PATH_MAX];
	int pipe_fds[2], status = -1, out_fd;
	size_t used = 0;
	ssize_t n;
	pid_t pid;

	write_spec("sandbox.yaml", "kind: sandbox\nname: idle\nsandbox: {mode: mock}\n", path,
		   sizeof(path));
	snprintf(out_path, sizeof(out_path), "%s/stdout", temp_dir);
	CHECK(pipe(pipe_fds) == 0);
	pid = fork();
	if (pid == 0) {
		out_fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		dup2(out_fd, STDOUT_FILENO);
		dup2(pipe_fds[1], STDERR_FILENO);
		close(pipe_fds[0]);
		execl(voidbox_path, voidbox_path, "run", "--file", path, (char *)NULL);
		_exit(127);
	}
	close(pipe_fds[1]);
	/* read until the ready line (or EOF if it exited instead of waiting) */
	while (!strstr(err, "is ready") && used + 1 < sizeof(err) &&
	       (n = read(pipe_fds[0], err + used, sizeof(err) - 1 - used)) > 0) {
		used += (size_t)n;
		err[used] = '\0';
	}
	CHECK(strstr(err, "sandbox \"idle\" is ready (mock)") != NULL);
	/* still running: it waits for the signal */
	CHECK_INT_EQ(waitpid(pid, &status, WNOHANG), 0);
	kill(pid, SIGTERM);
	CHECK_INT_EQ(waitpid(pid, &status, 0), pid);
	close(pipe_fds[0]);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Reads events from fd into buf (appending) until a line holds needle or the pipe ends. */
static bool read_events_until(int fd, char *buf, size_t size, size_t *used, const char *needle)
{
	ssize_t n;

	while (!strstr(buf, needle) && *used + 1 < size &&
	       (n = read(fd, buf + *used, size - 1 - *used)) > 0) {
		*used += (size_t)n;
		buf[*used] = '\0';
	}
	return strstr(buf, needle) != NULL;
}

/*
 * SIGINT or SIGTERM while a step runs cancels the run in order: the step under way is ended,
 * the steps after it do not start, the report of what ran is printed (and sent as
 * run.finished), and the exit status is 128 + the signal's number.
 */
static void check_run_cancelled_by(int signal_number, const char *signal_name)
{
	static char events[TEST_OUTPUT_MAX];
	static char out[TEST_OUTPUT_MAX];
	char path[TEST_PATH_MAX], out_path[TEST_PATH_MAX], expected_error[TEST_PATH_MAX];
	json_t *report, *stages;
	int pipe_fds[2], status = -1, out_fd;
	size_t used = 0;
	pid_t pid;

	events[0] = '\0';
	write_spec("cancel.yaml",
		   "api_version: v1\nkind: workflow\nname: cancel\nsandbox:\n  mode: mock\n"
		   "workflow:\n  steps:\n"
		   "    - name: first\n      run:\n        program: echo\n        args: [one]\n"
		   "    - name: slow\n      depends_on: [first]\n"
		   "      run:\n        program: sleep\n        args: [\"600\"]\n"
		   "    - name: after\n      depends_on: [slow]\n"
		   "      run:\n        program: echo\n        args: [never]\n",
		   path, sizeof(path));
	snprintf(out_path, sizeof(out_path), "%s/stdout", temp_dir);
	CHECK(pipe(pipe_fds) == 0);
	pid = fork();
	if (pid == 0) {
		int null_fd = open("/dev/null", O_WRONLY);

		out_fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		close(pipe_fds[0]); /* before the dup2: it may be descriptor 3 */
		if (out_fd < 0 || null_fd < 0 || dup2(pipe_fds[1], 3) < 0)
			_exit(127);
		dup2(out_fd, STDOUT_FILENO);
		dup2(null_fd, STDERR_FILENO);
		execl(voidbox_path, voidbox_path, "--output", "json", "run", "--file", path,
		      "--events-fd", "3", (char *)NULL);
		_exit(127);
	}
	close(pipe_fds[1]);
	/* the signal comes while `slow` runs: its start is on the events pipe */
	CHECK(read_events_until(pipe_fds[0], events, sizeof(events), &used,
				"\"type\":\"stage.started\",\"stage\":\"slow\""));
	kill(pid, signal_number);
	CHECK(read_events_until(pipe_fds[0], events, sizeof(events), &used, "run.finished"));
	close(pipe_fds[0]);
	CHECK_INT_EQ(waitpid(pid, &status, 0), pid);
	CHECK(WIFEXITED(status));
	CHECK_INT_EQ(WEXITSTATUS(status), 128 + signal_number);
	CHECK(strstr(events, "\"stage\":\"after\"") == NULL);

	out_fd = open(out_path, O_RDONLY);
	read_all(out_fd, out, sizeof(out));
	close(out_fd);
	report = parse_json(out);
	stages = json_object_get(report, "stages");
	CHECK(json_is_false(json_object_get(report, "success")));
	snprintf(expected_error, sizeof(expected_error), "the run was cancelled by %s",
		 signal_name);
	CHECK(strstr(json_string_value(json_object_get(report, "error")) ?: "", expected_error) !=
	      NULL);
	CHECK_INT_EQ(json_array_size(stages), 3);
	CHECK(json_is_true(json_object_get(json_array_get(stages, 0), "success")));
	CHECK_STR_EQ(json_string_value(json_object_get(json_array_get(stages, 0), "output")),
		     "one\n");
	CHECK(json_is_false(json_object_get(json_array_get(stages, 1), "success")));
	CHECK(json_is_false(json_object_get(json_array_get(stages, 2), "ran")));
	json_decref(report);
}

static void test_run_cancelled_by_signal(void)
{
	check_run_cancelled_by(SIGTERM, "SIGTERM");
	check_run_cancelled_by(SIGINT, "SIGINT");
}

static void test_validate(void)
{
	static struct cli_result result;
	char path[TEST_PATH_MAX];
	json_t *json;

	snprintf(path, sizeof(path), "%s/workflow.yaml", examples_dir);
	run_voidbox(&result, (const char *const[]){ "--output", "json", "validate", "--file", path,
						    NULL });
	CHECK_INT_EQ(result.status, 0);
	json = parse_json(result.out);
	if (json) {
		CHECK(json_is_true(json_object_get(json, "valid")));
		CHECK_STR_EQ(json_string_value(json_object_get(json, "file")), path);
		CHECK_STR_EQ(json_string_value(json_object_get(json, "kind")), "workflow");
		CHECK_STR_EQ(json_string_value(json_object_get(json, "api_version")), "v1");
		CHECK_INT_EQ(json_array_size(json_object_get(json, "diagnostics")), 0);
		json_decref(json);
	}

	write_spec("cycle.yaml",
		   "kind: workflow\nname: c\nworkflow:\n  steps:\n"
		   "    - name: a\n      depends_on: [b]\n      run: {program: echo}\n"
		   "    - name: b\n      depends_on: [a]\n      run: {program: echo}\n",
		   path, sizeof(path));
	run_voidbox(&result, (const char *const[]){ "--output", "json", "validate", "--file", path,
						    NULL });
	CHECK_INT_EQ(result.status, 1);
	json = parse_json(result.out);
	if (json) {
		json_t *first = json_array_get(json_object_get(json, "diagnostics"), 0);

		CHECK(json_is_false(json_object_get(json, "valid")));
		CHECK(json_is_null(json_object_get(json, "kind")));
		CHECK_STR_EQ(json_string_value(json_object_get(first, "severity")), "error");
		CHECK(strstr(json_string_value(json_object_get(first, "message")), "cycle") != NULL);
		json_decref(json);
	}
	run_voidbox(&result, (const char *const[]){ "validate", "--file", path, NULL });
	CHECK_INT_EQ(result.status, 1);
	CHECK(strstr(result.out, "invalid (1 error") != NULL);
	CHECK(strstr(result.out, "cycle.yaml:") != NULL);
	run_voidbox(&result, (const char *const[]){ "validate", "--help", NULL });
	CHECK_INT_EQ(result.status, 0);
}

static void test_inspect(void)
{
	static struct cli_result result;
	char path[TEST_PATH_MAX];
	json_t *json, *sandbox;

	write_spec("inspect.yaml",
		   "kind: workflow\nname: look\nsandbox:\n  mode: auto\n  memory_mb: 768\n"
		   "  vcpus: 2\n  env: {A: one, B: two}\nworkflow:\n  steps:\n"
		   "    - name: a\n      run: {program: echo}\n",
		   path, sizeof(path));
	run_voidbox(&result, (const char *const[]){ "--output", "json", "inspect", "--file", path,
						    NULL });
	CHECK_INT_EQ(result.status, 0);
	json = parse_json(result.out);
	if (!json)
		return;
	sandbox = json_object_get(json, "sandbox");
	CHECK_STR_EQ(json_string_value(json_object_get(sandbox, "mode")), "auto");
	/* VOIDBOX_HOME is empty, so auto resolves to the mock and says why */
	CHECK_STR_EQ(json_string_value(json_object_get(sandbox, "effective_mode")), "mock");
	CHECK(json_is_null(json_object_get(sandbox, "kernel")));
	CHECK(strstr(json_string_value(json_object_get(sandbox, "resolution_error")),
		     "voidbox image build") != NULL);
	CHECK_INT_EQ(json_integer_value(json_object_get(sandbox, "memory_mb")), 768);
	CHECK_INT_EQ(json_integer_value(json_object_get(sandbox, "vcpus")), 2);
	CHECK(json_is_false(json_object_get(sandbox, "network")));
	CHECK_INT_EQ(json_integer_value(json_object_get(sandbox, "env")), 2);
	CHECK_INT_EQ(json_integer_value(json_object_get(sandbox, "mounts")), 0);
	CHECK(json_is_object(json_object_get(json, "spec")));
	json_decref(json);

	/* a copy-from-host entry takes the value of the environment voidbox runs in */
	write_spec("inspect-host.yaml",
		   "kind: workflow\nname: look\nsandbox:\n  mode: mock\n"
		   "  env: {A: one, VOIDBOX_TEST_FROM_HOST: \"\"}\nworkflow:\n  steps:\n"
		   "    - name: a\n      run: {program: echo}\n",
		   path, sizeof(path));
	setenv("VOIDBOX_TEST_FROM_HOST", "set", 1);
	run_voidbox(&result, (const char *const[]){ "--output", "json", "inspect", "--file", path,
						    NULL });
	unsetenv("VOIDBOX_TEST_FROM_HOST");
	CHECK_INT_EQ(result.status, 0);
	json = parse_json(result.out);
	if (json) {
		sandbox = json_object_get(json, "sandbox");
		CHECK_INT_EQ(json_integer_value(json_object_get(sandbox, "env")), 2);
		json_decref(json);
	}
	run_voidbox(&result, (const char *const[]){ "--output", "json", "inspect", "--file", path,
						    NULL });
	json = parse_json(result.out);
	if (json) {
		sandbox = json_object_get(json, "sandbox");
		CHECK_INT_EQ(json_integer_value(json_object_get(sandbox, "env")), 1);
		json_decref(json);
	}

	write_spec("inspect.yaml",
		   "kind: workflow\nname: look\nsandbox:\n  mode: auto\n  memory_mb: 768\n"
		   "  vcpus: 2\n  env: {A: one, B: two}\nworkflow:\n  steps:\n"
		   "    - name: a\n      run: {program: echo}\n",
		   path, sizeof(path));
	run_voidbox(&result, (const char *const[]){ "inspect", "--file", path, NULL });
	CHECK_INT_EQ(result.status, 0);
	CHECK(strstr(result.out, "mode:      auto (resolves to mock here)") != NULL);
	CHECK(strstr(result.out, "memory_mb: 768") != NULL);
	run_voidbox(&result, (const char *const[]){ "inspect", "--file", "/nonexistent.yaml",
						    NULL });
	CHECK_INT_EQ(result.status, 1);

	/* an agent resolves its provider's flavour image, and says how to build it */
	write_spec("inspect-codex.yaml",
		   "kind: agent\nname: coder\nllm: {provider: codex}\nagent: {prompt: hi}\n",
		   path, sizeof(path));
	run_voidbox(&result, (const char *const[]){ "--output", "json", "inspect", "--file", path,
						    NULL });
	CHECK_INT_EQ(result.status, 0);
	json = parse_json(result.out);
	sandbox = json_object_get(json, "sandbox");
	CHECK(json_string_value(json_object_get(sandbox, "resolution_error")) &&
	      strstr(json_string_value(json_object_get(sandbox, "resolution_error")),
		     "voidbox image build --flavour codex"));
	json_decref(json);
}

/* One skill of each string form and an inline one, each with where it lands in the guest. */
static const char skills_spec[] =
	"api_version: v1\nkind: agent\nname: skilled\nsandbox:\n  mode: mock\n"
	"llm:\n  provider: claude\nagent:\n  prompt: hi\n  skills:\n"
	"    - \"agent:claude-code\"\n    - \"file:/tmp/review.md\"\n    - \"cli:jq\"\n"
	"    - \"mcp:my-server\"\n    - {name: inline-one, content: \"# inline\"}\n";

struct expected_skill {
	const char *name, *type, *source, *guest;
};

static const struct expected_skill expected_skills[] = {
	{ "claude-code", "agent", "image", "-" },
	{ "review", "file", "/tmp/review.md", "/workspace/.claude/skills/review.md" },
	{ "jq", "cli", "image", "-" },
	{ "my-server", "mcp", "my-server", "/workspace/.mcp.json" },
	{ "inline-one", "inline", "inline", "/workspace/.claude/skills/inline-one.md" },
};

#define EXPECTED_SKILL_COUNT (sizeof(expected_skills) / sizeof(expected_skills[0]))

static void test_skills_human_and_json(void)
{
	static struct cli_result result;
	char path[TEST_PATH_MAX], row[TEST_PATH_MAX];
	json_t *json;

	write_spec("skills.yaml", skills_spec, path, sizeof(path));
	run_voidbox(&result, (const char *const[]){ "skills", "--file", path, NULL });
	CHECK_INT_EQ(result.status, 0);
	CHECK(strncmp(result.out, "OWNER", 5) == 0);
	for (size_t i = 0; i < EXPECTED_SKILL_COUNT; i++) {
		const struct expected_skill *skill = &expected_skills[i];

		snprintf(row, sizeof(row), "%-12s %-20s %-7s %-40s %s\n", "skilled", skill->name,
			 skill->type, skill->source, skill->guest);
		CHECK(strstr(result.out, row) != NULL);
	}

	run_voidbox(&result, (const char *const[]){ "--output", "json", "skills", "--file", path,
						    NULL });
	CHECK_INT_EQ(result.status, 0);
	json = parse_json(result.out);
	CHECK(json_is_array(json));
	CHECK_INT_EQ(json_array_size(json), EXPECTED_SKILL_COUNT);
	for (size_t i = 0; json && i < EXPECTED_SKILL_COUNT && i < json_array_size(json); i++) {
		json_t *item = json_array_get(json, i);

		CHECK_STR_EQ(json_string_value(json_object_get(item, "owner")), "skilled");
		CHECK_STR_EQ(json_string_value(json_object_get(item, "name")),
			     expected_skills[i].name);
		CHECK_STR_EQ(json_string_value(json_object_get(item, "type")),
			     expected_skills[i].type);
		CHECK_STR_EQ(json_string_value(json_object_get(item, "source")),
			     expected_skills[i].source);
		CHECK_STR_EQ(json_string_value(json_object_get(item, "guest")),
			     expected_skills[i].guest);
	}
	json_decref(json);

	/* a pipeline lists each box's skills under the box's name */
	snprintf(path, sizeof(path), "%s/pipeline-fanout.yaml", examples_dir);
	run_voidbox(&result, (const char *const[]){ "--output", "json", "skills", "--file", path,
						    NULL });
	CHECK_INT_EQ(result.status, 0);
	json = parse_json(result.out);
	CHECK(json_array_size(json) > 0);
	CHECK_STR_EQ(json_string_value(json_object_get(json_array_get(json, 0), "owner")),
		     "security");
	json_decref(json);
}

static void test_skills_errors(void)
{
	static struct cli_result result;
	char path[TEST_PATH_MAX];

	run_voidbox(&result, (const char *const[]){ "skills", NULL });
	CHECK_INT_EQ(result.status, 2);
	CHECK(strstr(result.err, "voidbox skills --file SPEC") != NULL);
	CHECK_STR_EQ(result.out, "");

	write_spec("skills.yaml", "kind: nope\n", path, sizeof(path));
	run_voidbox(&result, (const char *const[]){ "skills", "--file", path, NULL });
	CHECK_INT_EQ(result.status, 1);
	CHECK(strstr(result.err, "is not a valid spec") != NULL);
	CHECK_STR_EQ(result.out, "");

	check_help("skills", "usage: voidbox skills --file SPEC");
}

static void test_version_human_and_json(void)
{
	static struct cli_result result;
	char expected[TEST_PATH_MAX];
	json_t *json;

	run_voidbox(&result, (const char *const[]){ "version", NULL });
	CHECK_INT_EQ(result.status, 0);
	snprintf(expected, sizeof(expected), "voidbox %s (protocol v%u)\n", TEST_EXPECTED_VERSION,
		 PROTO_VERSION);
	CHECK_STR_EQ(result.out, expected);
	CHECK_STR_EQ(result.err, "");

	run_voidbox(&result, (const char *const[]){ "--output", "json", "version", NULL });
	CHECK_INT_EQ(result.status, 0);
	json = parse_json(result.out);
	CHECK_STR_EQ(json_string_value(json_object_get(json, "version")), TEST_EXPECTED_VERSION);
	CHECK_INT_EQ(json_integer_value(json_object_get(json, "protocol_version")), PROTO_VERSION);
	json_decref(json);

	check_help("version", "usage: voidbox version");
}

/*
 * A report that cannot be written (stdout on a full file system) fails the run with what to
 * do, in both formats, instead of a success with an empty or cut-short file.
 */
static void test_run_report_onto_full_disk(void)
{
	static const char *const formats[] = { "human", "json" };
	static struct cli_result result;
	char path[TEST_PATH_MAX];

	if (access(TEST_FULL_DEVICE, W_OK) < 0) {
		fprintf(stderr, "  not run: no %s (%s)\n", TEST_FULL_DEVICE, strerror(errno));
		return;
	}
	snprintf(path, sizeof(path), "%s/workflow.yaml", examples_dir);
	for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++) {
		run_voidbox_to(&result, TEST_FULL_DEVICE,
			       (const char *const[]){ "--output", formats[i], "run", "--file",
						      path, "--sandbox-mode", "mock", NULL });
		CHECK_INT_EQ(result.status, 1);
		CHECK(strstr(result.err, "cannot write the output: No space left on device") !=
		      NULL);
		CHECK(strstr(result.err, "redirect it to a file system with room") != NULL);
	}
	/* a command that failed anyway keeps its own status */
	run_voidbox_to(&result, TEST_FULL_DEVICE,
		       (const char *const[]){ "validate", "/nonexistent/spec.yaml", NULL });
	CHECK(result.status != 0);
}

/* --disk is checked before anything boots: its form, the disk limit, and --snapshot. */
static void test_disk_flag_usage(void)
{
	static const char *const with_snapshot[] = { "exec", "--disk", "x.img", "--snapshot",
						     "abc", "--", "true", NULL };
	static const char *const empty[] = { "exec", "--disk", ":ro", "--", "true", NULL };
	static const char *const shell_snapshot[] = { "shell", "--snapshot", "abc", "--disk",
						      "x.img:ro", NULL };
	const char *too_many[2 * 9 + 4] = { "exec" };
	struct cli_result result;
	size_t used = 1;

	run_voidbox(&result, with_snapshot);
	CHECK_INT_EQ(result.status, 2);
	CHECK(strstr(result.err, "--disk does not combine with --snapshot") != NULL);
	run_voidbox(&result, shell_snapshot);
	CHECK_INT_EQ(result.status, 2);
	CHECK(strstr(result.err, "--snapshot") != NULL);
	run_voidbox(&result, empty);
	CHECK_INT_EQ(result.status, 2);
	CHECK(strstr(result.err, "--disk takes PATH") != NULL);
	for (int i = 0; i < 9; i++) {
		too_many[used++] = "--disk";
		too_many[used++] = "x.img";
	}
	too_many[used++] = "--";
	too_many[used++] = "true";
	too_many[used] = NULL;
	run_voidbox(&result, too_many);
	CHECK_INT_EQ(result.status, 2);
	CHECK(strstr(result.err, "at most 8 --disk") != NULL);
}

int main(int argc, char **argv)
{
	char path[TEST_PATH_MAX];
	int status;

	if (argc < 3)
		harness_fail_setup("usage: test_workflow_cli VOIDBOX EXAMPLES_DIR");
	voidbox_path = argv[1];
	examples_dir = argv[2];
	if (!mkdtemp(temp_dir))
		harness_fail_setup("cannot create a temporary directory");
	snprintf(path, sizeof(path), "%s/home", temp_dir);
	mkdir(path, 0700);
	setenv("VOIDBOX_HOME", path, 1);
	unsetenv("VOID_BOX_KERNEL");
	unsetenv("VOID_BOX_INITRAMFS");
	unsetenv("VOIDBOX_LOG_LEVEL");
	RUN_TEST(test_run_example_human_and_json);
	RUN_TEST(test_run_stage_events);
	RUN_TEST(test_run_guest_bytes);
	RUN_TEST(test_run_agent_and_pipeline_examples);
	RUN_TEST(test_run_failure_and_input);
	RUN_TEST(test_run_refuses_unsupported);
	RUN_TEST(test_run_accepts_mounts);
	RUN_TEST(test_run_sandbox_kind_waits_for_signal);
	RUN_TEST(test_run_cancelled_by_signal);
	RUN_TEST(test_validate);
	RUN_TEST(test_inspect);
	RUN_TEST(test_skills_human_and_json);
	RUN_TEST(test_skills_errors);
	RUN_TEST(test_version_human_and_json);
	RUN_TEST(test_disk_flag_usage);
	RUN_TEST(test_run_report_onto_full_disk);
	status = harness_finish();
	for (size_t i = 0; i < sizeof(temp_files) / sizeof(temp_files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", temp_dir, temp_files[i]);
		unlink(path);
	}
	snprintf(path, sizeof(path), "%s/home", temp_dir);
	rmdir(path);
	rmdir(temp_dir);
	return status;
}
