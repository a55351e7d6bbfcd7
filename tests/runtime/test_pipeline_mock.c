/*
 * Agent and pipeline runs in mock boxes (no VM). claude-code is answered by running the real
 * mock agent (argv[1]) on the host under a scratch root, with the box's skill and MCP files
 * copied in and its output file copied back, so these tests see the same stream-json and
 * output files a VM run does. The handler also records prompts and how many agents ran at
 * once, which makes carry and the fan-out bound observable.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "runtime/agent.h"
#include "runtime/pipeline.h"
#include "store/store_settings.h"

#define TEST_MAX_PROMPTS 16
#define TEST_OUTPUT_MAX (1u << 20)
#define TEST_PATH_MAX 512
#define TEST_EXAMPLES_FANOUT "pipeline-fanout.yaml"

extern char **environ;

static const char *mock_claude_path;
static const char *examples_dir;

#define TEST_DEFAULT_TIMEOUT 77u

struct test_state {
	pthread_mutex_t lock;
	unsigned active;
	unsigned max_active;
	char *prompts[TEST_MAX_PROMPTS];
	size_t prompt_count;
};

static struct test_state state = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void state_reset(void)
{
	pthread_mutex_lock(&state.lock);
	for (size_t i = 0; i < state.prompt_count; i++)
		free(state.prompts[i]);
	state.prompt_count = 0;
	state.active = 0;
	state.max_active = 0;
	pthread_mutex_unlock(&state.lock);
}

static const char *prompt_of(const struct box_exec_request *req)
{
	for (size_t i = 0; i + 1 < req->arg_count; i++)
		if (strcmp(req->args[i], "-p") == 0)
			return req->args[i + 1];
	return "";
}

/* Copies a box file to root+path when the box has it. */
static void copy_from_box(struct box *box, const char *root, const char *path)
{
	char host[TEST_PATH_MAX];
	char *data;
	size_t len;
	FILE *file;

	if (box_read_file(box, path, &data, &len) < 0)
		return;
	snprintf(host, sizeof(host), "%s%s", root, path);
	file = fopen(host, "w");
	if (file) {
		fwrite(data, 1, len, file);
		fclose(file);
	}
	free(data);
}

static void copy_to_box(struct box *box, const char *root, const char *path)
{
	char host[TEST_PATH_MAX];
	char data[TEST_OUTPUT_MAX / 16];
	size_t len;
	FILE *file;

	snprintf(host, sizeof(host), "%s%s", root, path);
	file = fopen(host, "r");
	if (!file)
		return;
	len = fread(data, 1, sizeof(data), file);
	fclose(file);
	box_write_file(box, path, data, len);
}

/* Runs the mock agent with req's args and env plus MOCK_CLAUDE_ROOT; captures stdout. */
static int run_mock_agent(const struct box_exec_request *req, const char *root, const char *scenario,
			  struct box_exec_result *result)
{
	char *argv[32];
	char *envp[32];
	char root_env[TEST_PATH_MAX], scenario_env[64];
	char *out = malloc(TEST_OUTPUT_MAX);
	size_t envc = 0, len = 0;
	int fds[2], status;
	ssize_t got;
	pid_t pid;

	if (!out || req->arg_count + 2 > sizeof(argv) / sizeof(argv[0]) || pipe(fds) < 0) {
		free(out);
		return -ENOMEM;
	}
	argv[0] = (char *)mock_claude_path;
	for (size_t i = 0; i < req->arg_count; i++)
		argv[i + 1] = (char *)req->args[i];
	argv[req->arg_count + 1] = NULL;
	snprintf(root_env, sizeof(root_env), "MOCK_CLAUDE_ROOT=%s", root);
	snprintf(scenario_env, sizeof(scenario_env), "MOCK_CLAUDE_SCENARIO=%s", scenario);
	envp[envc++] = root_env;
	envp[envc++] = scenario_env;
	envp[envc++] = "MOCK_CLAUDE_DELAY_MS=30";
	envp[envc] = NULL;
	pid = fork();
	if (pid == 0) {
		dup2(fds[1], STDOUT_FILENO);
		close(fds[0]);
		close(fds[1]);
		execve(mock_claude_path, argv, envp);
		_exit(127);
	}
	close(fds[1]);
	while ((got = read(fds[0], out + len, TEST_OUTPUT_MAX - 1 - len)) > 0)
		len += (size_t)got;
	close(fds[0]);
	out[len] = '\0';
	waitpid(pid, &status, 0);
	result->stdout_data = out;
	result->stdout_len = len;
	result->stderr_data = strdup("");
	result->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : BOX_EXIT_NOT_RUN;
	return 1;
}

static void remove_tree(const char *root)
{
	char command[TEST_PATH_MAX + 16];

	snprintf(command, sizeof(command), "rm -rf '%s'", root);
	if (system(command) != 0)
		fprintf(stderr, "could not remove %s\n", root);
}

/* The mock_exec hook: claude-code runs the real mock; a prompt with FAIL gets scenario error. */
static int test_mock_exec(struct box *box, void *opaque, const struct box_exec_request *req,
			  struct box_exec_result *result)
{
	const char *program = strrchr(req->program, '/') ? strrchr(req->program, '/') + 1 :
							   req->program;
	const char *prompt = prompt_of(req);
	char root[] = "/tmp/voidbox-mockagent-XXXXXX";
	char dir[TEST_PATH_MAX];
	char command[TEST_PATH_MAX + 16];
	int rc;

	(void)opaque;
	if (strcmp(program, "claude-code") != 0)
		return 0;
	if (!mkdtemp(root))
		return -errno;
	snprintf(dir, sizeof(dir), "%s/workspace/.claude/skills", root);
	snprintf(command, sizeof(command), "mkdir -p '%s'", dir);
	if (system(command) != 0)
		return -EIO;
	copy_from_box(box, root, "/workspace/.mcp.json");
	copy_from_box(box, root, "/workspace/.claude/skills/style.md");
	pthread_mutex_lock(&state.lock);
	if (state.prompt_count < TEST_MAX_PROMPTS)
		state.prompts[state.prompt_count++] = strdup(prompt);
	state.active++;
	if (state.active > state.max_active)
		state.max_active = state.active;
	pthread_mutex_unlock(&state.lock);
	rc = run_mock_agent(req, root, strstr(prompt, "FAIL") ? "error" : "multi_tool", result);
	pthread_mutex_lock(&state.lock);
	state.active--;
	pthread_mutex_unlock(&state.lock);
	copy_to_box(box, root, "/workspace/output.json");
	remove_tree(root);
	return rc;
}

static struct spec *load(const char *yaml)
{
	struct spec_diagnostics diag;
	struct spec *spec;

	spec_diagnostics_init(&diag);
	spec = spec_parse_buffer(yaml, strlen(yaml), "test.yaml", NULL, &diag);
	if (!spec)
		spec_diagnostics_print(&diag, stderr);
	spec_diagnostics_free(&diag);
	return spec;
}

static const char agent_yaml[] =
	"api_version: v1\nkind: agent\nname: solo\nsandbox: {mode: mock}\n"
	"agent:\n  prompt: Count the files\n  skills:\n    - agent:claude-code\n"
	"    - {name: style, content: Be brief.}\n    - mcp:/usr/local/bin/void-mcp\n";

static void test_agent_in_mock_box(void)
{
	struct spec *spec = load(agent_yaml);
	struct agent_mock mock = { .exec = test_mock_exec };
	struct box_config cfg = { .mode = BOX_MODE_MOCK, .mock_handler = agent_mock_handler,
				  .mock_opaque = &mock };
	struct run_report report;
	struct box *box = NULL;
	char err[256], *data;
	size_t len;

	CHECK(spec != NULL);
	if (!spec)
		return;
	state_reset();
	CHECK_INT_EQ(box_open(&cfg, &box, err, sizeof(err)), 0);
	mock.box = box;
	CHECK_INT_EQ(run_report_init(&report, spec->name, spec->kind), 0);
	CHECK_INT_EQ(agent_run_in_box(spec, box, NULL, &report), 0);
	CHECK(report.success);
	CHECK_INT_EQ((long)report.stage_count, 1);
	CHECK_INT_EQ((long)report.input_tokens, 500);
	CHECK_INT_EQ((long)report.output_tokens, 200);
	CHECK(report.total_cost_usd > 0.00299 && report.total_cost_usd < 0.00301);
	CHECK_INT_EQ(report.stages[0].turns, 3);
	/* multi_tool's five tools plus one call to the MCP server */
	CHECK_INT_EQ(report.stages[0].tool_calls, 6);
	CHECK_STR_EQ(report.stages[0].output, "mock: completed 'Count the files'; skills: style; mcp: void-mcp");
	/* the report's output is the agent's output file */
	CHECK(strstr(report.output, "\"agent\":\"voidbox-mock-claude\"") != NULL);
	CHECK_INT_EQ(box_read_file(box, "/workspace/.claude/skills/style.md", &data, &len), 0);
	CHECK_STR_EQ(data, "Be brief.");
	free(data);
	CHECK_INT_EQ(box_read_file(box, "/home/sandbox/.claude.json", &data, &len), 0);
	CHECK(strstr(data, "hasCompletedOnboarding") != NULL);
	free(data);
	CHECK(state.prompt_count == 1 &&
	      strstr(state.prompts[0], "\n\nWrite your output to /workspace/output.json."));
	run_report_free(&report);
	box_close(box, false);
	spec_free(spec);
}

static const char pipeline_yaml[] =
	"api_version: v1\nkind: pipeline\nname: fan\nsandbox: {mode: mock}\n"
	"pipeline:\n  boxes:\n"
	"    - {name: a, prompt: Review A}\n    - {name: b, prompt: Review B}\n"
	"    - {name: c, prompt: Review C %s}\n    - {name: writer, prompt: Merge reviews}\n"
	"  stages:\n    - {type: fan_out, boxes: [a, b, c]}\n    - {type: box, name: writer}\n";

static struct spec *load_pipeline(const char *c_suffix)
{
	char yaml[sizeof(pipeline_yaml) + 32];

	snprintf(yaml, sizeof(yaml), pipeline_yaml, c_suffix);
	return load(yaml);
}

static void test_pipeline_fan_out_and_carry(void)
{
	struct pipeline_options options = { .max_parallel = 2 };
	struct spec *spec = load_pipeline("");
	struct run_report report;
	const char *writer_prompt = NULL;

	CHECK(spec != NULL);
	if (!spec)
		return;
	state_reset();
	options.agent.mock_exec = test_mock_exec;
	CHECK_INT_EQ(run_report_init(&report, spec->name, spec->kind), 0);
	CHECK_INT_EQ(pipeline_run(spec, &options, &report), 0);
	CHECK(report.success);
	CHECK_INT_EQ((long)report.stage_count, 4);
	CHECK_INT_EQ((long)report.input_tokens, 4 * 500);
	CHECK_INT_EQ((long)report.output_tokens, 4 * 200);
	CHECK(report.total_cost_usd > 0.01199 && report.total_cost_usd < 0.01201);
	CHECK_STR_EQ(report.stages[3].name, "writer");
	/* never more agents at once than the bound, and the bound was reached */
	CHECK_INT_EQ(state.max_active, 2);
	for (size_t i = 0; i < state.prompt_count; i++)
		if (strncmp(state.prompts[i], "Merge reviews", 13) == 0)
			writer_prompt = state.prompts[i];
	CHECK(writer_prompt != NULL);
	/* the writer sees the fan-out's merged array of the three result texts */
	CHECK(writer_prompt && strstr(writer_prompt, "--- Previous stage output ---\n"
						     "[\"mock: completed 'Review A'"));
	CHECK(writer_prompt && strstr(writer_prompt, "'Review C'"));
	/* the pipeline's output is the writer's output file */
	CHECK(strstr(report.output, "mock: completed 'Merge reviews'") != NULL);
	run_report_free(&report);
	spec_free(spec);
}

static void test_pipeline_first_failure_stops(void)
{
	struct pipeline_options options = { .max_parallel = 3 };
	struct spec *spec = load_pipeline("FAIL");
	struct run_report report;

	CHECK(spec != NULL);
	if (!spec)
		return;
	state_reset();
	options.agent.mock_exec = test_mock_exec;
	CHECK_INT_EQ(run_report_init(&report, spec->name, spec->kind), 0);
	CHECK_INT_EQ(pipeline_run(spec, &options, &report), -ECANCELED);
	CHECK(!report.success);
	CHECK(report.error && strstr(report.error, "stage 1 (fan_out), box 'c'"));
	CHECK_INT_EQ((long)report.stage_count, 4);
	CHECK(report.stages[2].is_error && !report.stages[2].success);
	CHECK(report.stages[0].success && report.stages[1].success);
	CHECK(!report.stages[3].ran);
	/* the writer never started */
	CHECK_INT_EQ((long)state.prompt_count, 3);
	run_report_free(&report);
	spec_free(spec);
}

/* The shipped example (real VMs as written) in mock boxes, answered by the built-in stand-in. */
static void test_example_with_builtin_mock(void)
{
	struct pipeline_options options = { .agent = { .override_mode = true,
						       .mode = BOX_MODE_MOCK } };
	char path[TEST_PATH_MAX];
	struct spec_diagnostics diag;
	struct run_report report;
	struct spec *spec;

	snprintf(path, sizeof(path), "%s/%s", examples_dir, TEST_EXAMPLES_FANOUT);
	spec_diagnostics_init(&diag);
	spec = spec_load_file(path, &diag);
	spec_diagnostics_free(&diag);
	CHECK(spec != NULL);
	if (!spec)
		return;
	CHECK_INT_EQ(run_report_init(&report, spec->name, spec->kind), 0);
	CHECK_INT_EQ(pipeline_run(spec, &options, &report), 0);
	CHECK(report.success);
	CHECK_INT_EQ((long)report.stage_count, 4);
	CHECK(strstr(report.output, "mock: completed 'Merge the three reviews") != NULL);
	CHECK_STR_EQ(report.sandbox_mode ? report.sandbox_mode : "(none)", "mock");
	run_report_free(&report);
	spec_free(spec);
}

static void test_remote_skill_fails_before_exec(void)
{
	static const char yaml[] =
		"api_version: v1\nkind: agent\nname: r\nsandbox: {mode: mock}\n"
		"agent:\n  prompt: hi\n  skills: [\"remote:acme/tools/lint\"]\n";
	struct agent_options options = { .mock_exec = test_mock_exec };
	struct spec *spec = load(yaml);
	struct run_report report;
	struct spec_diagnostics diag;

	CHECK(spec != NULL);
	if (!spec)
		return;
	state_reset();
	/* the runtime refuses remote skills up front as an unsupported feature */
	spec_diagnostics_init(&diag);
	CHECK(agent_check(spec, &diag) >= 1);
	spec_diagnostics_free(&diag);
	CHECK_INT_EQ(run_report_init(&report, spec->name, spec->kind), 0);
	CHECK(agent_run(spec, &options, &report) < 0);
	CHECK(report.error != NULL);
	CHECK_INT_EQ((long)state.prompt_count, 0);
	run_report_free(&report);
	spec_free(spec);
}

/* A guest without claude-code: the probe's `command -v` fails. */
static int test_exec_without_claude(struct box *box, void *opaque,
				    const struct box_exec_request *req,
				    struct box_exec_result *result)
{
	(void)box;
	(void)opaque;
	if (strcmp(req->program, "sh") != 0 || req->arg_count != 2 ||
	    !strstr(req->args[1], "command -v"))
		return 0;
	result->stdout_data = strdup("");
	result->stderr_data = strdup("");
	result->exit_code = 1;
	return result->stdout_data && result->stderr_data ? 1 : -ENOMEM;
}

/* An image without claude-code fails the run before the exec, naming the image to build. */
static void test_missing_claude_names_the_flavour(void)
{
	struct agent_options options = { .mock_exec = test_exec_without_claude };
	struct spec *spec = load(agent_yaml);
	struct run_report report;

	CHECK(spec != NULL);
	if (!spec)
		return;
	CHECK_INT_EQ(run_report_init(&report, spec->name, spec->kind), 0);
	CHECK(agent_run(spec, &options, &report) < 0);
	CHECK(report.error && strstr(report.error, "voidbox image build --flavour claude"));
	run_report_free(&report);
	spec_free(spec);
}

static void write_empty(const char *dir, const char *name)
{
	char path[TEST_PATH_MAX];
	FILE *file;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	file = fopen(path, "w");
	CHECK(file != NULL);
	if (file)
		fclose(file);
}

/*
 * An agent boots its provider's flavour image, never the default one in its place: with only
 * the default image built, claude and codex agents stop before any boot with the command that
 * builds theirs.
 */
static void test_agent_needs_its_flavour_image(void)
{
	static const char *const yaml[] = {
		"api_version: v1\nkind: agent\nname: f\nsandbox: {mode: auto}\n"
		"llm: {provider: claude}\nagent: {prompt: hi}\n",
		"api_version: v1\nkind: agent\nname: f\nsandbox: {mode: local}\n"
		"llm: {provider: codex}\nagent: {prompt: hi}\n",
	};
	static const char *const expected[] = { "`voidbox image build --flavour claude`",
						"`voidbox image build --flavour codex`" };
	char home[] = "/tmp/voidbox-test-flavour-XXXXXX", dir[TEST_PATH_MAX];

	CHECK(mkdtemp(home) != NULL);
	snprintf(dir, sizeof(dir), "%s/images", home);
	CHECK_INT_EQ(mkdir(dir, 0755), 0);
	snprintf(dir, sizeof(dir), "%s/images/default", home);
	CHECK_INT_EQ(mkdir(dir, 0755), 0);
	write_empty(dir, "vmlinuz");
	write_empty(dir, "initramfs.cpio");
	/* only the default image, and no kernel or initramfs named anywhere */
	CHECK_INT_EQ(store_settings_set(&(struct store_settings){ .voidbox_home = home }), 0);
	for (size_t i = 0; i < sizeof(yaml) / sizeof(yaml[0]); i++) {
		struct spec *spec = load(yaml[i]);
		struct run_report report;

		CHECK(spec != NULL);
		if (!spec)
			continue;
		CHECK_INT_EQ(run_report_init(&report, spec->name, spec->kind), 0);
		CHECK_INT_EQ(agent_run(spec, NULL, &report), -ENOENT);
		CHECK(report.error && strstr(report.error, expected[i]));
		if (report.error && !strstr(report.error, expected[i]))
			fprintf(stderr, "  error: %s\n", report.error);
		run_report_free(&report);
		spec_free(spec);
	}
	CHECK_INT_EQ(store_settings_set(NULL), 0);
	snprintf(dir, sizeof(dir), "rm -rf %s", home);
	CHECK_INT_EQ(system(dir), 0);
}

/* Records the timeout claude-code was started with, then answers as test_mock_exec does. */
static uint32_t seen_timeout_secs;

static int test_timeout_exec(struct box *box, void *opaque, const struct box_exec_request *req,
			     struct box_exec_result *result)
{
	const char *slash = strrchr(req->program, '/');

	if (strcmp(slash ? slash + 1 : req->program, "claude-code") == 0)
		seen_timeout_secs = req->timeout_secs;
	return test_mock_exec(box, opaque, req, result);
}

/*
 * The runner's default timeout (`voidbox run --step-timeout`, the daemon's stage timeout)
 * reaches an agent that sets none; its own timeout_secs wins; a service agent gets none.
 */
static void test_agent_default_timeout(void)
{
	static const char *const yamls[] = {
		"api_version: v1\nkind: agent\nname: t\nsandbox: {mode: mock}\n"
		"agent:\n  prompt: hi\n  skills: [\"agent:claude-code\"]\n",
		"api_version: v1\nkind: agent\nname: t\nsandbox: {mode: mock}\n"
		"agent:\n  prompt: hi\n  timeout_secs: 9\n  skills: [\"agent:claude-code\"]\n",
		"api_version: v1\nkind: agent\nname: t\nsandbox: {mode: mock}\n"
		"agent:\n  prompt: hi\n  mode: service\n  output_file: /workspace/output.json\n"
		"  skills: [\"agent:claude-code\"]\n",
	};
	static const uint32_t expected[] = { TEST_DEFAULT_TIMEOUT, 9, 0 };
	struct agent_options options = { .mock_exec = test_timeout_exec,
					 .default_timeout_secs = TEST_DEFAULT_TIMEOUT };

	for (size_t i = 0; i < sizeof(yamls) / sizeof(yamls[0]); i++) {
		struct spec *spec = load(yamls[i]);
		struct run_report report;

		CHECK(spec != NULL);
		if (!spec)
			continue;
		state_reset();
		seen_timeout_secs = UINT32_MAX;
		CHECK_INT_EQ(run_report_init(&report, spec->name, spec->kind), 0);
		CHECK_INT_EQ(agent_run(spec, &options, &report), 0);
		CHECK_INT_EQ(seen_timeout_secs, expected[i]);
		run_report_free(&report);
		spec_free(spec);
	}
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: test_pipeline_mock <voidbox-mock-claude> <examples dir>\n");
		return 1;
	}
	mock_claude_path = argv[1];
	examples_dir = argv[2];
	RUN_TEST(test_agent_in_mock_box);
	RUN_TEST(test_pipeline_fan_out_and_carry);
	RUN_TEST(test_pipeline_first_failure_stops);
	RUN_TEST(test_example_with_builtin_mock);
	RUN_TEST(test_remote_skill_fails_before_exec);
	RUN_TEST(test_agent_needs_its_flavour_image);
	RUN_TEST(test_missing_claude_names_the_flavour);
	RUN_TEST(test_agent_default_timeout);
	state_reset();
	return harness_finish();
}
