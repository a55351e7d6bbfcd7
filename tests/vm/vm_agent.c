/*
 * Agents in real VMs: a pipeline whose first stage fans out to three boxes and whose second
 * stage merges them (four VMs, three at once), run through `voidbox run` with the mock
 * claude-code, must produce the report the mock's knobs predict (tokens, cost, turns, tool
 * calls, result text carried between stages); and `voidbox shell`, driven through a pty like
 * a user at a terminal, must run a command and exit with the guest's exit code, and a
 * SIGTERM to a second session must give the terminal back as it was and exit 143.
 *
 * The test image is the built default image plus the mock agent (vm_test_initramfs_with). Boots are
 * the cost here (six in all), so every check shares them.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/host_env.h"
#include "harness.h"
#include "vm_test.h"

#define TEST_RUN_OUTPUT_MAX (1u << 20)
#define TEST_RUN_TIMEOUT_SECS 900
#define TEST_SHELL_TIMEOUT_SECS 300
#define TEST_SHELL_EXIT 3
#define TEST_BOXES 4
#define TEST_INPUT_TOKENS 1000
#define TEST_OUTPUT_TOKENS 200
#define TEST_COST 0.5
#define TEST_MULTI_TOOL_TOOLS 5
#define TEST_MULTI_TOOL_TURNS 3
#define TEST_MS_PER_SEC 1000

static const char *voidbox_cli;
static const char *mock_agent;
static struct guest_image_paths image;
static char test_initramfs[] = "/tmp/voidbox-agent-initramfs-XXXXXX";

static const char pipeline_spec[] =
	"api_version: v1\n"
	"kind: pipeline\n"
	"name: vm-fanout\n"
	"sandbox:\n"
	"  mode: local\n"
	"  memory_mb: 256\n"
	"  vcpus: 1\n"
	"  env:\n"
	"    MOCK_CLAUDE_SCENARIO: multi_tool\n"
	"    MOCK_CLAUDE_INPUT_TOKENS: \"1000\"\n"
	"    MOCK_CLAUDE_OUTPUT_TOKENS: \"200\"\n"
	"    MOCK_CLAUDE_COST: \"0.5\"\n"
	"pipeline:\n"
	"  boxes:\n"
	"    - {name: alpha, prompt: Review alpha, skills: [\"agent:claude-code\"]}\n"
	"    - {name: beta, prompt: Review beta, skills: [\"agent:claude-code\"]}\n"
	"    - {name: gamma, prompt: Review gamma, skills: [\"agent:claude-code\"]}\n"
	"    - name: writer\n"
	"      prompt: Merge the reviews\n"
	"      skills: [\"agent:claude-code\", {name: tone, content: Be brief.}]\n"
	"  stages:\n"
	"    - {type: fan_out, boxes: [alpha, beta, gamma]}\n"
	"    - {type: box, name: writer}\n";

static json_t *run_pipeline(int *status)
{
	char spec_path[] = "/tmp/voidbox-agent-spec-XXXXXX.yaml";
	char out_path[] = "/tmp/voidbox-agent-out-XXXXXX";
	char *argv[] = { "voidbox", "--output", "json", "run", "--file", spec_path, NULL };
	int spec_fd = mkstemps(spec_path, 5), out_fd = mkstemp(out_path);
	json_t *report;
	pid_t pid;

	if (spec_fd < 0 || out_fd < 0 ||
	    write(spec_fd, pipeline_spec, strlen(pipeline_spec)) != (ssize_t)strlen(pipeline_spec))
		return NULL;
	close(spec_fd);
	pid = fork();
	if (pid == 0) {
		dup2(out_fd, STDOUT_FILENO);
		setenv(GUEST_IMAGE_ENV_INITRAMFS, test_initramfs, 1);
		setenv(GUEST_IMAGE_ENV_KERNEL, image.kernel, 1);
		setenv("VOIDBOX_MAX_PARALLEL_VMS", "3", 1);
		execv(voidbox_cli, argv);
		_exit(127);
	}
	*status = vm_test_wait_bounded(pid, TEST_RUN_TIMEOUT_SECS);
	report = json_load_file(out_path, 0, NULL);
	if (!report) {
		char command[128];

		snprintf(command, sizeof(command), "cat %s >&2", out_path);
		if (system(command) != 0)
			fprintf(stderr, "(no report output)\n");
	}
	close(out_fd);
	unlink(out_path);
	unlink(spec_path);
	return report;
}

static void test_pipeline_fan_out_report(void)
{
	int status = -1;
	json_t *report = run_pipeline(&status);
	json_t *stages = json_object_get(report, "stages");
	const char *output = json_string_value(json_object_get(report, "output"));
	json_t *stage;
	size_t i;

	CHECK(report != NULL);
	CHECK(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK(json_is_true(json_object_get(report, "success")));
	if (!json_is_true(json_object_get(report, "success")))
		fprintf(stderr, "  error: %s\n",
			json_string_value(json_object_get(report, "error")));
	CHECK_INT_EQ((long)json_array_size(stages), TEST_BOXES);
	CHECK_INT_EQ((long)json_integer_value(json_object_get(report, "input_tokens")),
		     TEST_BOXES * TEST_INPUT_TOKENS);
	CHECK_INT_EQ((long)json_integer_value(json_object_get(report, "output_tokens")),
		     TEST_BOXES * TEST_OUTPUT_TOKENS);
	CHECK(json_real_value(json_object_get(report, "total_cost_usd")) > TEST_BOXES * TEST_COST -
									      0.0001);
	CHECK(json_real_value(json_object_get(report, "total_cost_usd")) < TEST_BOXES * TEST_COST +
									      0.0001);
	json_array_foreach(stages, i, stage) {
		CHECK(json_is_true(json_object_get(stage, "success")));
		CHECK_INT_EQ((long)json_integer_value(json_object_get(stage, "turns")),
			     TEST_MULTI_TOOL_TURNS);
		CHECK_INT_EQ((long)json_integer_value(json_object_get(stage, "tool_calls")),
			     TEST_MULTI_TOOL_TOOLS);
	}
	CHECK_STR_EQ(json_string_value(json_object_get(json_array_get(stages, 1), "output")),
		     "mock: completed 'Review beta'; skills: none; mcp: none");
	/* the writer found its inline skill, and its output (the report's) names its prompt */
	CHECK_STR_EQ(json_string_value(json_object_get(json_array_get(stages, 3), "output")),
		     "mock: completed 'Merge the reviews'; skills: tone; mcp: none");
	CHECK(output && strstr(output, "mock: completed 'Merge the reviews'"));
	json_decref(report);
}

/* Reads what the pty has until needle shows up or timeout; returns true when it did. */
static bool pty_expect(int fd, char *seen, size_t cap, size_t *len, const char *needle,
		       long timeout_secs)
{
	long deadline = vm_test_now_secs() + timeout_secs;
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	while (vm_test_now_secs() < deadline) {
		ssize_t got;

		seen[*len] = '\0';
		if (strstr(seen, needle))
			return true;
		if (poll(&pfd, 1, TEST_MS_PER_SEC) <= 0)
			continue;
		got = read(fd, seen + *len, cap - 1 - *len);
		if (got <= 0)
			return false;
		*len += (size_t)got;
	}
	return false;
}

/*
 * Starts `voidbox shell` on a new pty (30x100) and waits for the guest shell's prompt, which it
 * prints once the session is up; *master is the terminal's other end. The pid, or -1.
 */
static pid_t start_shell_session(int *master, char *seen, size_t cap, size_t *len)
{
	struct winsize size = { .ws_row = 30, .ws_col = 100 };
	char *argv[] = { "voidbox", "shell", "--program", "sh", "--kernel", image.kernel,
			 "--initramfs", test_initramfs, NULL };
	pid_t pid = forkpty(master, NULL, NULL, &size);

	CHECK(pid >= 0);
	if (pid < 0)
		return -1;
	if (pid == 0) {
		execv(voidbox_cli, argv);
		_exit(127);
	}
	if (!pty_expect(*master, seen, cap, len, "$ ", TEST_SHELL_TIMEOUT_SECS) &&
	    !pty_expect(*master, seen, cap, len, "# ", 1))
		fprintf(stderr, "  no prompt seen; the terminal showed: %s\n", seen);
	return pid;
}

static void test_shell_exit_code(void)
{
	static char seen[TEST_RUN_OUTPUT_MAX];
	size_t len = 0;
	int master, status;
	pid_t pid = start_shell_session(&master, seen, sizeof(seen), &len);

	if (pid < 0)
		return;
	/* type like a user */
	CHECK(write(master, "echo size=$(stty size)\r", 23) == 23);
	CHECK(pty_expect(master, seen, sizeof(seen), &len, "size=30 100", 60));
	CHECK(write(master, "exit 3\r", 7) == 7);
	pty_expect(master, seen, sizeof(seen), &len, "\x01never", 5);
	status = vm_test_wait_bounded(pid, 60);
	CHECK(status >= 0 && WIFEXITED(status));
	CHECK_INT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, TEST_SHELL_EXIT);
	/* nothing but the session reaches the terminal: no logger lines ("<level> <module>: ") */
	CHECK(strstr(seen, "info ") == NULL && strstr(seen, "warn ") == NULL &&
	      strstr(seen, "error ") == NULL);
	close(master);
}

/*
 * SIGTERM during an interactive session ends it in order: the terminal, in raw mode while the
 * session runs, is given back as it was, the cancel is said, and voidbox exits 143.
 */
static void test_shell_sigterm_restores_terminal(void)
{
	static char seen[TEST_RUN_OUTPUT_MAX];
	struct termios during, after;
	size_t len = 0;
	int master, status;
	pid_t pid = start_shell_session(&master, seen, sizeof(seen), &len);

	if (pid < 0)
		return;
	CHECK_INT_EQ(tcgetattr(master, &during), 0);
	CHECK((during.c_lflag & ICANON) == 0); /* raw while the session runs */
	kill(pid, SIGTERM);
	pty_expect(master, seen, sizeof(seen), &len, "cancelled by SIGTERM", 60);
	status = vm_test_wait_bounded(pid, 60);
	CHECK(status >= 0 && WIFEXITED(status));
	CHECK_INT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 128 + SIGTERM);
	CHECK(strstr(seen, "voidbox shell: cancelled by SIGTERM") != NULL);
	CHECK_INT_EQ(tcgetattr(master, &after), 0);
	CHECK((after.c_lflag & (ICANON | ECHO)) == (ICANON | ECHO)); /* given back */
	if (harness_checks_failed_in_test)
		fprintf(stderr, "  the terminal showed: %s\n", seen);
	close(master);
}

int main(int argc, char **argv)
{
	char why[512], err[1024];
	int rc;

	host_env_apply();
	if (argc < 3) {
		fprintf(stderr, "usage: %s PATH-TO-voidbox PATH-TO-voidbox-mock-claude\n", argv[0]);
		return 2;
	}
	voidbox_cli = argv[1];
	mock_agent = argv[2];
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!kvm_probe_usable(why, sizeof(why)))
		harness_skip_vm(why);
	if (guest_image_resolve(NULL, NULL, &image, err, sizeof(err)) < 0)
		harness_skip_vm(err);
	rc = vm_test_initramfs_with(image.initramfs,
				    &(struct vm_test_bin){ "claude-code", mock_agent }, 1,
				    test_initramfs);
	if (rc < 0) {
		fprintf(stderr, "FAIL: cannot build the test initramfs: %s\n", strerror(-rc));
		return 1;
	}
	RUN_TEST(test_pipeline_fan_out_report);
	RUN_TEST(test_shell_exit_code);
	RUN_TEST(test_shell_sigterm_restores_terminal);
	unlink(test_initramfs);
	return harness_finish();
}
