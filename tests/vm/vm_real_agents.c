/*
 * The first real agent runs: the real agent CLIs, from their flavour images (`voidbox image
 * build --flavour claude`, `--flavour codex`), run in VMs through `voidbox run` on agent specs
 * that name only their provider, and talk to a scripted stand-in for their vendor's API
 * (tests/vm/llm_standin.py, argv[2]: the Anthropic Messages API for claude-code, the OpenAI
 * Responses API for codex) on the host's 127.0.0.1, which the guest reaches as 10.0.2.2. The
 * stand-in streams one call of the CLI's file-writing tool (claude-code's Write, codex's
 * exec_command) aimed at a read-write mount, then a final text answer with fixed usage.
 *
 * Checked for each: the run succeeds on the flavour image chosen by the provider alone (no
 * kernel or initramfs is named anywhere); the file the tool wrote is on the host, through the
 * mount, with the scripted content; the report carries the final answer and the tokens (and,
 * for claude-code, which prices its usage itself, a cost); the stand-in saw the tool result come
 * back and the spec's key. Nothing else can leave the machine: the egress allow list holds only
 * 127.0.0.1/32, where the stand-in is the only server this program starts, and claude-code
 * runs with CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1.
 *
 * One boot per agent. The images hold 200-400 MB in guest RAM, so the specs ask for 2048 MiB.
 * L1 of the nested harness starts with its loopback down; this program brings it up with `ip`.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/host_env.h"
#include "harness.h"
#include "store/store_settings.h"
#include "vm_test.h"
#include "store/guest_image.h"
#include "vmm/kvm.h"

#define TEST_REASON_MAX 1024
#define TEST_PATH_MAX 512
#define TEST_PART_MAX 512
#define TEST_SPEC_MAX 4096
#define TEST_TEXT_MAX 8192
#define TEST_MEMORY_MB 2048
#define TEST_AGENT_TIMEOUT_SECS 600
#define TEST_RUN_TIMEOUT_SECS 1500
#define TEST_PORT_WAIT_STEPS 1200
#define TEST_PORT_WAIT_US (100 * 1000)
#define TEST_GUEST_MOUNT "/workspace/shared"
#define TEST_FILE_NAME "greeting.txt"
#define TEST_ANSWER "I wrote greeting.txt in the shared directory."
/* the stand-in's fixed usage: tool turn + final turn (tests/vm/llm_standin.py) */
#define TEST_MIN_INPUT_TOKENS (1200 + 1500)
#define TEST_MIN_OUTPUT_TOKENS (80 + 40)
#define TEST_API_KEY "test-key"

/* One real agent: its image, the stand-in's API, and the spec parts that differ. */
struct agent_case {
	const char *flavour;
	const char *api;	  /* llm_standin.py --api */
	const char *llm_yaml;	  /* the llm section; %u is the stand-in's port */
	const char *env_yaml;	  /* sandbox.env entries; %u is the stand-in's port */
	const char *content;	  /* what the tool writes */
	const char *key_seen;	  /* the key as the stand-in logs it */
	bool reports_cost;	  /* the CLI prices its own usage */
};

static const struct agent_case agent_cases[] = {
	{
		.flavour = "claude",
		.api = "anthropic",
		.llm_yaml = "  provider: claude\n",
		.env_yaml = "    ANTHROPIC_BASE_URL: http://10.0.2.2:%u\n"
			    "    ANTHROPIC_API_KEY: " TEST_API_KEY "\n"
			    "    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: \"1\"\n",
		.content = "hello from the real claude-code in a voidbox VM\n",
		.key_seen = TEST_API_KEY,
		.reports_cost = true,
	},
	{
		.flavour = "codex",
		.api = "openai",
		/* a model other than codex's default, which offers only its code-mode tool */
		.llm_yaml = "  provider: codex\n"
			    "  model: gpt-5-codex\n"
			    "  base_url: http://10.0.2.2:%u/v1\n",
		.env_yaml = "    OPENAI_API_KEY: " TEST_API_KEY "\n",
		.content = "hello from the real codex in a voidbox VM\n",
		.key_seen = "Bearer " TEST_API_KEY,
		.reports_cost = false,
	},
};

#define AGENT_CASE_COUNT (sizeof(agent_cases) / sizeof(agent_cases[0]))

static const char *voidbox_cli;
static const char *standin_script;
static char scratch[] = "/tmp/voidbox-agents-XXXXXX";
static pid_t standin_pid = -1;
static unsigned int standin_port;

static const char spec_template[] =
	"api_version: v1\n"
	"kind: agent\n"
	"name: real-%s\n"
	"sandbox:\n"
	"  mode: local\n"
	"  memory_mb: %d\n"
	"  vcpus: 1\n"
	"  network: true\n"
	"  network_allow: [127.0.0.1/32]\n"
	"  mounts:\n"
	"    - host: %s/%s\n"
	"      guest: " TEST_GUEST_MOUNT "\n"
	"      mode: rw\n"
	"  env:\n"
	"%s"
	"llm:\n"
	"%s"
	"agent:\n"
	"  prompt: Write the greeting file into " TEST_GUEST_MOUNT ", then say what you did.\n"
	"  timeout_secs: %d\n";

static char *read_text(const char *path)
{
	FILE *in = fopen(path, "r");
	char *text = calloc(1, TEST_TEXT_MAX);

	if (in && text && fread(text, 1, TEST_TEXT_MAX - 1, in) == 0 && ferror(in))
		text[0] = '\0';
	if (in)
		fclose(in);
	return text;
}

static void show_file(const char *what, const char *flavour, const char *name)
{
	char path[TEST_PATH_MAX];
	char *text;

	snprintf(path, sizeof(path), "%s/%s-%s", scratch, flavour, name);
	text = read_text(path);
	fprintf(stderr, "  %s:\n%s\n", what, text && *text ? text : "(none)");
	free(text);
}

static void loopback_up(void)
{
	if (system("ip link set lo up 2>/dev/null || busybox ip link set lo up") != 0)
		fprintf(stderr, "  could not bring the loopback up (it may be up already)\n");
}

/* Starts the stand-in for one case and waits for its port file; 0 or -1. */
static int standin_start(const struct agent_case *agent)
{
	char port_file[TEST_PATH_MAX], write_path[TEST_PATH_MAX], log_path[TEST_PATH_MAX];
	char err_path[TEST_PATH_MAX];
	char *port_text;

	snprintf(port_file, sizeof(port_file), "%s/%s-port", scratch, agent->flavour);
	snprintf(write_path, sizeof(write_path), "%s/%s", TEST_GUEST_MOUNT, TEST_FILE_NAME);
	snprintf(log_path, sizeof(log_path), "%s/%s-requests.jsonl", scratch, agent->flavour);
	snprintf(err_path, sizeof(err_path), "%s/%s-standin.err", scratch, agent->flavour);
	standin_pid = fork();
	if (standin_pid == 0) {
		int err_fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		if (err_fd >= 0)
			dup2(err_fd, STDERR_FILENO);
		execlp("python3", "python3", standin_script, "--api", agent->api, "--port-file",
		       port_file, "--write-path", write_path, "--content", agent->content,
		       "--answer", TEST_ANSWER, "--log", log_path, (char *)NULL);
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

static int write_spec(const struct agent_case *agent, const char *path)
{
	char llm[TEST_PART_MAX], env[TEST_PART_MAX], spec[TEST_SPEC_MAX];
	FILE *file;

	snprintf(llm, sizeof(llm), agent->llm_yaml, standin_port);
	snprintf(env, sizeof(env), agent->env_yaml, standin_port);
	snprintf(spec, sizeof(spec), spec_template, agent->flavour, TEST_MEMORY_MB, scratch,
		 agent->flavour, env, llm, TEST_AGENT_TIMEOUT_SECS);
	file = fopen(path, "w");
	if (!file || fputs(spec, file) == EOF || fclose(file) != 0)
		return -1;
	return 0;
}

/* `voidbox --output json run --file SPEC`; returns the report (NULL on no JSON). */
static json_t *run_agent(const struct agent_case *agent, int *status, long *wall_secs)
{
	char spec_path[TEST_PATH_MAX], out_path[TEST_PATH_MAX];
	char *argv[] = { "voidbox", "--output", "json", "run", "--file", spec_path, NULL };
	int out_fd;
	long start;
	json_t *report;
	pid_t pid;

	snprintf(spec_path, sizeof(spec_path), "%s/%s-agent.yaml", scratch, agent->flavour);
	snprintf(out_path, sizeof(out_path), "%s/%s-report.json", scratch, agent->flavour);
	if (write_spec(agent, spec_path) < 0)
		return NULL;
	out_fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (out_fd < 0)
		return NULL;
	start = vm_test_now_secs();
	pid = fork();
	if (pid == 0) {
		dup2(out_fd, STDOUT_FILENO);
		/* the provider's image, chosen by the provider alone, and only the spec's keys */
		unsetenv(GUEST_IMAGE_ENV_KERNEL);
		unsetenv(GUEST_IMAGE_ENV_INITRAMFS);
		unsetenv("ANTHROPIC_API_KEY");
		unsetenv("OPENAI_API_KEY");
		execv(voidbox_cli, argv);
		_exit(127);
	}
	close(out_fd);
	*status = pid > 0 ? vm_test_wait_bounded(pid, TEST_RUN_TIMEOUT_SECS) : -1;
	*wall_secs = vm_test_now_secs() - start;
	report = json_load_file(out_path, 0, NULL);
	if (!report)
		show_file("voidbox run printed no JSON report", agent->flavour, "report.json");
	return report;
}

static void check_report(const struct agent_case *agent, json_t *report)
{
	json_t *stage = json_array_get(json_object_get(report, "stages"), 0);
	const char *output = json_string_value(json_object_get(stage, "output"));

	CHECK(json_is_true(json_object_get(report, "success")));
	if (!json_is_true(json_object_get(report, "success")))
		fprintf(stderr, "  error: %s\n",
			json_string_value(json_object_get(report, "error")));
	CHECK_STR_EQ(json_string_value(json_object_get(report, "sandbox_mode")), "local");
	/* the final answer and the tokens the CLI reported */
	CHECK(output && strstr(output, TEST_ANSWER));
	CHECK(json_integer_value(json_object_get(stage, "input_tokens")) >= TEST_MIN_INPUT_TOKENS);
	CHECK(json_integer_value(json_object_get(stage, "output_tokens")) >=
	      TEST_MIN_OUTPUT_TOKENS);
	CHECK(json_integer_value(json_object_get(stage, "tool_calls")) >= 1);
	if (agent->reports_cost) {
		CHECK(json_real_value(json_object_get(stage, "cost_usd")) > 0.0);
		CHECK(json_real_value(json_object_get(report, "total_cost_usd")) > 0.0);
	}
	printf("  %s: answer '%s', %lld in / %lld out tokens, $%.4f\n", agent->flavour,
	       output ? output : "",
	       (long long)json_integer_value(json_object_get(stage, "input_tokens")),
	       (long long)json_integer_value(json_object_get(stage, "output_tokens")),
	       json_real_value(json_object_get(stage, "cost_usd")));
}

static void run_case(const struct agent_case *agent)
{
	char path[TEST_PATH_MAX], expected_key[TEST_PATH_MAX];
	int status = -1;
	long wall_secs = 0;
	char *written, *requests;
	json_t *report;

	snprintf(path, sizeof(path), "%s/%s", scratch, agent->flavour);
	CHECK_INT_EQ(mkdir(path, 0755), 0);
	if (standin_start(agent) < 0) {
		show_file("the stand-in did not start (python3 missing?); its stderr", agent->flavour,
			  "standin.err");
		CHECK(!"the API stand-in started");
		standin_stop();
		return;
	}
	report = run_agent(agent, &status, &wall_secs);
	printf("  voidbox run on the %s image: %ld s wall\n", agent->flavour, wall_secs);
	CHECK(report != NULL);
	CHECK(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	if (report)
		check_report(agent, report);

	/* the tool's file, on the host through the mount */
	snprintf(path, sizeof(path), "%s/%s/%s", scratch, agent->flavour, TEST_FILE_NAME);
	written = read_text(path);
	CHECK_STR_EQ(written ? written : "(missing)", agent->content);
	free(written);

	/* the loop went through the stand-in: the tool result came back, with the spec's key */
	snprintf(path, sizeof(path), "%s/%s-requests.jsonl", scratch, agent->flavour);
	snprintf(expected_key, sizeof(expected_key), "\"api_key\": \"%s\"", agent->key_seen);
	requests = read_text(path);
	CHECK(requests && strstr(requests, "\"branch\": \"tool_use\""));
	CHECK(requests && strstr(requests, "\"branch\": \"final\""));
	CHECK(requests && strstr(requests, expected_key));
	if (!json_is_true(json_object_get(report, "success")) || !requests ||
	    !strstr(requests, "\"branch\": \"final\"")) {
		show_file("requests the stand-in answered", agent->flavour, "requests.jsonl");
		show_file("the stand-in's stderr", agent->flavour, "standin.err");
	}
	free(requests);
	json_decref(report);
	standin_stop();
}

static void test_real_claude_code(void)
{
	run_case(&agent_cases[0]);
}

static void test_real_codex(void)
{
	run_case(&agent_cases[1]);
}

int main(int argc, char **argv)
{
	struct guest_image_paths image;
	char why[TEST_REASON_MAX], cleanup[TEST_PATH_MAX], home_dir[PATH_MAX];

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 3) {
		fprintf(stderr, "usage: vm_real_agents <voidbox> <llm_standin.py>\n");
		return 2;
	}
	voidbox_cli = argv[1];
	standin_script = argv[2];
	if (!kvm_probe_usable(why, sizeof(why)))
		harness_skip_vm(why);
	/* the flavour images as a run without kernel or initramfs settings finds them */
	if (host_env_apply() < 0 || guest_image_home(home_dir, sizeof(home_dir)) < 0 ||
	    store_settings_set(&(struct store_settings){ .voidbox_home = home_dir }) < 0)
		harness_fail_setup("cannot read the voidbox home from the environment");
	for (size_t i = 0; i < AGENT_CASE_COUNT; i++)
		if (guest_image_resolve_named(agent_cases[i].flavour, NULL, NULL, &image, why,
					      sizeof(why)) < 0)
			harness_skip_vm(why);
	if (!mkdtemp(scratch))
		harness_fail_setup("cannot create a scratch directory (mkdtemp)");
	loopback_up();
	RUN_TEST(test_real_claude_code);
	RUN_TEST(test_real_codex);
	standin_stop();
	snprintf(cleanup, sizeof(cleanup), "rm -rf %s", scratch);
	if (system(cleanup) != 0)
		fprintf(stderr, "could not remove %s\n", scratch);
	return harness_finish();
}
