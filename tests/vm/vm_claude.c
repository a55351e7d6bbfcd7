/*
 * The first real agent run: the real claude-code, from the `claude` flavour image
 * (`voidbox image build --flavour claude`), runs in a VM through `voidbox run` on an agent
 * spec with `provider: claude`, and talks to a scripted stand-in for the Anthropic Messages API
 * (tests/vm/anthropic_standin.py, argv[2]) on the host's 127.0.0.1, which the guest reaches as
 * 10.0.2.2. The stand-in streams one `tool_use` of claude-code's Write tool (a file in a
 * read-write mount) and then a final text answer with fixed usage figures.
 *
 * Checked: the run succeeds on the flavour image chosen by the provider alone (no kernel or
 * initramfs is named anywhere); the file the tool wrote is on the host, through the mount,
 * with the scripted content; the report carries the final answer, the tokens and a cost; the
 * stand-in saw the tool_result come back and the spec's key. Nothing else can leave the
 * machine: CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1, and the egress allow list holds only
 * 127.0.0.1/32, where the stand-in is the only server this program starts.
 *
 * One boot. The image holds ~400 MB in guest RAM, so the spec asks for 2048 MiB. L1 of the
 * nested harness starts with its loopback down; this program brings it up with `ip`.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "harness.h"
#include "store/guest_image.h"
#include "vmm/kvm.h"

#define TEST_FLAVOUR "claude"
#define TEST_REASON_MAX 1024
#define TEST_PATH_MAX 512
#define TEST_SPEC_MAX 4096
#define TEST_TEXT_MAX 4096
#define TEST_MEMORY_MB 2048
#define TEST_AGENT_TIMEOUT_SECS 600
#define TEST_RUN_TIMEOUT_SECS 1500
#define TEST_PORT_WAIT_STEPS 1200
#define TEST_PORT_WAIT_US (100 * 1000)
#define TEST_POLL_US (100 * 1000)
#define TEST_GUEST_MOUNT "/workspace/shared"
#define TEST_FILE_NAME "greeting.txt"
#define TEST_FILE_CONTENT "hello from the real claude-code in a voidbox VM\n"
#define TEST_ANSWER "I wrote greeting.txt in the shared directory."
/* the stand-in's fixed usage: tool_use turn + final turn (tests/vm/anthropic_standin.py) */
#define TEST_MIN_INPUT_TOKENS (1200 + 1500)
#define TEST_MIN_OUTPUT_TOKENS (80 + 40)
#define TEST_API_KEY "test-key"

static const char *voidbox_cli;
static const char *standin_script;
static char scratch[] = "/tmp/voidbox-claude-XXXXXX";
static pid_t standin_pid = -1;
static unsigned int standin_port;

static const char spec_template[] =
	"api_version: v1\n"
	"kind: agent\n"
	"name: real-claude\n"
	"sandbox:\n"
	"  mode: local\n"
	"  memory_mb: %d\n"
	"  vcpus: 1\n"
	"  network: true\n"
	"  network_allow: [127.0.0.1/32]\n"
	"  mounts:\n"
	"    - host: %s/shared\n"
	"      guest: " TEST_GUEST_MOUNT "\n"
	"      mode: rw\n"
	"  env:\n"
	"    ANTHROPIC_BASE_URL: http://10.0.2.2:%u\n"
	"    ANTHROPIC_API_KEY: " TEST_API_KEY "\n"
	"    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: \"1\"\n"
	"llm:\n"
	"  provider: claude\n"
	"agent:\n"
	"  prompt: Write the greeting file into " TEST_GUEST_MOUNT ", then say what you did.\n"
	"  timeout_secs: %d\n";

static long now_secs(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (long)now.tv_sec;
}

/* Waits for pid up to timeout_secs, killing it after; returns its wait status or -1. */
static int wait_bounded(pid_t pid, long timeout_secs)
{
	long deadline = now_secs() + timeout_secs;
	int status;

	while (now_secs() < deadline) {
		pid_t done = waitpid(pid, &status, WNOHANG);

		if (done == pid)
			return status;
		usleep(TEST_POLL_US);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return -1;
}

static char *read_text(const char *path)
{
	FILE *in = fopen(path, "r");
	char *text = calloc(1, TEST_TEXT_MAX);

	if (in && text)
		fread(text, 1, TEST_TEXT_MAX - 1, in);
	if (in)
		fclose(in);
	return text;
}

static void loopback_up(void)
{
	if (system("ip link set lo up 2>/dev/null || busybox ip link set lo up") != 0)
		fprintf(stderr, "  could not bring the loopback up (it may be up already)\n");
}

/* Starts the stand-in and waits for its port file; 0 or -1. */
static int standin_start(void)
{
	char port_file[TEST_PATH_MAX], write_path[TEST_PATH_MAX], log_path[TEST_PATH_MAX];
	char err_path[TEST_PATH_MAX];
	char *port_text;

	snprintf(port_file, sizeof(port_file), "%s/port", scratch);
	snprintf(write_path, sizeof(write_path), "%s/%s", TEST_GUEST_MOUNT, TEST_FILE_NAME);
	snprintf(log_path, sizeof(log_path), "%s/requests.jsonl", scratch);
	snprintf(err_path, sizeof(err_path), "%s/standin.err", scratch);
	standin_pid = fork();
	if (standin_pid == 0) {
		int err_fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		if (err_fd >= 0)
			dup2(err_fd, STDERR_FILENO);
		execlp("python3", "python3", standin_script, "--port-file", port_file,
		       "--write-path", write_path, "--content", TEST_FILE_CONTENT, "--answer",
		       TEST_ANSWER, "--log", log_path, (char *)NULL);
		_exit(127);
	}
	if (standin_pid < 0)
		return -1;
	/* python3 starts slowly in the emulated L1: wait while it lives */
	for (int i = 0; i < TEST_PORT_WAIT_STEPS && access(port_file, R_OK) < 0; i++) {
		int status;

		if (waitpid(standin_pid, &status, WNOHANG) == standin_pid) {
			standin_pid = -1;
			return -1;
		}
		usleep(TEST_PORT_WAIT_US);
	}
	port_text = read_text(port_file);
	standin_port = port_text ? (unsigned int)strtoul(port_text, NULL, 10) : 0;
	free(port_text);
	return standin_port ? 0 : -1;
}

static void standin_stop(void)
{
	int status;

	if (standin_pid <= 0)
		return;
	kill(standin_pid, SIGTERM);
	waitpid(standin_pid, &status, 0);
	standin_pid = -1;
}

/* `voidbox --output json run --file SPEC`; returns the report (NULL on no JSON). */
static json_t *run_agent(int *status, long *wall_secs)
{
	char spec_path[TEST_PATH_MAX], out_path[TEST_PATH_MAX], spec[TEST_SPEC_MAX];
	char *argv[] = { "voidbox", "--output", "json", "run", "--file", spec_path, NULL };
	int out_fd;
	long start;
	json_t *report;
	FILE *file;
	pid_t pid;

	snprintf(spec_path, sizeof(spec_path), "%s/agent.yaml", scratch);
	snprintf(out_path, sizeof(out_path), "%s/report.json", scratch);
	snprintf(spec, sizeof(spec), spec_template, TEST_MEMORY_MB, scratch, standin_port,
		 TEST_AGENT_TIMEOUT_SECS);
	file = fopen(spec_path, "w");
	if (!file || fputs(spec, file) == EOF || fclose(file) != 0)
		return NULL;
	out_fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (out_fd < 0)
		return NULL;
	start = now_secs();
	pid = fork();
	if (pid == 0) {
		dup2(out_fd, STDOUT_FILENO);
		/* the provider's image, chosen by the provider alone, and only the spec's key */
		unsetenv(GUEST_IMAGE_ENV_KERNEL);
		unsetenv(GUEST_IMAGE_ENV_INITRAMFS);
		unsetenv("ANTHROPIC_API_KEY");
		execv(voidbox_cli, argv);
		_exit(127);
	}
	close(out_fd);
	*status = pid > 0 ? wait_bounded(pid, TEST_RUN_TIMEOUT_SECS) : -1;
	*wall_secs = now_secs() - start;
	report = json_load_file(out_path, 0, NULL);
	if (!report) {
		char *text = read_text(out_path);

		fprintf(stderr, "  voidbox run printed no JSON report: %s\n", text ? text : "");
		free(text);
	}
	return report;
}

static void show_standin_errors(void)
{
	char path[TEST_PATH_MAX];
	char *text;

	snprintf(path, sizeof(path), "%s/standin.err", scratch);
	text = read_text(path);
	fprintf(stderr, "  the stand-in's stderr:\n%s\n", text ? text : "(none)");
	free(text);
}

static void show_requests(void)
{
	char path[TEST_PATH_MAX];
	char *text;

	snprintf(path, sizeof(path), "%s/requests.jsonl", scratch);
	text = read_text(path);
	fprintf(stderr, "  requests the stand-in answered:\n%s\n", text ? text : "(none)");
	free(text);
}

static void test_real_claude_code_run(void)
{
	char path[TEST_PATH_MAX];
	int status = -1;
	long wall_secs = 0;
	json_t *report, *stage;
	const char *output;
	char *written, *requests;

	snprintf(path, sizeof(path), "%s/shared", scratch);
	CHECK_INT_EQ(mkdir(path, 0755), 0);
	report = run_agent(&status, &wall_secs);
	printf("  voidbox run on the claude image: %ld s wall\n", wall_secs);
	CHECK(report != NULL);
	CHECK(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK(json_is_true(json_object_get(report, "success")));
	if (!json_is_true(json_object_get(report, "success"))) {
		fprintf(stderr, "  error: %s\n",
			json_string_value(json_object_get(report, "error")));
		show_requests();
		show_standin_errors();
	}
	CHECK_STR_EQ(json_string_value(json_object_get(report, "sandbox_mode")), "local");

	/* the tool's file, on the host through the mount */
	snprintf(path, sizeof(path), "%s/shared/%s", scratch, TEST_FILE_NAME);
	written = read_text(path);
	CHECK_STR_EQ(written ? written : "(missing)", TEST_FILE_CONTENT);
	free(written);

	/* the final answer, the tokens and the cost claude-code reported */
	stage = json_array_get(json_object_get(report, "stages"), 0);
	output = json_string_value(json_object_get(stage, "output"));
	CHECK(output && strstr(output, TEST_ANSWER));
	CHECK(json_integer_value(json_object_get(stage, "input_tokens")) >= TEST_MIN_INPUT_TOKENS);
	CHECK(json_integer_value(json_object_get(stage, "output_tokens")) >=
	      TEST_MIN_OUTPUT_TOKENS);
	CHECK(json_real_value(json_object_get(stage, "cost_usd")) > 0.0);
	CHECK(json_real_value(json_object_get(report, "total_cost_usd")) > 0.0);
	CHECK(json_integer_value(json_object_get(stage, "tool_calls")) >= 1);
	printf("  answer '%s', %lld in / %lld out tokens, $%.4f\n", output ? output : "",
	       (long long)json_integer_value(json_object_get(stage, "input_tokens")),
	       (long long)json_integer_value(json_object_get(stage, "output_tokens")),
	       json_real_value(json_object_get(stage, "cost_usd")));

	/* the loop went through the stand-in: the tool result came back, with the spec's key */
	snprintf(path, sizeof(path), "%s/requests.jsonl", scratch);
	requests = read_text(path);
	CHECK(requests && strstr(requests, "\"branch\": \"tool_use\""));
	CHECK(requests && strstr(requests, "\"branch\": \"final\""));
	CHECK(requests && strstr(requests, "\"api_key\": \"" TEST_API_KEY "\""));
	free(requests);
	json_decref(report);
}

int main(int argc, char **argv)
{
	struct guest_image_paths image;
	char why[TEST_REASON_MAX], cleanup[TEST_PATH_MAX];

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 3) {
		fprintf(stderr, "usage: vm_claude <voidbox> <anthropic_standin.py>\n");
		return 2;
	}
	voidbox_cli = argv[1];
	standin_script = argv[2];
	if (!kvm_probe_usable(why, sizeof(why)))
		harness_skip_vm(why);
	unsetenv(GUEST_IMAGE_ENV_KERNEL);
	unsetenv(GUEST_IMAGE_ENV_INITRAMFS);
	if (guest_image_resolve_named(TEST_FLAVOUR, NULL, NULL, &image, why, sizeof(why)) < 0)
		harness_skip_vm(why);
	if (!mkdtemp(scratch))
		harness_fail_setup("cannot create a scratch directory (mkdtemp)");
	loopback_up();
	if (standin_start() < 0) {
		show_standin_errors();
		standin_stop();
		harness_fail_setup("the Messages API stand-in did not start (python3 missing?)");
	}
	RUN_TEST(test_real_claude_code_run);
	standin_stop();
	snprintf(cleanup, sizeof(cleanup), "rm -rf %s", scratch);
	if (system(cleanup) != 0)
		fprintf(stderr, "could not remove %s\n", scratch);
	return harness_finish();
}
