/*
 * Workflow engine and box tests in mock mode (no VM): the shipped example, parallel levels,
 * failures, stdin_from chains, timeouts, output_step, --input, the unsupported-feature
 * refusal, the mock's documented built-ins and files, and mode resolution (auto falls back to
 * mock, local refuses without a guest image).
 *
 * Parallelism is observed, not timed: the two middle steps of a diamond each run
 * `mock-barrier`, which only succeeds when both are inside the box at once. The same barrier
 * across two levels must fail, which shows the check can fail. Specs are inline so the input
 * sits next to the expectation; argv[1] is the examples directory.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/store_settings.h"
#include "common/log.h"
#include "runtime/box.h"
#include "runtime/run_report.h"
#include "runtime/spec.h"
#include "runtime/workflow.h"
#include "harness.h"

#define TEST_PATH_MAX 512
#define TEST_ERR_MAX 1024

static const char *examples_dir = "examples";

static struct spec *load_text(const char *text)
{
	struct spec_diagnostics diag;
	struct spec *spec;

	spec_diagnostics_init(&diag);
	spec = spec_parse_buffer(text, strlen(text), "test.yaml", NULL, &diag);
	if (!spec)
		spec_diagnostics_print(&diag, stderr);
	spec_diagnostics_free(&diag);
	return spec;
}

/* Runs spec as a workflow in mock mode; returns workflow_run's result. */
static int run_mock(const struct spec *spec, const struct workflow_options *extra,
		    struct run_report *report)
{
	struct workflow_options options = { 0 };

	if (extra)
		options = *extra;
	options.override_mode = true;
	options.mode = BOX_MODE_MOCK;
	run_report_init(report, spec->name, spec->kind);
	return workflow_run(spec, &options, report);
}

static void test_example_workflow(void)
{
	char path[TEST_PATH_MAX];
	struct spec_diagnostics diag;
	struct run_report report;
	struct spec *spec;

	snprintf(path, sizeof(path), "%s/workflow.yaml", examples_dir);
	spec_diagnostics_init(&diag);
	spec = spec_load_file(path, &diag);
	spec_diagnostics_free(&diag);
	CHECK(spec != NULL);
	if (!spec)
		return;
	run_report_init(&report, spec->name, spec->kind);
	CHECK_INT_EQ(workflow_run(spec, NULL, &report), 0);
	CHECK(report.success);
	CHECK_STR_EQ(report.output, "HELLO FROM WORKFLOW\n");
	CHECK_STR_EQ(report.sandbox_mode, "mock");
	CHECK_INT_EQ(report.stage_count, 2);
	CHECK(report.error == NULL);
	if (report.stage_count == 2) {
		CHECK_STR_EQ(report.stages[0].name, "fetch");
		CHECK_STR_EQ(report.stages[0].output, "hello from workflow\n");
		CHECK(report.stages[1].ran && report.stages[1].success);
	}
	run_report_free(&report);
	spec_free(spec);
}

static const char diamond_spec[] =
	"kind: workflow\nname: diamond\nsandbox: {mode: mock}\nworkflow:\n  steps:\n"
	"    - name: a\n      run: {program: echo, args: [start]}\n"
	"    - name: b\n      depends_on: [a]\n"
	"      run: {program: mock-barrier, args: [middle, '2', '10']}\n"
	"    - name: c\n      depends_on: [a]\n"
	"      run: {program: mock-barrier, args: [middle, '2', '10']}\n"
	"    - name: d\n      depends_on: [b, c]\n      run: {program: echo, args: [end]}\n";

static void test_diamond_runs_middle_level_in_parallel(void)
{
	struct spec *spec = load_text(diamond_spec);
	struct spec_workflow_plan plan;
	struct run_report report;

	CHECK(spec != NULL);
	if (!spec)
		return;
	CHECK_INT_EQ(spec_workflow_plan(&spec->workflow, &plan, NULL), 0);
	CHECK_INT_EQ(plan.level_count, 3);
	if (plan.level_count == 3)
		CHECK_INT_EQ(plan.levels[1].count, 2);
	spec_workflow_plan_free(&plan);

	CHECK_INT_EQ(run_mock(spec, NULL, &report), 0);
	CHECK(report.success);
	/* both barrier steps passed: they were inside the box at the same time */
	CHECK_STR_EQ(run_report_find_stage(&report, "b")->output, "middle: all arrived\n");
	CHECK_STR_EQ(run_report_find_stage(&report, "c")->output, "middle: all arrived\n");
	CHECK_STR_EQ(report.output, "end\n");
	run_report_free(&report);
	spec_free(spec);
}

/* The control: the same barrier in two levels cannot complete, so the check above can fail. */
static void test_barrier_fails_across_levels(void)
{
	static const char text[] =
		"kind: workflow\nname: serial\nworkflow:\n  steps:\n"
		"    - name: b\n      run: {program: mock-barrier, args: [pair, '2', '1']}\n"
		"    - name: c\n      depends_on: [b]\n"
		"      run: {program: mock-barrier, args: [pair, '2', '1']}\n";
	struct spec *spec = load_text(text);
	struct run_report report;

	CHECK(spec != NULL);
	if (!spec)
		return;
	CHECK_INT_EQ(run_mock(spec, NULL, &report), -ECANCELED);
	CHECK(!report.success);
	CHECK(report.error && strstr(report.error, "step \"b\" failed with exit code 1"));
	CHECK(!run_report_find_stage(&report, "c")->ran);
	run_report_free(&report);
	spec_free(spec);
}

static void test_failing_step_stops_the_run(void)
{
	static const char text[] =
		"kind: workflow\nname: failing\nworkflow:\n  steps:\n"
		"    - name: prepare\n      run: {program: echo, args: [ok]}\n"
		"    - name: build\n      depends_on: [prepare]\n"
		"      run: {program: mock-exit, args: ['3', compiler, exploded]}\n"
		"    - name: sibling\n      depends_on: [prepare]\n      run: {program: true}\n"
		"    - name: publish\n      depends_on: [build, sibling]\n"
		"      run: {program: echo, args: [never]}\n";
	struct spec *spec = load_text(text);
	struct run_report report;
	const struct run_stage *build, *publish;

	CHECK(spec != NULL);
	if (!spec)
		return;
	CHECK_INT_EQ(run_mock(spec, NULL, &report), -ECANCELED);
	CHECK(!report.success);
	CHECK_STR_EQ(report.error, "step \"build\" failed with exit code 3: compiler exploded");
	CHECK_STR_EQ(run_report_find_stage(&report, "build")->error, "exited with code 3: compiler exploded");
	build = run_report_find_stage(&report, "build");
	publish = run_report_find_stage(&report, "publish");
	CHECK(build->ran && !build->success && build->is_error);
	CHECK_INT_EQ(build->exit_code, 3);
	/* the failing step's level finishes, the next level never starts */
	CHECK(run_report_find_stage(&report, "sibling")->ran);
	CHECK(run_report_find_stage(&report, "sibling")->success);
	CHECK(!publish->ran && !publish->success);
	CHECK_STR_EQ(report.output, "");
	run_report_free(&report);
	spec_free(spec);
}

static void test_stdin_from_chain(void)
{
	static const char text[] =
		"kind: workflow\nname: chain\nworkflow:\n  steps:\n"
		"    - name: source\n      run: {program: echo, args: [abc, xyz]}\n"
		"    - name: upper\n      depends_on: [source]\n"
		"      run: {program: tr, args: [a-z, A-Z], stdin_from: source}\n"
		"    - name: squash\n"
		"      run: {program: tr, args: [A-Z, x], stdin_from: upper}\n"
		"    - name: copy\n      run: {program: cat, stdin_from: upper}\n"
		"  output_step: upper\n";
	struct spec *spec = load_text(text);
	struct run_report report;

	CHECK(spec != NULL);
	if (!spec)
		return;
	CHECK_INT_EQ(run_mock(spec, NULL, &report), 0);
	CHECK_STR_EQ(report.output, "ABC XYZ\n");
	CHECK_STR_EQ(run_report_find_stage(&report, "squash")->output, "xxx xxx\n");
	CHECK_STR_EQ(run_report_find_stage(&report, "copy")->output, "ABC XYZ\n");
	run_report_free(&report);
	spec_free(spec);
}

static void test_timeouts(void)
{
	static const char text[] =
		"kind: workflow\nname: slow\nworkflow:\n  steps:\n"
		"    - name: quick\n      timeout_secs: 30\n"
		"      run: {program: sleep, args: ['0.01']}\n"
		"    - name: stuck\n      depends_on: [quick]\n      timeout_secs: 1\n"
		"      run: {program: sleep, args: ['30']}\n";
	struct spec *spec = load_text(text);
	struct workflow_options options = { .default_timeout_secs = 1 };
	struct run_report report;
	const struct run_stage *stuck;

	CHECK(spec != NULL);
	if (!spec)
		return;
	CHECK_INT_EQ(run_mock(spec, NULL, &report), -ECANCELED);
	CHECK(run_report_find_stage(&report, "quick")->success);
	stuck = run_report_find_stage(&report, "stuck");
	CHECK(stuck->ran && !stuck->success);
	CHECK_INT_EQ(stuck->exit_code, BOX_EXIT_NOT_RUN);
	CHECK_STR_EQ(stuck->error, "timed out after 1s");
	CHECK(report.error && strstr(report.error, "step \"stuck\" timed out after 1s"));
	run_report_free(&report);
	spec_free(spec);

	/* a step without timeout_secs takes the run's default */
	spec = load_text("kind: workflow\nname: slow\nworkflow:\n  steps:\n"
			 "    - name: nap\n      run: {program: sleep, args: ['30']}\n");
	CHECK(spec != NULL);
	if (!spec)
		return;
	CHECK_INT_EQ(run_mock(spec, &options, &report), -ECANCELED);
	CHECK(report.error && strstr(report.error, "step \"nap\" timed out after 1s"));
	run_report_free(&report);
	spec_free(spec);
}

static void test_input_and_default_output(void)
{
	static const char text[] =
		"kind: workflow\nname: input\nworkflow:\n  steps:\n"
		"    - name: shout\n      run: {program: tr, args: [a-z, A-Z]}\n"
		"    - name: last\n      depends_on: [shout]\n      run: {program: cat}\n";
	struct spec *spec = load_text(text);
	struct workflow_options options = { .input = "quiet words", .input_len = 11 };
	struct run_report report;

	CHECK(spec != NULL);
	if (!spec)
		return;
	CHECK_INT_EQ(run_mock(spec, &options, &report), 0);
	CHECK_STR_EQ(run_report_find_stage(&report, "shout")->output, "QUIET WORDS");
	/* no output_step: the last declared step is the output; it got --input too */
	CHECK_STR_EQ(report.output, "quiet words");
	run_report_free(&report);
	spec_free(spec);
}

static void test_unsupported_feature_refused(void)
{
	static const char text[] =
		"kind: workflow\nname: img\nsandbox: {mode: mock, image: alpine}\n"
		"workflow:\n  steps:\n    - name: a\n      run: {program: echo}\n";
	struct spec *spec = load_text(text);
	struct spec_diagnostics diag;
	struct run_report report;

	CHECK(spec != NULL);
	if (!spec)
		return;
	spec_diagnostics_init(&diag);
	CHECK_INT_EQ(workflow_check(spec, &diag), 1);
	CHECK(diag.count == 1 && strstr(diag.items[0].message, "not supported yet"));
	CHECK_INT_EQ(diag.count ? diag.items[0].pos.line : 0, 3);
	spec_diagnostics_free(&diag);
	CHECK_INT_EQ(run_mock(spec, NULL, &report), -ENOTSUP);
	CHECK(report.error && strstr(report.error, "not supported yet"));
	CHECK_INT_EQ(report.stage_count, 0);
	run_report_free(&report);
	spec_free(spec);

	spec = load_text("kind: sandbox\nname: s\n");
	CHECK(spec != NULL);
	if (!spec)
		return;
	spec_diagnostics_init(&diag);
	CHECK_INT_EQ(workflow_check(spec, &diag), 1);
	spec_diagnostics_free(&diag);
	spec_free(spec);
}

static int open_mock(struct box **box, const struct box_config *extra)
{
	struct box_config cfg = { .mode = BOX_MODE_MOCK, .name = "test" };
	char err[TEST_ERR_MAX];

	if (extra)
		cfg = *extra;
	return box_open(&cfg, box, err, sizeof(err));
}

static int exec_simple(struct box *box, const char *program, const char *const *args,
		       size_t arg_count, const char *stdin_text, struct box_exec_result *result)
{
	struct box_exec_request req = {
		.program = program, .args = args, .arg_count = arg_count,
		.stdin_data = stdin_text, .stdin_len = stdin_text ? strlen(stdin_text) : 0,
	};

	return box_exec(box, &req, result);
}

static void test_mock_builtins_and_rules(void)
{
	static const struct box_mock_rule rules[] = {
		{ .program = "git", .first_arg = "status", .stdout_text = "clean\n" },
		{ .program = "git", .stderr_text = "git: mocked failure\n", .exit_code = 128 },
	};
	struct box_config cfg = { .mode = BOX_MODE_MOCK, .mock_rules = rules,
				  .mock_rule_count = 2 };
	static const char *const echo_args[] = { "-n", "a", "b" };
	static const char *const status_args[] = { "status" };
	static const char *const push_args[] = { "push" };
	struct box_exec_result result;
	struct box *box = NULL;

	CHECK_INT_EQ(open_mock(&box, &cfg), 0);
	if (!box)
		return;
	CHECK_INT_EQ(box_mode(box), BOX_MODE_MOCK);
	CHECK_INT_EQ(exec_simple(box, "/bin/echo", echo_args, 3, NULL, &result), 0);
	CHECK_STR_EQ(result.stdout_data, "a b");
	box_exec_result_free(&result);
	CHECK_INT_EQ(exec_simple(box, "git", status_args, 1, NULL, &result), 0);
	CHECK_STR_EQ(result.stdout_data, "clean\n");
	CHECK_INT_EQ(result.exit_code, 0);
	box_exec_result_free(&result);
	CHECK_INT_EQ(exec_simple(box, "/usr/bin/git", push_args, 1, NULL, &result), 0);
	CHECK_STR_EQ(result.stderr_data, "git: mocked failure\n");
	CHECK_INT_EQ(result.exit_code, 128);
	box_exec_result_free(&result);
	CHECK_INT_EQ(exec_simple(box, "uname", NULL, 0, NULL, &result), 0);
	CHECK_STR_EQ(result.stdout_data, "mock: uname\n");
	box_exec_result_free(&result);
	CHECK_INT_EQ(exec_simple(box, "false", NULL, 0, NULL, &result), 0);
	CHECK_INT_EQ(result.exit_code, 1);
	box_exec_result_free(&result);
	CHECK_INT_EQ(exec_simple(box, "", NULL, 0, NULL, &result), -EINVAL);
	CHECK(result.error != NULL);
	box_exec_result_free(&result);
	box_close(box, false);
}

static void test_mock_files_and_env(void)
{
	struct spec *spec = load_text("kind: workflow\nname: env\n"
				      "sandbox:\n  mode: mock\n  env: {GREETING: hello, KEEP: yes}\n"
				      "workflow:\n  steps:\n    - name: a\n      run: {program: true}\n");
	static const char *const cat_args[] = { "/workspace/notes/a.txt", "/nope" };
	static const char *const env_args[] = { "GREETING" };
	struct box_env_var override = { "GREETING", "bonjour" };
	struct box_exec_request req = { .program = "printenv", .args = env_args, .arg_count = 1 };
	struct box_exec_result result;
	struct box_config cfg;
	struct box *box = NULL;
	char *data = NULL;
	size_t len = 0;

	CHECK(spec != NULL);
	if (!spec)
		return;
	box_config_from_spec(&cfg, spec, NULL);
	CHECK_INT_EQ(open_mock(&box, &cfg), 0);
	if (!box) {
		spec_free(spec);
		return;
	}
	CHECK_INT_EQ(box_write_file(box, "/workspace/notes/a.txt", "note\n", 5), 0);
	CHECK_INT_EQ(box_read_file(box, "/workspace/notes/a.txt", &data, &len), 0);
	CHECK_STR_EQ(data, "note\n");
	CHECK_INT_EQ(len, 5);
	free(data);
	CHECK_INT_EQ(box_read_file(box, "/workspace/missing", &data, &len), -ENOENT);
	CHECK(strstr(box_last_error(), "/workspace/missing") != NULL);
	CHECK_INT_EQ(box_read_file(box, "/workspace/notes", &data, &len), -EISDIR);
	CHECK_INT_EQ(box_write_file(box, "relative", "x", 1), -EINVAL);
	CHECK_INT_EQ(box_mkdir_p(box, "/workspace/notes/a.txt/sub"), -ENOTDIR);
	CHECK_INT_EQ(box_mkdir_p(box, "/workspace/out/deep"), 0);
	CHECK_INT_EQ(box_read_file(box, "/workspace/out", &data, &len), -EISDIR);

	CHECK_INT_EQ(exec_simple(box, "cat", cat_args, 2, NULL, &result), 0);
	CHECK_STR_EQ(result.stdout_data, "note\n");
	CHECK_STR_EQ(result.stderr_data, "cat: /nope: No such file or directory\n");
	CHECK_INT_EQ(result.exit_code, 1);
	box_exec_result_free(&result);

	CHECK_INT_EQ(box_exec(box, &req, &result), 0);
	CHECK_STR_EQ(result.stdout_data, "hello\n");
	box_exec_result_free(&result);
	req.env = &override;
	req.env_count = 1;
	CHECK_INT_EQ(box_exec(box, &req, &result), 0);
	CHECK_STR_EQ(result.stdout_data, "bonjour\n");
	box_exec_result_free(&result);
	box_close(box, false);
	spec_free(spec);
}

struct chunk_log {
	char text[64];
	int chunks;
};

static void record_chunk(void *opaque, bool is_stderr, const void *data, size_t len)
{
	struct chunk_log *log = opaque;
	size_t used = strlen(log->text);

	log->chunks++;
	snprintf(log->text + used, sizeof(log->text) - used, "%s%.*s", is_stderr ? "E:" : "O:",
		 (int)len, (const char *)data);
}

static void test_mock_chunk_callback(void)
{
	static const char *const args[] = { "2", "oops" };
	struct chunk_log log = { "", 0 };
	struct box_exec_request req = { .program = "mock-exit", .args = args, .arg_count = 2,
					.on_chunk = record_chunk, .chunk_opaque = &log };
	struct box_exec_result result;
	struct box *box = NULL;

	CHECK_INT_EQ(open_mock(&box, NULL), 0);
	if (!box)
		return;
	CHECK_INT_EQ(box_exec(box, &req, &result), 0);
	CHECK_INT_EQ(result.exit_code, 2);
	CHECK_INT_EQ(log.chunks, 1);
	CHECK_STR_EQ(log.text, "E:oops\n");
	box_exec_result_free(&result);
	box_close(box, false);
}

/*
 * With no guest image anywhere, auto and local both refuse with the fix: neither may turn
 * into the scripted mock, whose canned success would pass for a real run.
 */
static void test_mode_resolution_without_image(void)
{
	char home[] = "/tmp/voidbox-test-home-XXXXXX";
	struct box_config cfg = { .mode = BOX_MODE_AUTO, .name = "resolve" };
	char err[TEST_ERR_MAX] = "";
	struct box *box = NULL;
	enum box_mode parsed;

	CHECK(mkdtemp(home) != NULL);
	CHECK_INT_EQ(store_settings_set(&(struct store_settings){ .voidbox_home = home }), 0);
	CHECK_INT_EQ(box_open(&cfg, &box, err, sizeof(err)), -ENOENT);
	CHECK(box == NULL);
	CHECK(strstr(err, "voidbox image build") != NULL);
	CHECK(strstr(err, "sandbox mode auto") != NULL);
	CHECK(strstr(err, "sandbox.mode: mock") != NULL);

	cfg.mode = BOX_MODE_LOCAL;
	CHECK(box_open(&cfg, &box, err, sizeof(err)) < 0);
	CHECK(box == NULL);
	CHECK(strstr(err, "voidbox image build") != NULL);
	CHECK(strstr(err, "sandbox mode local") != NULL);
	rmdir(home);

	CHECK_INT_EQ(box_mode_parse("local", &parsed), 0);
	CHECK_INT_EQ(parsed, BOX_MODE_LOCAL);
	CHECK_INT_EQ(box_mode_parse("vm", &parsed), -EINVAL);
	CHECK_STR_EQ(box_mode_name(BOX_MODE_AUTO), "auto");
}

static void test_report_json(void)
{
	struct run_report report;
	struct run_stage *stage;
	json_t *json, *stages;

	CHECK_INT_EQ(run_report_init(&report, "r", SPEC_KIND_PIPELINE), 0);
	stage = run_report_add_stage(&report, "one");
	stage->input_tokens = 10;
	stage->output_tokens = 5;
	stage->cost_usd = 0.25;
	stage = run_report_add_stage(&report, "two");
	stage->input_tokens = 1;
	stage->cost_usd = 0.5;
	run_stage_set_error(stage, "exit %d", 4);
	run_report_sum_usage(&report);
	json = run_report_to_json(&report);
	CHECK(json != NULL);
	if (json) {
		CHECK_STR_EQ(json_string_value(json_object_get(json, "kind")), "pipeline");
		CHECK(json_is_false(json_object_get(json, "success")));
		CHECK_INT_EQ(json_integer_value(json_object_get(json, "input_tokens")), 11);
		CHECK_INT_EQ(json_integer_value(json_object_get(json, "output_tokens")), 5);
		CHECK(json_real_value(json_object_get(json, "total_cost_usd")) == 0.75);
		stages = json_object_get(json, "stages");
		CHECK_INT_EQ(json_array_size(stages), 2);
		CHECK_STR_EQ(json_string_value(json_object_get(json_array_get(stages, 1), "error")),
			     "exit 4");
		CHECK(json_is_null(json_object_get(json_array_get(stages, 0), "error")));
		json_decref(json);
	}
	run_report_free(&report);
}

int main(int argc, char **argv)
{
	if (argc > 1)
		examples_dir = argv[1];
	log_set_level(LOG_LEVEL_WARN);
	RUN_TEST(test_example_workflow);
	RUN_TEST(test_diamond_runs_middle_level_in_parallel);
	RUN_TEST(test_barrier_fails_across_levels);
	RUN_TEST(test_failing_step_stops_the_run);
	RUN_TEST(test_stdin_from_chain);
	RUN_TEST(test_timeouts);
	RUN_TEST(test_input_and_default_output);
	RUN_TEST(test_unsupported_feature_refused);
	RUN_TEST(test_mock_builtins_and_rules);
	RUN_TEST(test_mock_files_and_env);
	RUN_TEST(test_mock_chunk_callback);
	RUN_TEST(test_mode_resolution_without_image);
	RUN_TEST(test_report_json);
	return harness_finish();
}
