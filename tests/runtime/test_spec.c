/*
 * Spec loader tests: every kind valid and invalid, defaults, exact error positions, unknown-key
 * warnings, cycles, service-mode rules, YAML/JSON equivalence, malformed input, env resolution,
 * the planner and the feature check.
 *
 * Specs are written inline so each test shows the input next to the line and column it expects;
 * the shipped examples are loaded from the directory given as argv[1]. The host environment is
 * a fixed table passed through the lookup callback, so results do not depend on the machine.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/spec.h"
#include "harness.h"

#define TEST_PATH_MAX 512
/* An env map as wide as a spec file allows (about 2.6 MiB of the 4 MiB cap). */
#define TEST_WIDE_KEYS 200000
#define TEST_WIDE_LINE_MAX 32
/*
 * How the loader's work grows is judged from its CPU time on that map and on one this many
 * times narrower, not from a wall-clock limit: the ratio holds on a loaded machine and under
 * valgrind alike. Work of n log n grows about 9-fold over that step; comparing every pair
 * grows 64-fold.
 */
#define TEST_WIDE_NARROWER 8
#define TEST_WIDE_GROWTH_MAX 24.0
#define TEST_NS_PER_SEC 1e9

static const char *examples_dir = "examples";

static const char *const fake_host_env[][2] = {
	{ "ANTHROPIC_API_KEY", "sk-test-secret" },
	{ "HOME", "/home/tester" },
	{ "OLLAMA_BASE_URL", "http://host.example:11434" },
};

static const char *fake_env_lookup(const char *name, void *ctx)
{
	for (size_t i = 0; i < sizeof(fake_host_env) / sizeof(fake_host_env[0]); i++)
		if (strcmp(fake_host_env[i][0], name) == 0)
			return fake_host_env[i][1];
	return NULL;
}

static const struct spec_load_options test_options = { .env_lookup = fake_env_lookup };

static struct spec *load_text(const char *text, const char *name, struct spec_diagnostics *diag)
{
	spec_diagnostics_init(diag);
	return spec_parse_buffer(text, strlen(text), name, &test_options, diag);
}

/* The first finding of a severity whose message contains needle, or NULL. */
static const struct spec_diagnostic *find_diag(const struct spec_diagnostics *diag,
					       enum spec_severity severity, const char *needle)
{
	for (size_t i = 0; i < diag->count; i++)
		if (diag->items[i].severity == severity && strstr(diag->items[i].message, needle))
			return &diag->items[i];
	return NULL;
}

static void dump_diag(const struct spec_diagnostics *diag)
{
	spec_diagnostics_print(diag, stderr);
}

/* Expects exactly one load failure with an error at line:column whose message has needle. */
static const struct spec_diagnostic *expect_error_at(const char *text, const char *needle,
						     unsigned line, unsigned column,
						     struct spec_diagnostics *diag)
{
	struct spec *spec = load_text(text, "t.yaml", diag);
	const struct spec_diagnostic *item = find_diag(diag, SPEC_SEVERITY_ERROR, needle);

	CHECK(spec == NULL);
	CHECK(item != NULL);
	if (!item) {
		fprintf(stderr, "  wanted an error containing '%s', got:\n", needle);
		dump_diag(diag);
		spec_free(spec);
		return NULL;
	}
	CHECK_INT_EQ(item->pos.line, line);
	CHECK_INT_EQ(item->pos.column, column);
	spec_free(spec);
	return item;
}

static struct spec *load_example(const char *file, struct spec_diagnostics *diag)
{
	char path[TEST_PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", examples_dir, file);
	spec_diagnostics_init(diag);
	return spec_load_file_with(path, &test_options, diag);
}

/* ---- examples and defaults ------------------------------------------------------------ */

static void test_example_workflow(void)
{
	struct spec_diagnostics diag;
	struct spec *spec = load_example("workflow.yaml", &diag);
	struct spec_workflow_plan plan;

	CHECK(spec != NULL);
	CHECK_INT_EQ(diag.count, 0);
	dump_diag(&diag);
	if (!spec)
		goto out;
	CHECK_INT_EQ(spec->kind, SPEC_KIND_WORKFLOW);
	/* the examples run in real VMs unless the run asks for the mock */
	CHECK_INT_EQ(spec->sandbox.mode, SPEC_SANDBOX_MODE_AUTO);
	CHECK_INT_EQ(spec->workflow.step_count, 2);
	CHECK_STR_EQ(spec->workflow.steps[0].program, "echo");
	CHECK_STR_EQ(spec->workflow.steps[0].args[0], "hello from workflow");
	CHECK_STR_EQ(spec->workflow.steps[1].stdin_from, "fetch");
	CHECK_INT_EQ(spec->workflow.steps[1].arg_count, 2);
	CHECK_STR_EQ(spec->workflow.output_step, "transform");
	CHECK_INT_EQ(spec_workflow_plan(&spec->workflow, &plan, NULL), 0);
	CHECK_INT_EQ(plan.level_count, 2);
	if (plan.level_count == 2) {
		CHECK_INT_EQ(plan.levels[0].count, 1);
		CHECK_INT_EQ(plan.levels[0].steps[0], 0);
		CHECK_INT_EQ(plan.levels[1].steps[0], 1);
	}
	spec_workflow_plan_free(&plan);
	CHECK_INT_EQ(spec_features_required(spec), 0);
out:
	spec_free(spec);
	spec_diagnostics_free(&diag);
}

static void test_example_pipeline_fanout(void)
{
	struct spec_diagnostics diag;
	struct spec *spec = load_example("pipeline-fanout.yaml", &diag);

	CHECK(spec != NULL);
	CHECK_INT_EQ(diag.count, 0);
	dump_diag(&diag);
	if (!spec)
		goto out;
	CHECK_INT_EQ(spec->kind, SPEC_KIND_PIPELINE);
	CHECK_INT_EQ(spec->pipeline.box_count, 4);
	CHECK_INT_EQ(spec->pipeline.stage_count, 2);
	CHECK_INT_EQ(spec->pipeline.stages[0].type, SPEC_STAGE_FAN_OUT);
	CHECK_INT_EQ(spec->pipeline.stages[0].box_count, 3);
	CHECK_INT_EQ(spec->pipeline.stages[0].box_indices[2], 2);
	CHECK_INT_EQ(spec->pipeline.stages[1].type, SPEC_STAGE_BOX);
	CHECK_INT_EQ(spec->pipeline.stages[1].box_indices[0], 3);
	CHECK_INT_EQ(spec->pipeline.boxes[0].skills[0].type, SPEC_SKILL_AGENT);
	CHECK_STR_EQ(spec->pipeline.boxes[0].skills[0].value, "claude-code");
	CHECK_INT_EQ(spec->pipeline.boxes[1].timeout_secs, 300);
	CHECK_INT_EQ(spec->sandbox.memory_mb, 2048);
	CHECK_INT_EQ(spec->sandbox.mode, SPEC_SANDBOX_MODE_AUTO);
	CHECK(spec->sandbox.network);
out:
	spec_free(spec);
	spec_diagnostics_free(&diag);
}

static void test_example_agent_and_sandbox(void)
{
	struct spec_diagnostics diag;
	struct spec *spec = load_example("agent.yaml", &diag);

	CHECK(spec != NULL);
	CHECK_INT_EQ(diag.count, 0);
	dump_diag(&diag);
	if (spec) {
		CHECK_INT_EQ(spec->kind, SPEC_KIND_AGENT);
		CHECK_INT_EQ(spec->llm.provider, SPEC_LLM_PROVIDER_CLAUDE);
		CHECK_INT_EQ(spec->sandbox.env.count, 2);
		CHECK_STR_EQ(spec->sandbox.env.vars[0].value, "sk-test-secret");
		CHECK(spec->sandbox.env.vars[0].copy_from_host);
		CHECK_INT_EQ(spec->agent.timeout_secs, 120);
		CHECK_INT_EQ(spec->sandbox.mode, SPEC_SANDBOX_MODE_AUTO);
		CHECK_INT_EQ(spec->sandbox.memory_mb, 2048);
		CHECK(spec->sandbox.network);
	}
	spec_free(spec);
	spec_diagnostics_free(&diag);

	spec = load_example("sandbox.yaml", &diag);
	CHECK(spec != NULL);
	CHECK_INT_EQ(diag.count, 0);
	dump_diag(&diag);
	if (spec) {
		CHECK_INT_EQ(spec->kind, SPEC_KIND_SANDBOX);
		CHECK_INT_EQ(spec->sandbox.mode, SPEC_SANDBOX_MODE_LOCAL);
		CHECK_INT_EQ(spec->sandbox.vcpus, 2);
	}
	spec_free(spec);
	spec_diagnostics_free(&diag);
}

static void test_defaults_applied(void)
{
	struct spec_diagnostics diag;
	struct spec *spec = load_text("kind: agent\nname: d\nagent:\n  prompt: hi\n", "d.yaml",
				      &diag);

	CHECK(spec != NULL);
	CHECK_INT_EQ(diag.count, 0);
	if (!spec)
		goto out;
	CHECK_STR_EQ(spec->api_version, "v1");
	CHECK_INT_EQ(spec->sandbox.mode, SPEC_SANDBOX_MODE_AUTO);
	CHECK_INT_EQ(spec->sandbox.memory_mb, 1024);
	CHECK_INT_EQ(spec->sandbox.vcpus, 1);
	CHECK(!spec->sandbox.network);
	CHECK(spec->sandbox.kernel == NULL);
	CHECK(spec->sandbox.guest_image == NULL);
	CHECK_INT_EQ(spec->sandbox.env.count, 0);
	CHECK_INT_EQ(spec->sandbox.mount_count, 0);
	CHECK_STR_EQ(spec->agent.output_file, "/workspace/output.json");
	CHECK(!spec->agent.has_output_file);
	CHECK(!spec->agent.has_timeout_secs);
	CHECK_INT_EQ(spec->agent.mode, SPEC_AGENT_MODE_TASK);
	CHECK(!spec->has_llm);
out:
	spec_free(spec);
	spec_diagnostics_free(&diag);
}

static void test_defaults_nested(void)
{
	struct spec_diagnostics diag;
	struct spec *spec = load_text(
		"kind: pipeline\nname: p\nllm: {provider: ollama}\n"
		"pipeline:\n  boxes:\n    - name: a\n      prompt: x\n"
		"      outputs: [{name: report}]\n    - name: b\n      prompt: y\n"
		"      inputs: [{from: a}]\n"
		"      skills: [{image: 'ghcr.io/x/y:1', mount: /skills/y}]\n",
		"n.yaml", &diag);

	CHECK(spec != NULL);
	dump_diag(&diag);
	if (!spec)
		goto out;
	CHECK_STR_EQ(spec->llm.model, SPEC_DEFAULT_OLLAMA_MODEL);
	CHECK_STR_EQ(spec->pipeline.boxes[0].outputs[0].guest, "/workspace/output");
	CHECK_STR_EQ(spec->pipeline.boxes[1].inputs[0].guest, "/workspace/input");
	CHECK(spec->pipeline.boxes[1].skills[0].readonly);
	CHECK_INT_EQ(spec->pipeline.boxes[1].skills[0].type, SPEC_SKILL_OCI);
	/* Without stages, each box is its own stage in written order. */
	CHECK_INT_EQ(spec->pipeline.stage_count, 2);
	CHECK_STR_EQ(spec->pipeline.stages[1].box_names[0], "b");
	CHECK_INT_EQ(spec->pipeline.stages[1].box_indices[0], 1);
out:
	spec_free(spec);
	spec_diagnostics_free(&diag);
}

/* ---- per-kind invalid specs ----------------------------------------------------------- */

static void test_invalid_kind(void)
{
	struct spec_diagnostics diag;
	const struct spec_diagnostic *item =
		expect_error_at("api_version: v1\nkind: workfow\nname: x\n", "workfow", 2, 7, &diag);

	if (item)
		CHECK_STR_EQ(item->hint, "did you mean 'workflow'?");
	spec_diagnostics_free(&diag);
	expect_error_at("name: x\n", "needs 'kind'", 1, 1, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: agent\nagent: {prompt: p}\n", "needs 'name'", 1, 1, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("api_version: v2\nkind: agent\nname: x\nagent: {prompt: p}\n",
			"api_version 'v2'", 1, 14, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("- kind: agent\n", "must be a mapping", 1, 1, &diag);
	spec_diagnostics_free(&diag);
}

static void test_invalid_agent(void)
{
	struct spec_diagnostics diag;

	expect_error_at("kind: agent\nname: a\nagent:\n  timeout_secs: 5\n", "needs 'prompt'", 4,
			3, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: agent\nname: a\n", "needs its 'agent' block", 1, 7, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: agent\nname: a\nagent:\n  prompt: p\n  mode: servce\n",
			"servce", 5, 9, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: agent\nname: a\nagent:\n  prompt: p\n  output_file: out.json\n",
			"absolute path", 5, 16, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: agent\nname: a\nllm:\n  provider: codex\n  credential_proxy: true\n"
			"agent: {prompt: p}\n",
			"credential_proxy works only", 5, 21, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: agent\nname: a\nagent:\n  prompt: p\n  skills: [\"web:search\"]\n",
			"not a known skill", 5, 12, &diag);
	spec_diagnostics_free(&diag);
}

static void test_invalid_pipeline(void)
{
	struct spec_diagnostics diag;
	const struct spec_diagnostic *item;

	expect_error_at("kind: pipeline\nname: p\npipeline:\n  boxes: []\n",
			"at least one box", 4, 3, &diag);
	spec_diagnostics_free(&diag);
	item = expect_error_at("kind: pipeline\nname: p\npipeline:\n  boxes:\n"
			       "    - {name: writer, prompt: w}\n  stages:\n"
			       "    - {type: box, name: writter}\n",
			       "'writter', which does not exist", 7, 25, &diag);
	if (item)
		CHECK_STR_EQ(item->hint, "did you mean 'writer'?");
	spec_diagnostics_free(&diag);
	expect_error_at("kind: pipeline\nname: p\npipeline:\n  boxes:\n"
			"    - {name: a, prompt: w}\n    - {name: a, prompt: v}\n",
			"box name 'a' is already used at line 5", 6, 7, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: pipeline\nname: p\npipeline:\n  boxes:\n"
			"    - {name: a, prompt: w}\n  stages:\n    - type: fan_out\n"
			"      boxes: []\n",
			"fan_out stage needs at least one box", 7, 7, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: pipeline\nname: p\npipeline:\n  boxes:\n"
			"    - name: a\n      prompt: w\n      inputs: [{from: nobody}]\n",
			"'nobody'", 7, 16, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: pipeline\nname: p\npipeline:\n  boxes:\n    - name: a\n",
			"needs 'prompt'", 5, 7, &diag);
	spec_diagnostics_free(&diag);
}

static void test_unused_box_warning(void)
{
	struct spec_diagnostics diag;
	struct spec *spec = load_text("kind: pipeline\nname: p\npipeline:\n  boxes:\n"
				      "    - {name: a, prompt: x}\n    - {name: b, prompt: y}\n"
				      "  stages: [{name: a}]\n",
				      "t.yaml", &diag);
	const struct spec_diagnostic *item = find_diag(&diag, SPEC_SEVERITY_WARNING, "'b' is not");

	CHECK(spec != NULL);
	CHECK(item != NULL);
	if (item) {
		CHECK_INT_EQ(item->pos.line, 6);
		CHECK_INT_EQ(item->pos.column, 7);
	}
	if (spec)
		CHECK_INT_EQ(spec->pipeline.stages[0].type, SPEC_STAGE_BOX);
	spec_free(spec);
	spec_diagnostics_free(&diag);
}

static void test_invalid_workflow(void)
{
	struct spec_diagnostics diag;
	const struct spec_diagnostic *item;

	expect_error_at("kind: workflow\nname: w\nworkflow:\n  steps: []\n",
			"at least one step", 4, 3, &diag);
	spec_diagnostics_free(&diag);
	item = expect_error_at("kind: workflow\nname: w\nworkflow:\n  steps:\n"
			       "    - name: fetch\n      run: {program: echo}\n"
			       "    - name: use\n      depends_on: [fecth]\n"
			       "      run: {program: cat}\n",
			       "depends_on names step 'fecth'", 8, 20, &diag);
	if (item)
		CHECK_STR_EQ(item->hint, "did you mean 'fetch'?");
	spec_diagnostics_free(&diag);
	expect_error_at("kind: workflow\nname: w\nworkflow:\n  steps:\n"
			"    - name: a\n      run: {program: cat, stdin_from: ghost}\n",
			"stdin_from names step 'ghost'", 6, 39, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: workflow\nname: w\nworkflow:\n  steps:\n"
			"    - name: a\n      run: {program: cat}\n  output_step: b\n",
			"output_step names step 'b'", 7, 16, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: workflow\nname: w\nworkflow:\n  steps:\n"
			"    - name: a\n      run: {program: cat}\n"
			"    - name: a\n      run: {program: ls}\n",
			"step name 'a' is already used at line 5", 7, 7, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: workflow\nname: w\nworkflow:\n  steps:\n"
			"    - name: a\n      depends_on: a\n      run: {program: cat}\n",
			"names the step itself", 6, 19, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: workflow\nname: w\nworkflow:\n  steps:\n    - name: a\n",
			"needs 'run'", 5, 7, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: workflow\nname: w\nworkflow:\n  steps:\n    - name: a\n"
			"      run: {args: [x]}\n",
			"needs 'program'", 6, 12, &diag);
	spec_diagnostics_free(&diag);
}

static void test_invalid_sandbox_kind(void)
{
	struct spec_diagnostics diag;

	expect_error_at("kind: sandbox\nname: s\nworkflow:\n  steps: []\n",
			"'workflow' block does not belong in kind: sandbox", 4, 3, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: sandbox\nname: s\nsandbox:\n  mode: cloud\n", "'cloud'", 4, 9,
			&diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: sandbox\nname: s\nsandbox:\n  mounts:\n    - host: /tmp\n"
			"      guest: data\n",
			"absolute path", 6, 14, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: sandbox\nname: s\nsandbox:\n  mounts:\n    - guest: /data\n",
			"needs 'host'", 5, 7, &diag);
	spec_diagnostics_free(&diag);
}

static void test_other_kind_block_is_a_warning(void)
{
	struct spec_diagnostics diag;
	struct spec *spec = load_text("kind: agent\nname: a\nagent: {prompt: p}\n"
				      "workflow:\n  steps: [{name: a, run: {program: ls}}]\n",
				      "t.yaml", &diag);
	const struct spec_diagnostic *item = find_diag(&diag, SPEC_SEVERITY_WARNING, "ignored");

	CHECK(spec != NULL);
	CHECK(item != NULL);
	if (item)
		CHECK_INT_EQ(item->pos.line, 5);
	spec_free(spec);
	spec_diagnostics_free(&diag);
}

/* ---- numbers, positions, unknown keys --------------------------------------------------- */

static void test_numbers_positive(void)
{
	struct spec_diagnostics diag;

	expect_error_at("kind: sandbox\nname: s\nsandbox:\n  memory_mb: -5\n", "must be positive",
			4, 14, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: sandbox\nname: s\nsandbox:\n  vcpus: 0\n", "must be positive", 4,
			10, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: sandbox\nname: s\nsandbox:\n  vcpus: 1000\n", "at most 64", 4, 10,
			&diag);
	spec_diagnostics_free(&diag);
	/* the VMM's own limit: a spec that validates also boots */
	expect_error_at("kind: sandbox\nname: s\nsandbox:\n  vcpus: 100\n", "at most 64", 4, 10,
			&diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: sandbox\nname: s\nsandbox:\n  vcpus: -99999999999999999999\n",
			"must be positive", 4, 10, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: sandbox\nname: s\nsandbox:\n  vcpus: 99999999999999999999\n",
			"at most 64", 4, 10, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: sandbox\nname: s\nsandbox:\n  memory_mb: lots\n",
			"must be a whole number", 4, 14, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: sandbox\nname: s\nsandbox:\n  memory_mb: \"512\"\n",
			"must be a whole number", 4, 14, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: sandbox\nname: s\nsandbox:\n  network: yes\n", "true or false", 4,
			12, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: workflow\nname: w\nworkflow:\n  steps:\n    - name: a\n"
			"      timeout_secs: 0\n      run: {program: ls}\n",
			"timeout_secs must be positive", 6, 21, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: sandbox\nname: s\nsandbox:\n  env: [A, B]\n", "must be a mapping", 4,
			8, &diag);
	spec_diagnostics_free(&diag);
}

static void test_unknown_key_warning(void)
{
	struct spec_diagnostics diag;
	struct spec *spec = load_text("kind: sandbox\nname: s\nsandbox:\n  memroy_mb: 64\n"
				      "  flavour: big\n",
				      "t.yaml", &diag);
	const struct spec_diagnostic *typo = find_diag(&diag, SPEC_SEVERITY_WARNING, "'memroy_mb'");
	const struct spec_diagnostic *other = find_diag(&diag, SPEC_SEVERITY_WARNING, "'flavour'");

	CHECK(spec != NULL);
	CHECK_INT_EQ(diag.error_count, 0);
	CHECK_INT_EQ(diag.warning_count, 2);
	CHECK(typo != NULL);
	if (typo) {
		CHECK_INT_EQ(typo->pos.line, 4);
		CHECK_INT_EQ(typo->pos.column, 3);
		CHECK_STR_EQ(typo->hint, "did you mean 'memory_mb'?");
		CHECK(strstr(typo->message, "in sandbox") != NULL);
	}
	CHECK(other != NULL);
	if (other)
		CHECK(other->hint && strstr(other->hint, "remove it") != NULL);
	if (spec)
		CHECK_INT_EQ(spec->sandbox.memory_mb, 1024);
	spec_free(spec);
	spec_diagnostics_free(&diag);
}

static void test_duplicate_key(void)
{
	struct spec_diagnostics diag;

	expect_error_at("kind: sandbox\nname: s\nsandbox:\n  vcpus: 1\n  vcpus: 2\n",
			"appears twice (first at line 4)", 5, 3, &diag);
	spec_diagnostics_free(&diag);
}

static void test_all_errors_reported_at_once(void)
{
	struct spec_diagnostics diag;
	struct spec *spec = load_text("kind: sandbox\nname: s\nsandbox:\n  vcpus: 0\n"
				      "  memory_mb: x\n  mode: nope\n",
				      "t.yaml", &diag);

	CHECK(spec == NULL);
	CHECK_INT_EQ(diag.error_count, 3);
	spec_free(spec);
	spec_diagnostics_free(&diag);
}

/* ---- cycles and the planner --------------------------------------------------------------- */

static void test_cycle_named(void)
{
	struct spec_diagnostics diag;
	const struct spec_diagnostic *item = expect_error_at(
		"kind: workflow\nname: w\nworkflow:\n  steps:\n"
		"    - name: a\n      depends_on: [c]\n      run: {program: ls}\n"
		"    - name: b\n      depends_on: [a]\n      run: {program: ls}\n"
		"    - name: c\n      depends_on: [b]\n      run: {program: ls}\n"
		"    - name: free\n      run: {program: ls}\n",
		"cycle", 5, 7, &diag);

	if (item)
		CHECK(strstr(item->message, "a -> c -> b -> a") != NULL);
	spec_diagnostics_free(&diag);
	/* stdin_from is a dependency too. */
	item = expect_error_at("kind: workflow\nname: w\nworkflow:\n  steps:\n"
			       "    - name: x\n      run: {program: cat, stdin_from: y}\n"
			       "    - name: y\n      depends_on: [x]\n      run: {program: ls}\n",
			       "cycle", 5, 7, &diag);
	if (item)
		CHECK(strstr(item->message, "x -> y -> x") != NULL);
	spec_diagnostics_free(&diag);
}

static void test_planner_levels(void)
{
	struct spec_diagnostics diag;
	struct spec *spec = load_text(
		"kind: workflow\nname: w\nworkflow:\n  steps:\n"
		"    - {name: d, depends_on: [b, c], run: {program: ls}}\n"
		"    - {name: b, depends_on: a, run: {program: ls}}\n"
		"    - {name: a, run: {program: ls}}\n"
		"    - {name: c, depends_on: [a], run: {program: ls}}\n"
		"    - {name: e, run: {program: ls}}\n",
		"t.yaml", &diag);
	struct spec_workflow_plan plan;

	CHECK(spec != NULL);
	if (!spec)
		goto out;
	CHECK_INT_EQ(spec_workflow_plan(&spec->workflow, &plan, NULL), 0);
	CHECK_INT_EQ(plan.level_count, 3);
	if (plan.level_count == 3) {
		CHECK_INT_EQ(plan.levels[0].count, 2); /* a, e */
		CHECK_INT_EQ(plan.levels[0].steps[0], 2);
		CHECK_INT_EQ(plan.levels[0].steps[1], 4);
		CHECK_INT_EQ(plan.levels[1].count, 2); /* b, c */
		CHECK_INT_EQ(plan.levels[1].steps[0], 1);
		CHECK_INT_EQ(plan.levels[1].steps[1], 3);
		CHECK_INT_EQ(plan.levels[2].count, 1); /* d */
		CHECK_INT_EQ(plan.levels[2].steps[0], 0);
	}
	spec_workflow_plan_free(&plan);
out:
	spec_free(spec);
	spec_diagnostics_free(&diag);
}

static void test_planner_direct(void)
{
	char *names[] = { "a", "b" };
	char *dep_b[] = { "b" };
	char *dep_a[] = { "a" };
	char *dep_ghost[] = { "ghost" };
	struct spec_pos pos[1] = { { 1, 1 } };
	struct spec_step steps[2] = {
		{ .name = names[0], .depends_on = dep_b, .depends_count = 1, .depends_pos = pos },
		{ .name = names[1], .depends_on = dep_a, .depends_count = 1, .depends_pos = pos },
	};
	struct spec_workflow workflow = { .steps = steps, .step_count = 2 };
	struct spec_workflow_plan plan;
	char *cycle = NULL;

	CHECK_INT_EQ(spec_workflow_plan(&workflow, &plan, &cycle), -ELOOP);
	CHECK_STR_EQ(cycle, "a -> b -> a");
	CHECK_INT_EQ(plan.level_count, 0);
	free(cycle);
	steps[0].depends_on = dep_ghost;
	CHECK_INT_EQ(spec_workflow_plan(&workflow, &plan, NULL), -ENOENT);
	CHECK_INT_EQ(spec_workflow_find_step(&workflow, "b"), 1);
	CHECK_INT_EQ(spec_workflow_find_step(&workflow, "zz"), -1);
}

/* ---- mode rules -------------------------------------------------------------------------- */

static void test_service_mode_rules(void)
{
	struct spec_diagnostics diag;
	struct spec *spec;

	expect_error_at("kind: agent\nname: a\nagent:\n  prompt: p\n  mode: service\n"
			"  output_file: /workspace/o.json\n  timeout_secs: 30\n",
			"cannot be combined with mode: service", 7, 17, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: agent\nname: a\nagent:\n  prompt: p\n  mode: service\n",
			"needs an explicit agent.output_file", 5, 9, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: agent\nname: a\nllm: {credential_proxy: true}\nagent:\n"
			"  prompt: p\n  mode: service\n  output_file: /workspace/o.json\n",
			"credential_proxy cannot be combined", 3, 25, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: agent\nname: a\nagent:\n  mode: interactive\n  timeout_secs: 9\n",
			"mode: interactive", 5, 17, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: workflow\nname: w\nworkflow:\n  steps:\n    - name: g\n"
			"      mode: service\n      timeout_secs: 10\n      run: {program: ls}\n",
			"exclude each other", 7, 21, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: workflow\nname: w\nworkflow:\n  steps:\n    - name: g\n"
			"      output_file: /workspace/o.json\n      run: {program: ls}\n",
			"only a service step publishes", 6, 20, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: workflow\nname: w\nworkflow:\n  steps:\n    - name: g\n"
			"      mode: service\n      output_file: o.json\n      run: {program: ls}\n",
			"relative output_file", 7, 20, &diag);
	spec_diagnostics_free(&diag);

	spec = load_text("kind: agent\nname: a\nagent:\n  mode: interactive\n", "t.yaml", &diag);
	CHECK(spec != NULL); /* interactive needs no prompt */
	spec_free(spec);
	spec_diagnostics_free(&diag);
	spec = load_text("kind: agent\nname: a\nagent:\n  prompt: p\n  mode: service\n"
			 "  output_file: /workspace/o.json\n",
			 "t.yaml", &diag);
	CHECK(spec != NULL);
	if (spec) {
		CHECK_INT_EQ(spec->agent.mode, SPEC_AGENT_MODE_SERVICE);
		CHECK(spec_features_required(spec) & SPEC_FEATURE_BIT(SPEC_FEATURE_SERVICE_MODE));
	}
	spec_free(spec);
	spec_diagnostics_free(&diag);
	spec = load_text("kind: workflow\nname: w\nworkflow:\n  steps:\n    - name: g\n"
			 "      mode: service\n      output_file: /workspace/o.json\n"
			 "      run: {program: ls}\n",
			 "t.yaml", &diag);
	CHECK(spec != NULL);
	if (spec)
		CHECK_STR_EQ(spec->workflow.steps[0].output_file, "/workspace/o.json");
	spec_free(spec);
	spec_diagnostics_free(&diag);
}

/* ---- formats ------------------------------------------------------------------------------ */

static const char workflow_json[] =
	"{\n"
	"  \"api_version\": \"v1\",\n"
	"  \"kind\": \"workflow\",\n"
	"  \"name\": \"hello-workflow\",\n"
	"  \"sandbox\": {\"memory_mb\": 512},\n"
	"  \"workflow\": {\n"
	"    \"steps\": [\n"
	"      {\"name\": \"fetch\", \"run\": {\"program\": \"echo\", \"args\": [\"hello from "
	"workflow\"]}},\n"
	"      {\"name\": \"transform\", \"depends_on\": [\"fetch\"],\n"
	"       \"run\": {\"program\": \"tr\", \"args\": [\"a-z\", \"A-Z\"], \"stdin_from\": "
	"\"fetch\"}}\n"
	"    ],\n"
	"    \"output_step\": \"transform\"\n"
	"  }\n"
	"}\n";

static void test_yaml_and_json_agree(void)
{
	struct spec_diagnostics yaml_diag, json_diag;
	struct spec *from_yaml = load_example("workflow.yaml", &yaml_diag);
	struct spec *from_json = load_text(workflow_json, "workflow.json", &json_diag);
	json_t *a, *b;

	CHECK(from_yaml != NULL);
	CHECK(from_json != NULL);
	dump_diag(&json_diag);
	if (!from_yaml || !from_json)
		goto out;
	a = spec_to_json(from_yaml);
	b = spec_to_json(from_json);
	CHECK(a != NULL && b != NULL);
	CHECK(json_equal(a, b));
	json_decref(a);
	json_decref(b);
	CHECK_INT_EQ(from_json->workflow.steps[1].pos.line, 9);
	CHECK_INT_EQ(from_json->workflow.steps[1].pos.column, 7);
	CHECK_INT_EQ(from_json->workflow.steps[1].stdin_from_pos.line, 10);
out:
	spec_free(from_yaml);
	spec_free(from_json);
	spec_diagnostics_free(&yaml_diag);
	spec_diagnostics_free(&json_diag);
}

static void test_json_errors_and_sniffing(void)
{
	struct spec_diagnostics diag;
	struct spec *spec;

	/* A JSON syntax error points where jansson stopped. */
	spec = load_text("{\n  \"kind\": \"agent\",\n  \"name\": \"x\"\n  \"agent\": {}\n}\n",
			 "bad.json", &diag);
	CHECK(spec == NULL);
	CHECK_INT_EQ(diag.error_count, 1);
	if (diag.count) {
		CHECK(strstr(diag.items[0].message, "JSON syntax error") != NULL);
		CHECK_INT_EQ(diag.items[0].pos.line, 4);
	}
	spec_diagnostics_free(&diag);
	/* A JSON schema error still has the node's position. */
	expect_error_at("{\"kind\": \"sandbox\", \"name\": \"s\",\n \"sandbox\": {\"vcpus\": -1}}",
			"must be positive", 2, 23, &diag);
	spec_diagnostics_free(&diag);
	/* No extension: content decides. */
	spec = load_text("{\"kind\": \"sandbox\", \"name\": \"s\"}", "spec", &diag);
	CHECK(spec != NULL);
	spec_free(spec);
	spec_diagnostics_free(&diag);
	/* JSON that libyaml refuses (escaped surrogate pair) still loads, without positions. */
	spec = load_text("{\"kind\": \"sandbox\", \"name\": \"\\ud83d\\ude00\"}", "e.json", &diag);
	CHECK(spec != NULL);
	if (spec)
		CHECK_STR_EQ(spec->name, "\xf0\x9f\x98\x80");
	spec_free(spec);
	spec_diagnostics_free(&diag);
}

static void test_malformed_yaml(void)
{
	struct spec_diagnostics diag;
	const struct spec_diagnostic *item;

	item = expect_error_at("kind: sandbox\nname: s\nsandbox:\n\tvcpus: 2\n", "YAML syntax error",
			       4, 1, &diag);
	if (item)
		CHECK(item->hint && strstr(item->hint, "tab") != NULL);
	spec_diagnostics_free(&diag);
	item = expect_error_at("kind: sandbox\nname: \"unclosed\nsandbox: {}\n",
			       "YAML syntax error", 4, 1, &diag);
	if (item) {
		CHECK(strstr(item->message, "line 2 column 7") != NULL);
		CHECK(item->hint && strstr(item->hint, "quote") != NULL);
	}
	spec_diagnostics_free(&diag);
	expect_error_at("kind: [sandbox\nname: s\n", "YAML syntax error", 2, 5, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("", "the spec is empty", 1, 1, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("base: &b {vcpus: 1}\nsandbox: *b\nkind: sandbox\nname: s\n", "aliases", 2,
			10, &diag);
	spec_diagnostics_free(&diag);
}

/* ---- env, features, output ---------------------------------------------------------------- */

static void test_env_resolution(void)
{
	struct spec_diagnostics diag;
	struct spec *spec = load_text("kind: sandbox\nname: s\nsandbox:\n  env:\n"
				      "    ANTHROPIC_API_KEY: \"\"\n    MISSING_ONE: \"\"\n"
				      "    PLAIN: value\n    OLLAMA_BASE_URL: http://spec:1\n"
				      "    NULLISH:\n",
				      "t.yaml", &diag);
	const struct spec_diagnostic *item = find_diag(&diag, SPEC_SEVERITY_WARNING, "MISSING_ONE");

	CHECK(spec != NULL);
	CHECK(item != NULL);
	if (item)
		CHECK_INT_EQ(item->pos.line, 6);
	if (!spec)
		goto out;
	CHECK_INT_EQ(spec->sandbox.env.count, 3);
	CHECK_STR_EQ(spec->sandbox.env.vars[0].name, "ANTHROPIC_API_KEY");
	CHECK_STR_EQ(spec->sandbox.env.vars[0].value, "sk-test-secret");
	CHECK_STR_EQ(spec->sandbox.env.vars[1].name, "PLAIN");
	CHECK_STR_EQ(spec->sandbox.env.vars[1].value, "value");
	CHECK(!spec->sandbox.env.vars[1].copy_from_host);
	CHECK_STR_EQ(spec->sandbox.env.vars[2].value, "http://host.example:11434");
out:
	spec_free(spec);
	spec_diagnostics_free(&diag);
}

static void test_env_resolve_direct(void)
{
	struct spec_env_var vars[2] = {
		{ .name = strdup("HOME"), .value = strdup(""), .copy_from_host = true },
		{ .name = strdup("NOPE"), .value = strdup(""), .copy_from_host = true },
	};
	struct spec_env env = { .vars = malloc(sizeof(vars)), .count = 2 };
	struct spec_diagnostics diag;

	spec_diagnostics_init(&diag);
	memcpy(env.vars, vars, sizeof(vars));
	CHECK_INT_EQ(spec_env_resolve(&env, fake_env_lookup, NULL, "x", &diag), 0);
	CHECK_INT_EQ(env.count, 1);
	CHECK_STR_EQ(env.vars[0].value, "/home/tester");
	CHECK_INT_EQ(diag.warning_count, 1);
	free(env.vars[0].name);
	free(env.vars[0].value);
	free(env.vars);
	spec_diagnostics_free(&diag);
}

static void test_features_not_supported(void)
{
	struct spec_diagnostics diag;
	struct spec *spec = load_text("kind: sandbox\nname: s\nsandbox:\n  network: true\n"
				      "  mounts:\n    - host: ./data\n      guest: /data\n"
				      "      mode: rw\n  snapshot: abc123\n",
				      "t.yaml", &diag);
	uint32_t all = SPEC_FEATURE_BIT(SPEC_FEATURE_COUNT) - 1;
	const struct spec_diagnostic *item;

	CHECK(spec != NULL);
	if (!spec)
		goto out;
	CHECK_INT_EQ(spec->sandbox.mounts[0].mode, SPEC_MOUNT_MODE_RW);
	CHECK_INT_EQ(spec_features_required(spec),
		     SPEC_FEATURE_BIT(SPEC_FEATURE_NETWORK) | SPEC_FEATURE_BIT(SPEC_FEATURE_MOUNTS) |
			     SPEC_FEATURE_BIT(SPEC_FEATURE_SNAPSHOT));
	CHECK_INT_EQ(spec_check_supported(spec, all, &diag), 0);
	CHECK_INT_EQ(diag.error_count, 0);
	CHECK_INT_EQ(spec_check_supported(spec, SPEC_FEATURE_BIT(SPEC_FEATURE_NETWORK), &diag), 2);
	item = find_diag(&diag, SPEC_SEVERITY_ERROR, "mounts is not supported yet");
	CHECK(item != NULL);
	if (item) {
		CHECK_INT_EQ(item->pos.line, 6);
		CHECK_INT_EQ(item->pos.column, 5);
	}
	item = find_diag(&diag, SPEC_SEVERITY_ERROR, "snapshot is not supported yet");
	CHECK(item != NULL);
	if (item)
		CHECK_INT_EQ(item->pos.line, 9);
out:
	spec_free(spec);
	spec_diagnostics_free(&diag);
}

static void test_diagnostics_output(void)
{
	struct spec_diagnostics diag;
	struct spec *spec = load_text("kind: sandbox\nname: s\nsandbox:\n  vcpus: 0\n  colour: red\n",
				      "box.yaml", &diag);
	char *text = NULL;
	size_t length = 0;
	FILE *stream = open_memstream(&text, &length);
	json_t *array, *first;

	CHECK(spec == NULL);
	CHECK(stream != NULL);
	if (!stream)
		goto out;
	spec_diagnostics_print(&diag, stream);
	fclose(stream);
	CHECK(strstr(text, "box.yaml:4:10: error: sandbox.vcpus must be positive, not 0\n"
			   "  hint: ") != NULL);
	CHECK(strstr(text, "box.yaml:5:3: warning: unknown key 'colour' in sandbox is ignored") !=
	      NULL);
	free(text);
	array = spec_diagnostics_to_json(&diag);
	CHECK_INT_EQ(json_array_size(array), 2);
	first = json_array_get(array, 0);
	/* Findings come out in source order, whatever order the checks ran in. */
	CHECK_STR_EQ(json_string_value(json_object_get(first, "severity")), "error");
	CHECK_INT_EQ(json_integer_value(json_object_get(first, "line")), 4);
	CHECK_INT_EQ(json_integer_value(json_object_get(first, "column")), 10);
	CHECK(json_is_string(json_object_get(first, "hint")));
	CHECK_STR_EQ(json_string_value(json_object_get(first, "file")), "box.yaml");
	json_decref(array);
out:
	spec_free(spec);
	spec_diagnostics_free(&diag);
}

static void test_to_json_redacts_host_values(void)
{
	struct spec_diagnostics diag;
	struct spec *spec = load_example("agent.yaml", &diag);
	json_t *json = spec ? spec_to_json(spec) : NULL;
	json_t *env = json_object_get(json_object_get(json, "sandbox"), "env");
	char *text = json ? json_dumps(json, 0) : NULL;

	CHECK(json != NULL);
	CHECK(text && !strstr(text, "sk-test-secret"));
	CHECK(json_is_true(json_object_get(json_object_get(env, "ANTHROPIC_API_KEY"), "from_host")));
	CHECK_STR_EQ(json_string_value(json_object_get(env, "GREETING")), "hello");
	CHECK_INT_EQ(json_integer_value(json_object_get(json_object_get(json, "sandbox"),
						       "memory_mb")), 2048);
	CHECK_STR_EQ(json_string_value(json_object_get(json_object_get(json, "agent"),
						      "output_file")), "/workspace/output.json");
	free(text);
	json_decref(json);
	spec_free(spec);
	spec_diagnostics_free(&diag);
}

/*
 * Without a lookup a load sees no host environment, even where the process has the variable:
 * the runtime reads nothing itself, the CLI passes getenv's lookup in.
 */
static void test_no_lookup_no_host_env(void)
{
	struct spec_diagnostics diag;
	struct spec *spec;
	char path[TEST_PATH_MAX];

	setenv("ANTHROPIC_API_KEY", "sk-process-env", 1);
	snprintf(path, sizeof(path), "%s/agent.yaml", examples_dir);
	spec_diagnostics_init(&diag);
	spec = spec_load_file(path, &diag);
	unsetenv("ANTHROPIC_API_KEY");
	CHECK(spec != NULL);
	if (spec) {
		CHECK_INT_EQ(spec->sandbox.env.count, 1); /* the "" entry is dropped */
		CHECK_STR_EQ(spec->sandbox.env.vars[0].name, "GREETING");
	}
	CHECK(diag.count == 1 && strstr(diag.items[0].message, "ANTHROPIC_API_KEY") != NULL);
	spec_free(spec);
	spec_diagnostics_free(&diag);
}

static void test_load_file_errors(void)
{
	struct spec_diagnostics diag;
	struct spec *spec;

	spec_diagnostics_init(&diag);
	spec = spec_load_file("/nonexistent/spec.yaml", &diag);
	CHECK(spec == NULL);
	CHECK_INT_EQ(diag.error_count, 1);
	if (diag.count)
		CHECK(strstr(diag.items[0].message, "No such file") != NULL);
	spec_diagnostics_free(&diag);
	spec = spec_load_file(examples_dir, &diag);
	CHECK(spec == NULL);
	CHECK_INT_EQ(diag.error_count, 1);
	spec_diagnostics_free(&diag);
	/* A NULL diagnostics list is allowed: the caller only wants the result. */
	spec = spec_parse_buffer("kind: nope", strlen("kind: nope"), "x.yaml", NULL, NULL);
	CHECK(spec == NULL);
}

static void test_skill_forms(void)
{
	struct spec_diagnostics diag;
	struct spec *spec = load_text(
		"kind: agent\nname: a\nagent:\n  prompt: p\n  skills:\n"
		"    - agent:claude-code\n    - file:skills/api.md\n    - remote:owner/repo/skill\n"
		"    - cli:jq\n    - mcp:server --sse\n"
		"    - {command: srv, args: [--port, '1'], env: {K: v, HOME: ''}}\n"
		"    - {name: notes, content: '# Notes'}\n"
		"    - {image: 'ghcr.io/a/b:1', mount: /skills/b, readonly: false}\n",
		"t.yaml", &diag);

	CHECK(spec != NULL);
	dump_diag(&diag);
	if (!spec)
		goto out;
	CHECK_INT_EQ(spec->agent.skill_count, 8);
	CHECK_INT_EQ(spec->agent.skills[1].type, SPEC_SKILL_FILE);
	CHECK_STR_EQ(spec->agent.skills[1].value, "skills/api.md");
	CHECK_INT_EQ(spec->agent.skills[2].type, SPEC_SKILL_REMOTE);
	CHECK_INT_EQ(spec->agent.skills[3].type, SPEC_SKILL_CLI);
	CHECK_STR_EQ(spec->agent.skills[4].value, "server --sse");
	CHECK_INT_EQ(spec->agent.skills[5].type, SPEC_SKILL_MCP);
	CHECK_INT_EQ(spec->agent.skills[5].arg_count, 2);
	CHECK_STR_EQ(spec->agent.skills[5].env.vars[0].value, "v");
	CHECK_STR_EQ(spec->agent.skills[5].env.vars[1].value, "/home/tester");
	CHECK_INT_EQ(spec->agent.skills[6].type, SPEC_SKILL_INLINE);
	CHECK_INT_EQ(spec->agent.skills[7].type, SPEC_SKILL_OCI);
	CHECK(!spec->agent.skills[7].readonly);
	CHECK_INT_EQ(spec->agent.skills[7].pos.line, 13);
out:
	spec_free(spec);
	spec_diagnostics_free(&diag);
}

/* ---- smaller rules ---------------------------------------------------------------------- */

static void test_field_rules(void)
{
	struct spec_diagnostics diag;
	const struct spec_diagnostic *item;

	item = expect_error_at("kind: agent\nname: a\nllm:\n  provider: olama\nagent: {prompt: p}\n",
			       "'olama' is not known", 4, 13, &diag);
	if (item)
		CHECK_STR_EQ(item->hint, "did you mean 'ollama'?");
	spec_diagnostics_free(&diag);
	expect_error_at("kind: agent\nname: a\nagent:\n  prompt: p\n  skills: [\"remote:justone\"]\n",
			"does not name a repository", 5, 12, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: agent\nname: a\nagent:\n  prompt: p\n  skills:\n"
			"    - {image: 'ghcr.io/a/b:1'}\n",
			"needs 'mount'", 6, 7, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: agent\nname: a\nagent:\n  prompt: p\n  skills:\n    - {readme: x}\n",
			"not a skill form", 6, 7, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: sandbox\nname: s\nsandbox:\n  env:\n    \"A=B\": x\n",
			"invalid variable name", 5, 5, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: sandbox\nname: s\nsandbox:\n  env:\n    A: [1, 2]\n",
			"must be a single value", 5, 8, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: pipeline\nname: p\npipeline:\n  boxes: [{name: a, prompt: x}]\n"
			"  stages:\n    - {type: fanout, boxes: [a]}\n",
			"'fanout' is not known", 6, 14, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: observe\nname: s\n", "'observe' is not known", 1, 7, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: sandbox\nname: \"\"\n", "name is empty", 2, 7, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: sandbox\nname: s\nobserve:\n  telemetry_buffer_size: 0\n",
			"must be positive", 4, 26, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: workflow\nname: w\nworkflow:\n  steps:\n    - name: a\n"
			"      run: {program: \"\"}\n",
			"program is empty", 6, 22, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("{\"kind\": \"sandbox\", \"name\": \"s\", \"name\": \"t\"}", "appears twice",
			1, 34, &diag);
	spec_diagnostics_free(&diag);
}

static void test_optional_fields_read(void)
{
	struct spec_diagnostics diag;
	struct spec *spec = load_text(
		"kind: agent\nname: a\n"
		"sandbox:\n  kernel: /k/vmlinuz\n  initramfs: /k/initrd.gz\n  guest_image: \"\"\n"
		"  image: alpine:3\n"
		"llm:\n  provider: custom\n  base_url: http://gw:8080\n  api_key_env: MY_KEY\n"
		"  model: m1\n"
		"observe:\n  traces: true\n  otlp_endpoint: http://otel:4317\n"
		"  telemetry_buffer_size: 64\n"
		"agent:\n  prompt: p\n  messaging:\n    enabled: true\n    provider_bridge: slack\n",
		"t.yaml", &diag);
	uint32_t features;

	CHECK(spec != NULL);
	dump_diag(&diag);
	if (!spec)
		goto out;
	CHECK_STR_EQ(spec->sandbox.kernel, "/k/vmlinuz");
	CHECK_STR_EQ(spec->sandbox.initramfs, "/k/initrd.gz");
	CHECK_STR_EQ(spec->sandbox.guest_image, "");
	CHECK_STR_EQ(spec->sandbox.image, "alpine:3");
	CHECK_INT_EQ(spec->llm.provider, SPEC_LLM_PROVIDER_CUSTOM);
	CHECK_STR_EQ(spec->llm.base_url, "http://gw:8080");
	CHECK_STR_EQ(spec->llm.api_key_env, "MY_KEY");
	CHECK_STR_EQ(spec->llm.model, "m1");
	CHECK(spec->has_observe && spec->observe.traces && !spec->observe.metrics);
	CHECK_INT_EQ(spec->observe.telemetry_buffer_size, 64);
	CHECK(spec->agent.has_messaging && spec->agent.messaging.enabled);
	CHECK_STR_EQ(spec->agent.messaging.provider_bridge, "slack");
	features = spec_features_required(spec);
	/* guest_image "" disables the pull, so it is no feature; image is. */
	CHECK(!(features & SPEC_FEATURE_BIT(SPEC_FEATURE_GUEST_IMAGE)));
	CHECK(features & SPEC_FEATURE_BIT(SPEC_FEATURE_IMAGE));
	CHECK(features & SPEC_FEATURE_BIT(SPEC_FEATURE_MESSAGING));
	CHECK(features & SPEC_FEATURE_BIT(SPEC_FEATURE_OBSERVE));
	CHECK_STR_EQ(spec_feature_name(SPEC_FEATURE_MOUNTS), "mounts");
out:
	spec_free(spec);
	spec_diagnostics_free(&diag);
}

static void test_hostile_input(void)
{
	struct spec_diagnostics diag;
	char deep[4 * 100 + 64] = "kind: sandbox\nname: s\nx: ";
	struct spec *spec;
	const char nul_text[] = "kind: sandbox\nname: \"a\\0b\"\n";

	for (int i = 0; i < 100; i++)
		strcat(deep, "[");
	spec = load_text(deep, "t.yaml", &diag);
	CHECK(spec == NULL);
	CHECK(find_diag(&diag, SPEC_SEVERITY_ERROR, "deeper than") != NULL);
	spec_diagnostics_free(&diag);
	expect_error_at(nul_text, "NUL character", 2, 7, &diag);
	spec_diagnostics_free(&diag);
	spec = load_text("kind: sandbox\nname: s\n---\nkind: agent\n", "t.yaml", &diag);
	CHECK(spec != NULL);
	CHECK(find_diag(&diag, SPEC_SEVERITY_WARNING, "only the first YAML document") != NULL);
	spec_free(spec);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: sandbox\nname: s\n? [a, b]\n: c\n", "plain name", 3, 3, &diag);
	spec_diagnostics_free(&diag);
}

/*
 * An env map of keys K0..K(keys-1) and then K7 again, as a spec: allocated, or NULL.
 */
static char *wide_text(unsigned int keys)
{
	static const char head[] = "kind: sandbox\nname: s\nsandbox:\n  env:\n";
	size_t len = sizeof(head) - 1, room = len + ((size_t)keys + 1) * TEST_WIDE_LINE_MAX;
	char *text = malloc(room);

	if (!text)
		return NULL;
	memcpy(text, head, len);
	for (unsigned int i = 0; i < keys; i++)
		len += (size_t)snprintf(text + len, room - len, "    K%u: v\n", i);
	snprintf(text + len, room - len, "    K7: again\n");
	return text;
}

/* The CPU time this process spent loading text, in seconds; the spec and diag into the out. */
static double load_cpu_seconds(const char *text, struct spec **spec, struct spec_diagnostics *diag)
{
	struct timespec start, end;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &start);
	*spec = load_text(text, "t.yaml", diag);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &end);
	return (double)(end.tv_sec - start.tv_sec) +
	       (double)(end.tv_nsec - start.tv_nsec) / TEST_NS_PER_SEC;
}

/*
 * A mapping with as many keys as the file cap allows parses in about linear time (its CPU
 * time grows with its width, not with the width squared), and a duplicate at its far end is
 * still named with the line of the first.
 */
static void test_wide_mapping(void)
{
	char *narrow = wide_text(TEST_WIDE_KEYS / TEST_WIDE_NARROWER);
	char *text = wide_text(TEST_WIDE_KEYS);
	const struct spec_diagnostic *dup;
	struct spec_diagnostics diag;
	double narrow_seconds, seconds;
	struct spec *spec;

	CHECK(narrow != NULL && text != NULL);
	if (!narrow || !text)
		goto out;
	narrow_seconds = load_cpu_seconds(narrow, &spec, &diag);
	CHECK(spec == NULL);
	spec_free(spec);
	spec_diagnostics_free(&diag);
	seconds = load_cpu_seconds(text, &spec, &diag);
	fprintf(stderr, "  %d env keys: %.3f s of CPU; %d: %.3f s\n",
		TEST_WIDE_KEYS / TEST_WIDE_NARROWER, narrow_seconds, TEST_WIDE_KEYS, seconds);
	CHECK(seconds < TEST_WIDE_GROWTH_MAX * narrow_seconds);
	CHECK(spec == NULL);
	dup = find_diag(&diag, SPEC_SEVERITY_ERROR, "key 'K7' in sandbox.env appears twice");
	CHECK(dup != NULL);
	if (dup) {
		CHECK(strstr(dup->message, "(first at line 12)") != NULL);
		CHECK_INT_EQ(dup->pos.line, TEST_WIDE_KEYS + 5);
	}
	spec_free(spec);
	spec_diagnostics_free(&diag);
out:
	free(narrow);
	free(text);
}

static void test_box_effective_settings(void)
{
	struct spec_diagnostics diag;
	struct spec *spec = load_text(
		"kind: pipeline\nname: p\nsandbox: {memory_mb: 2048, vcpus: 2, snapshot: base1}\n"
		"llm: {provider: codex}\npipeline:\n  boxes:\n    - {name: a, prompt: x}\n"
		"    - name: b\n      prompt: y\n      llm: {provider: ollama}\n"
		"      sandbox: {memory_mb: 512, network: true}\n",
		"t.yaml", &diag);
	struct spec_box_resources resources;

	CHECK(spec != NULL);
	if (!spec)
		goto out;
	spec_box_resources(spec, &spec->pipeline.boxes[0], &resources);
	CHECK_INT_EQ(resources.memory_mb, 2048);
	CHECK_INT_EQ(resources.vcpus, 2);
	CHECK(!resources.network);
	CHECK_STR_EQ(resources.snapshot, "base1");
	CHECK_INT_EQ(spec_box_llm(spec, &spec->pipeline.boxes[0])->provider,
		     SPEC_LLM_PROVIDER_CODEX);
	spec_box_resources(spec, &spec->pipeline.boxes[1], &resources);
	CHECK_INT_EQ(resources.memory_mb, 512);
	CHECK_INT_EQ(resources.vcpus, 2);
	CHECK(resources.network);
	CHECK_INT_EQ(spec_box_llm(spec, &spec->pipeline.boxes[1])->provider,
		     SPEC_LLM_PROVIDER_OLLAMA);
out:
	spec_free(spec);
	spec_diagnostics_free(&diag);
}

/* The network's shape parses with network: true and is an error without it. */
static void test_network_fields(void)
{
	struct spec_diagnostics diag;
	struct spec *spec = load_text(
		"kind: agent\nname: a\n"
		"sandbox:\n  network: true\n  ports: [\"8080:80\"]\n"
		"  network_allow: [127.0.0.1/32, 10.0.0.0/8]\n  network_deny: [192.0.2.0/24]\n"
		"  dns_server: 127.0.0.1:5353\n"
		"agent:\n  prompt: p\n",
		"t.yaml", &diag);

	CHECK(spec != NULL);
	dump_diag(&diag);
	if (spec) {
		CHECK(spec->sandbox.network);
		CHECK_INT_EQ(spec->sandbox.port_count, 1);
		CHECK_STR_EQ(spec->sandbox.ports[0], "8080:80");
		CHECK_INT_EQ(spec->sandbox.network_allow_count, 2);
		CHECK_STR_EQ(spec->sandbox.network_allow[1], "10.0.0.0/8");
		CHECK_INT_EQ(spec->sandbox.network_deny_count, 1);
		CHECK_STR_EQ(spec->sandbox.dns_server, "127.0.0.1:5353");
		CHECK(spec->features & SPEC_FEATURE_BIT(SPEC_FEATURE_NETWORK));
	}
	spec_free(spec);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: sandbox\nname: s\nsandbox:\n  ports: [\"8080:80\"]\n",
			"needs sandbox.network: true", 4, 10, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: sandbox\nname: s\nsandbox:\n  network: false\n"
			"  network_allow: [127.0.0.1/32]\n",
			"needs sandbox.network: true", 5, 18, &diag);
	spec_diagnostics_free(&diag);
	expect_error_at("kind: sandbox\nname: s\nsandbox:\n  network: true\n  ports: 8080\n",
			"sandbox.ports", 5, 10, &diag);
	spec_diagnostics_free(&diag);
}

int main(int argc, char **argv)
{
	if (argc > 1)
		examples_dir = argv[1];
	RUN_TEST(test_example_workflow);
	RUN_TEST(test_example_pipeline_fanout);
	RUN_TEST(test_example_agent_and_sandbox);
	RUN_TEST(test_defaults_applied);
	RUN_TEST(test_defaults_nested);
	RUN_TEST(test_invalid_kind);
	RUN_TEST(test_invalid_agent);
	RUN_TEST(test_invalid_pipeline);
	RUN_TEST(test_unused_box_warning);
	RUN_TEST(test_invalid_workflow);
	RUN_TEST(test_invalid_sandbox_kind);
	RUN_TEST(test_other_kind_block_is_a_warning);
	RUN_TEST(test_numbers_positive);
	RUN_TEST(test_unknown_key_warning);
	RUN_TEST(test_duplicate_key);
	RUN_TEST(test_all_errors_reported_at_once);
	RUN_TEST(test_cycle_named);
	RUN_TEST(test_planner_levels);
	RUN_TEST(test_planner_direct);
	RUN_TEST(test_service_mode_rules);
	RUN_TEST(test_yaml_and_json_agree);
	RUN_TEST(test_json_errors_and_sniffing);
	RUN_TEST(test_malformed_yaml);
	RUN_TEST(test_env_resolution);
	RUN_TEST(test_env_resolve_direct);
	RUN_TEST(test_features_not_supported);
	RUN_TEST(test_diagnostics_output);
	RUN_TEST(test_to_json_redacts_host_values);
	RUN_TEST(test_load_file_errors);
	RUN_TEST(test_no_lookup_no_host_env);
	RUN_TEST(test_skill_forms);
	RUN_TEST(test_field_rules);
	RUN_TEST(test_optional_fields_read);
	RUN_TEST(test_hostile_input);
	RUN_TEST(test_wide_mapping);
	RUN_TEST(test_box_effective_settings);
	RUN_TEST(test_network_fields);
	return harness_finish();
}
