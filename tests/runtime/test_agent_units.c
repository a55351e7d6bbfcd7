/*
 * Unit tests for the agent pieces that need no box: provider argv/env, the prompt with its
 * output-file instruction and inlined input, the skills plan, and stream-json parsing against
 * output produced by the real mock agent (its path is argv[1]), fed in awkward chunk sizes.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "runtime/codex_json.h"
#include "runtime/llm.h"
#include "runtime/skills.h"
#include "runtime/stream_json.h"

#define TEST_OUTPUT_MAX (1u << 20)
/* A guest's flood of tool calls: far past what the parser keeps. */
#define TEST_FLOOD_CALLS 100000u
#define TEST_FLOOD_LINE_MAX 256u
/* An id or name no real agent writes, as long as one exec chunk. */
#define TEST_HUGE_TEXT_LEN (64u << 10)
#define TEST_TOOL_USE_PREFIX "[tool_use] "
#define TEST_TOOL_USE_LINE \
	"{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"tool_use\",\"id\":\"%s\",\"name\":\"%s\"}]}}\n"
#define TEST_TOOL_RESULT_LINE \
	"{\"type\":\"user\",\"message\":{\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"%s\",\"is_error\":%s}]}}\n"

static const char *mock_claude_path;

static const char *fake_host_env(const char *name, void *ctx)
{
	(void)ctx;
	if (strcmp(name, "ANTHROPIC_API_KEY") == 0)
		return "sk-host";
	if (strcmp(name, "OPENAI_API_KEY") == 0)
		return "sk-openai";
	if (strcmp(name, "MY_KEY") == 0)
		return "sk-custom";
	return NULL;
}

static int build(enum spec_llm_provider provider, const char *model, const char *base_url,
		 bool mcp, struct llm_invocation *inv)
{
	struct spec_llm llm = { .provider = provider, .model = (char *)model,
				.base_url = (char *)base_url, .api_key_env = "MY_KEY" };
	struct llm_invocation_request req = { .llm = &llm, .full_prompt = "do it",
					      .has_mcp_config = mcp,
					      .host_env = fake_host_env };

	return llm_invocation_build(&req, inv);
}

static char *join_args(const struct llm_invocation *inv)
{
	static char text[4096];
	size_t used = 0;

	used += (size_t)snprintf(text, sizeof(text), "%s", inv->program);
	for (size_t i = 0; i < inv->arg_count && used < sizeof(text); i++)
		used += (size_t)snprintf(text + used, sizeof(text) - used, " %s", inv->args[i]);
	return text;
}

static void test_llm_claude(void)
{
	struct llm_invocation inv;

	CHECK_INT_EQ(build(SPEC_LLM_PROVIDER_CLAUDE, NULL, NULL, false, &inv), 0);
	CHECK_STR_EQ(join_args(&inv),
		     "claude-code -p do it --output-format stream-json --verbose "
		     "--dangerously-skip-permissions --settings {\"skipWebFetchPreflight\":true}");
	CHECK_STR_EQ(llm_invocation_env(&inv, "HOME"), "/home/sandbox");
	CHECK_STR_EQ(llm_invocation_env(&inv, "ANTHROPIC_API_KEY"), "sk-host");
	CHECK(llm_invocation_env(&inv, "ANTHROPIC_BASE_URL") == NULL);
	CHECK(inv.stream_json && !inv.local_provider);
	llm_invocation_free(&inv);

	CHECK_INT_EQ(build(SPEC_LLM_PROVIDER_CLAUDE, "opus", NULL, true, &inv), 0);
	CHECK_STR_EQ(join_args(&inv),
		     "claude-code -p do it --output-format stream-json --verbose "
		     "--dangerously-skip-permissions --model opus --settings "
		     "{\"skipWebFetchPreflight\":true} --mcp-config /workspace/.mcp.json");
	llm_invocation_free(&inv);

	CHECK_INT_EQ(build(SPEC_LLM_PROVIDER_CLAUDE_PERSONAL, NULL, NULL, false, &inv), 0);
	CHECK_STR_EQ(llm_invocation_env(&inv, "HOME"), "/home/sandbox");
	CHECK(llm_invocation_env(&inv, "ANTHROPIC_API_KEY") == NULL);
	CHECK_INT_EQ((long)inv.env_count, 1);
	llm_invocation_free(&inv);
}

static void test_llm_local_and_custom(void)
{
	struct llm_invocation inv;

	CHECK_INT_EQ(build(SPEC_LLM_PROVIDER_OLLAMA, "qwen3-coder:7b", NULL, false, &inv), 0);
	CHECK_STR_EQ(llm_invocation_env(&inv, "ANTHROPIC_BASE_URL"), "http://10.0.2.2:11434");
	CHECK_STR_EQ(llm_invocation_env(&inv, "ANTHROPIC_API_KEY"), "");
	CHECK_STR_EQ(llm_invocation_env(&inv, "ANTHROPIC_AUTH_TOKEN"), "ollama");
	CHECK(strstr(join_args(&inv), " --model qwen3-coder:7b ") != NULL);
	CHECK(inv.local_provider);
	llm_invocation_free(&inv);

	CHECK_INT_EQ(build(SPEC_LLM_PROVIDER_OLLAMA, "m", "http://gpu:11434", false, &inv), 0);
	CHECK_STR_EQ(llm_invocation_env(&inv, "ANTHROPIC_BASE_URL"), "http://gpu:11434");
	llm_invocation_free(&inv);

	CHECK_INT_EQ(build(SPEC_LLM_PROVIDER_LM_STUDIO, "m", NULL, false, &inv), 0);
	CHECK_STR_EQ(llm_invocation_env(&inv, "ANTHROPIC_BASE_URL"), "http://10.0.2.2:1234");
	CHECK_STR_EQ(llm_invocation_env(&inv, "ANTHROPIC_API_KEY"), "lm-studio");
	CHECK(inv.local_provider);
	llm_invocation_free(&inv);

	CHECK_INT_EQ(build(SPEC_LLM_PROVIDER_CUSTOM, NULL, "https://llm.example", false, &inv), 0);
	CHECK_STR_EQ(llm_invocation_env(&inv, "ANTHROPIC_BASE_URL"), "https://llm.example");
	CHECK_STR_EQ(llm_invocation_env(&inv, "ANTHROPIC_API_KEY"), "sk-custom");
	CHECK(strstr(join_args(&inv), "--model") == NULL);
	CHECK(!inv.local_provider);
	llm_invocation_free(&inv);
}

static void test_llm_codex(void)
{
	struct llm_invocation inv;

	CHECK_INT_EQ(build(SPEC_LLM_PROVIDER_CODEX, NULL, NULL, true, &inv), 0);
	CHECK_STR_EQ(join_args(&inv), "codex exec --json --skip-git-repo-check "
				      "--dangerously-bypass-approvals-and-sandbox do it");
	CHECK_STR_EQ(llm_invocation_env(&inv, "OPENAI_API_KEY"), "sk-openai");
	CHECK_STR_EQ(llm_invocation_env(&inv, "HOME"), "/home/sandbox");
	CHECK(!inv.stream_json);
	llm_invocation_free(&inv);

	/* base_url becomes a provider of codex's own config; a quote cannot break out of it */
	CHECK_INT_EQ(build(SPEC_LLM_PROVIDER_CODEX, "gpt-5-codex", "http://10.0.2.2:8080/v1\"x",
			   true, &inv), 0);
	CHECK_STR_EQ(join_args(&inv),
		     "codex exec --json --skip-git-repo-check "
		     "--dangerously-bypass-approvals-and-sandbox --model gpt-5-codex -c "
		     "model_providers.voidbox={name=\"voidbox\",base_url=\"http://10.0.2.2:8080/v1"
		     "\\\"x\",wire_api=\"responses\",env_key=\"OPENAI_API_KEY\"} -c "
		     "model_provider=voidbox do it");
	llm_invocation_free(&inv);
}

/* codex `exec --json` as 0.169 prints it, with a stray line and a failed command. */
static const char codex_session[] =
	"{\"type\":\"thread.started\",\"thread_id\":\"t-1\"}\n"
	"{\"type\":\"item.completed\",\"item\":{\"id\":\"item_0\",\"type\":\"error\","
	"\"message\":\"no metadata\"}}\n"
	"not json at all\n"
	"{\"type\":\"turn.started\"}\n"
	"{\"type\":\"item.completed\",\"item\":{\"id\":\"item_1\",\"type\":"
	"\"command_execution\",\"command\":\"printf hi > f\",\"exit_code\":0,"
	"\"status\":\"completed\"}}\n"
	"{\"type\":\"item.completed\",\"item\":{\"id\":\"item_2\",\"type\":"
	"\"command_execution\",\"exit_code\":2,\"status\":\"failed\"}}\n"
	"{\"type\":\"item.completed\",\"item\":{\"id\":\"item_3\",\"type\":\"agent_message\","
	"\"text\":\"draft\"}}\n"
	"{\"type\":\"item.completed\",\"item\":{\"id\":\"item_4\",\"type\":\"agent_message\","
	"\"text\":\"I wrote f.\"}}\n"
	"{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":2700,"
	"\"cached_input_tokens\":0,\"output_tokens\":120}}";

static void test_codex_json(void)
{
	static const char failed[] =
		"{\"type\":\"turn.started\"}\n"
		"{\"type\":\"error\",\"message\":\"Reconnecting... 1/5\"}\n"
		"{\"type\":\"turn.failed\",\"error\":{\"message\":\"quota exceeded\"}}\n";
	static const char hostile[] =
		"{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":-5,"
		"\"output_tokens\":\"many\"}}\n"
		"{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":9223372036854775807}}\n"
		"{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":9223372036854775807}}\n"
		"{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":9223372036854775807}}\n"
		"{\"type\":7}\n[1,2]\n{\"type\":\"item.completed\",\"item\":5}\n"
		"{\"type\":\"item.completed\",\"item\":{\"type\":\"agent_message\",\"text\":3}}\n";
	struct stream_json_result result;

	/* the last agent message is the answer; turns, tokens, tool calls counted */
	CHECK_INT_EQ(codex_json_parse(codex_session, strlen(codex_session), &result), 0);
	CHECK(result.has_result_event && !result.is_error);
	CHECK_STR_EQ(result.result_text, "I wrote f.");
	CHECK_STR_EQ(result.session_id, "t-1");
	CHECK_INT_EQ(result.num_turns, 1);
	CHECK_INT_EQ(result.input_tokens, 2700);
	CHECK_INT_EQ(result.output_tokens, 120);
	CHECK_INT_EQ(result.tool_call_count, 2);
	CHECK(result.tool_call_count == 2 && !result.tool_calls[0].result_is_error &&
	      result.tool_calls[1].result_is_error);
	CHECK_INT_EQ(result.skipped_lines, 1);
	CHECK(result.cost_usd == 0.0);
	stream_json_result_free(&result);

	/* a failed turn is an error result carrying its message; reconnect notices are not */
	CHECK_INT_EQ(codex_json_parse(failed, strlen(failed), &result), 0);
	CHECK(result.has_result_event && result.is_error);
	CHECK_STR_EQ(result.result_text, "quota exceeded");
	stream_json_result_free(&result);

	/* no turn event: no result */
	CHECK_INT_EQ(codex_json_parse("{\"type\":\"turn.started\"}", 23, &result), 0);
	CHECK(!result.has_result_event);
	stream_json_result_free(&result);

	/* hostile values count as nothing, never wrap or crash */
	CHECK_INT_EQ(codex_json_parse(hostile, strlen(hostile), &result), 0);
	CHECK_INT_EQ(result.num_turns, 4);
	CHECK(result.input_tokens == UINT64_MAX);
	CHECK_INT_EQ(result.output_tokens, 0);
	CHECK(result.result_text == NULL);
	CHECK_INT_EQ(result.skipped_lines, 1);
	stream_json_result_free(&result);
}

static void test_prompt(void)
{
	char big[LLM_INPUT_INLINE_MAX + 100];
	char *prompt = llm_prompt_build("Summarise.", "/workspace/output.json", NULL, 0);

	CHECK_STR_EQ(prompt, "Summarise.\n\nWrite your output to /workspace/output.json.");
	free(prompt);
	prompt = llm_prompt_build("Go", "/o", "[1,2]", 5);
	CHECK_STR_EQ(prompt, "Go\n\n--- Previous stage output ---\n[1,2]\n"
			     "--- End of previous stage output ---\n\nWrite your output to /o.");
	free(prompt);
	memset(big, 'x', sizeof(big));
	prompt = llm_prompt_build("Go", "/o", big, sizeof(big));
	CHECK(prompt && strstr(prompt, "truncated; the full input is in /workspace/input.json"));
	CHECK(prompt && strlen(prompt) < LLM_INPUT_INLINE_MAX + 300);
	free(prompt);
}

static void test_skills_plan(void)
{
	char dir[] = "/tmp/voidbox-skills-XXXXXX";
	char path[256], err[512] = "";
	char *args[] = { "--sse" };
	struct spec_env_var env_var = { .name = "TOKEN", .value = "t" };
	struct spec_skill skills[5];
	struct skill_plan plan;
	FILE *file;

	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/hn-api.md", dir);
	file = fopen(path, "w");
	CHECK(file != NULL);
	if (!file)
		return;
	fputs("# HN\n", file);
	fclose(file);
	memset(skills, 0, sizeof(skills));
	skills[0] = (struct spec_skill){ .type = SPEC_SKILL_FILE, .value = path };
	skills[1] = (struct spec_skill){ .type = SPEC_SKILL_INLINE, .name = "style",
					 .content = "Be brief." };
	skills[2] = (struct spec_skill){ .type = SPEC_SKILL_AGENT, .value = "claude-code" };
	skills[3] = (struct spec_skill){ .type = SPEC_SKILL_MCP, .command = "/usr/bin/void-mcp",
					 .args = args, .arg_count = 1,
					 .env = { .vars = &env_var, .count = 1 } };
	skills[4] = (struct spec_skill){ .type = SPEC_SKILL_CLI, .value = "jq" };
	CHECK_INT_EQ(skills_plan_build(skills, 5, &plan, err, sizeof(err)), 0);
	CHECK_INT_EQ((long)plan.count, 5);
	CHECK_STR_EQ(plan.items[0].name, "hn-api");
	CHECK_STR_EQ(plan.items[0].guest_path, "/workspace/.claude/skills/hn-api.md");
	CHECK_STR_EQ(plan.items[0].content, "# HN\n");
	CHECK_STR_EQ(plan.items[1].guest_path, "/workspace/.claude/skills/style.md");
	CHECK_STR_EQ(plan.items[1].content, "Be brief.");
	CHECK(plan.items[2].guest_path == NULL);
	CHECK_STR_EQ(plan.items[3].name, "void-mcp");
	CHECK(plan.mcp_json && strstr(plan.mcp_json, "\"void-mcp\""));
	CHECK(plan.mcp_json && strstr(plan.mcp_json, "\"--sse\""));
	CHECK(plan.mcp_json && strstr(plan.mcp_json, "\"TOKEN\": \"t\""));
	CHECK_STR_EQ(plan.items[4].source, "image");
	skills_plan_free(&plan);

	/* a missing file fails before any VM, naming the path */
	skills[0].value = "/nonexistent/skill.md";
	CHECK_INT_EQ(skills_plan_build(skills, 1, &plan, err, sizeof(err)), -ENOENT);
	CHECK(strstr(err, "/nonexistent/skill.md") != NULL);
	/* remote skills say why they cannot work offline */
	skills[0] = (struct spec_skill){ .type = SPEC_SKILL_REMOTE, .value = "acme/tools/lint" };
	CHECK_INT_EQ(skills_plan_build(skills, 1, &plan, err, sizeof(err)), -ENETUNREACH);
	CHECK(strstr(err, "offline") && strstr(err, "raw.githubusercontent.com/acme/tools/lint"));
	unlink(path);
	rmdir(dir);
}

/* Runs the mock with scenario (and extra env "K=V" or NULL); returns its stdout. */
static char *run_mock(const char *scenario, const char *extra_env, int *status)
{
	char command[1024];
	char *text = malloc(TEST_OUTPUT_MAX);
	size_t len = 0, got;
	FILE *pipe;

	if (!text)
		return NULL;
	snprintf(command, sizeof(command),
		 "env -i MOCK_CLAUDE_WORKSPACE=/nonexistent MOCK_CLAUDE_SCENARIO=%s %s '%s' -p "
		 "'Count the things' --output-format stream-json --verbose",
		 scenario, extra_env ? extra_env : "", mock_claude_path);
	pipe = popen(command, "r");
	if (!pipe) {
		free(text);
		return NULL;
	}
	while ((got = fread(text + len, 1, TEST_OUTPUT_MAX - 1 - len, pipe)) > 0)
		len += got;
	text[len] = '\0';
	*status = pclose(pipe);
	return text;
}

/* Feeds text in chunks of chunk bytes to check line reassembly. */
static int parse_chunked(const char *text, size_t chunk, struct stream_json_result *out)
{
	struct stream_json_parser parser;
	size_t len = strlen(text);
	int rc = 0;

	stream_json_parser_init(&parser);
	for (size_t at = 0; at < len && rc == 0; at += chunk)
		rc = stream_json_parser_feed(&parser, text + at, len - at < chunk ? len - at : chunk);
	if (rc == 0)
		rc = stream_json_parser_finish(&parser, out);
	stream_json_parser_free(&parser);
	return rc;
}

static void test_stream_json_scenarios(void)
{
	static const size_t chunks[] = { 1, 7, 4096 };
	struct stream_json_result result;
	int status;
	char *text;

	text = run_mock("multi_tool", "MOCK_CLAUDE_INPUT_TOKENS=1234 MOCK_CLAUDE_COST=0.25", &status);
	CHECK(text != NULL);
	if (!text)
		return;
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
		CHECK_INT_EQ(parse_chunked(text, chunks[i], &result), 0);
		CHECK(result.has_result_event && !result.is_error);
		CHECK_INT_EQ(result.num_turns, 3);
		CHECK_INT_EQ((long)result.tool_call_count, 5);
		CHECK_INT_EQ((long)result.input_tokens, 1234);
		CHECK_INT_EQ((long)result.output_tokens, 200);
		CHECK(result.cost_usd > 0.2499 && result.cost_usd < 0.2501);
		CHECK_STR_EQ(result.session_id, "mock-session-0001");
		CHECK_STR_EQ(result.model, "claude-sonnet-4-20250514");
		CHECK_STR_EQ(result.tool_calls[2].name, "Bash");
		CHECK(result.tool_calls[4].has_result);
		CHECK(result.result_text && strstr(result.result_text, "Count the things"));
		stream_json_result_free(&result);
	}
	free(text);

	text = run_mock("heavy", NULL, &status);
	CHECK(text && stream_json_parse(text, strlen(text), &result) == 0);
	CHECK_INT_EQ((long)result.tool_call_count, 20);
	CHECK_INT_EQ(result.num_turns, 10);
	stream_json_result_free(&result);
	free(text);

	/* MOCK_CLAUDE_BASH: the command's output and status join the result text */
	text = run_mock("simple", "MOCK_CLAUDE_BASH='echo from-shell; exit 3'", &status);
	CHECK(text && stream_json_parse(text, strlen(text), &result) == 0);
	CHECK(result.result_text && strstr(result.result_text, "; bash (exit 3): from-shell"));
	stream_json_result_free(&result);
	free(text);

	text = run_mock("error", "MOCK_CLAUDE_ERROR=boom", &status);
	CHECK(text && WIFEXITED(status) && WEXITSTATUS(status) == 1);
	CHECK(text && stream_json_parse(text, strlen(text), &result) == 0);
	CHECK(result.is_error);
	CHECK_STR_EQ(result.result_text, "boom");
	stream_json_result_free(&result);
	free(text);
}

static void test_stream_json_hostile(void)
{
	static const char text[] =
		"not json at all\n"
		"{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"tool_use\","
		"\"id\":\"a\",\"name\":\"Bash\"}],\"usage\":{\"input_tokens\":7,"
		"\"output_tokens\":3}}}\r\n"
		"[1,2,3]\n"
		"{\"type\":\"future_event\"}\n"
		"{\"type\":\"user\",\"message\":{\"content\":[{\"type\":\"tool_result\","
		"\"tool_use_id\":\"a\",\"is_error\":true}]}}";
	struct stream_json_result result;

	CHECK_INT_EQ(stream_json_parse(text, strlen(text), &result), 0);
	CHECK_INT_EQ((long)result.skipped_lines, 2);
	CHECK(!result.has_result_event);
	CHECK(result.result_text == NULL);
	/* without a result event, usage is the assistant events' sum */
	CHECK_INT_EQ((long)result.input_tokens, 7);
	CHECK_INT_EQ((long)result.output_tokens, 3);
	CHECK_INT_EQ((long)result.tool_call_count, 1);
	CHECK(result.tool_calls[0].has_result && result.tool_calls[0].result_is_error);
	stream_json_result_free(&result);
}

/* What a listener heard: how many tool_use lines, and the last line. */
struct test_heard {
	size_t tool_uses;
	char last[STREAM_JSON_EVENT_TEXT_MAX + 1];
};

static void test_hear(void *opaque, const char *line, size_t len)
{
	struct test_heard *heard = opaque;
	size_t prefix_len = strlen(TEST_TOOL_USE_PREFIX);

	if (len >= prefix_len && memcmp(line, TEST_TOOL_USE_PREFIX, prefix_len) == 0)
		heard->tool_uses++;
	memcpy(heard->last, line, len);
	heard->last[len] = '\0';
}

static int feed_line(struct stream_json_parser *parser, const char *format, const char *first,
		     const char *second)
{
	char *line = NULL;
	int len = asprintf(&line, format, first, second);
	int rc = len < 0 ? -ENOMEM : stream_json_parser_feed(parser, line, (size_t)len);

	free(line);
	return rc;
}

/*
 * A guest that streams tool calls without end: the parser keeps a bounded number with bounded
 * strings, counts the rest, and its listener still hears every one.
 */
static void test_stream_json_tool_flood(void)
{
	struct stream_json_parser parser;
	struct stream_json_result result;
	struct test_heard heard = { 0 };
	int rc = 0;
	char id[TEST_FLOOD_LINE_MAX], told[STREAM_JSON_EVENT_TEXT_MAX + 1];
	char *huge = malloc(TEST_HUGE_TEXT_LEN + 1);

	if (!huge) {
		harness_fail_setup("malloc");
		return;
	}
	memset(huge, 'a', TEST_HUGE_TEXT_LEN);
	huge[TEST_HUGE_TEXT_LEN] = '\0';
	stream_json_parser_init(&parser);
	stream_json_parser_listen(&parser, test_hear, &heard);
	/* an id too long to keep whole, then a name that is cut */
	CHECK_INT_EQ(feed_line(&parser, TEST_TOOL_USE_LINE, huge, "Bash"), 0);
	CHECK_INT_EQ((long)parser.result.tool_call_count, 0);
	CHECK_INT_EQ((long)parser.result.tool_calls_dropped, 1);
	CHECK_INT_EQ(feed_line(&parser, TEST_TOOL_USE_LINE, "named", huge), 0);
	CHECK_INT_EQ((long)parser.result.tool_call_count, 1);
	CHECK(parser.result.tool_call_count == 1 &&
	      strlen(parser.result.tool_calls[0].name) == STREAM_JSON_TOOL_NAME_MAX);
	for (size_t i = 0; i < TEST_FLOOD_CALLS && rc == 0; i++) {
		snprintf(id, sizeof(id), "toolu_%zu", i);
		rc = feed_line(&parser, TEST_TOOL_USE_LINE, id, "Read");
	}
	CHECK_INT_EQ(rc, 0);
	CHECK_INT_EQ((long)heard.tool_uses, TEST_FLOOD_CALLS + 2);
	CHECK_INT_EQ((long)parser.result.tool_call_count, STREAM_JSON_TOOL_CALLS_MAX);
	CHECK(parser.tool_call_capacity <= STREAM_JSON_TOOL_CALLS_MAX);
	CHECK_INT_EQ((long)parser.result.tool_calls_dropped,
		     TEST_FLOOD_CALLS + 2 - STREAM_JSON_TOOL_CALLS_MAX);
	/* results find kept calls; a dropped call's result is still told, by its id */
	CHECK_INT_EQ(feed_line(&parser, TEST_TOOL_RESULT_LINE, "toolu_0", "true"), 0);
	CHECK_STR_EQ(heard.last, "[tool_result] Read error");
	snprintf(id, sizeof(id), "toolu_%u", TEST_FLOOD_CALLS - 1);
	snprintf(told, sizeof(told), "[tool_result] %s ok", id);
	CHECK_INT_EQ(feed_line(&parser, TEST_TOOL_RESULT_LINE, id, "false"), 0);
	CHECK_STR_EQ(heard.last, told);
	CHECK_INT_EQ(stream_json_parser_finish(&parser, &result), 0);
	CHECK_INT_EQ((long)result.tool_call_count, STREAM_JSON_TOOL_CALLS_MAX);
	CHECK_INT_EQ((long)result.tool_calls_dropped,
		     TEST_FLOOD_CALLS + 2 - STREAM_JSON_TOOL_CALLS_MAX);
	CHECK(result.tool_call_count > 1 && result.tool_calls[1].has_result &&
	      result.tool_calls[1].result_is_error);
	stream_json_result_free(&result);
	stream_json_parser_free(&parser);
	free(huge);
}

/* A guest whose codex output lists tool calls without end: a bounded number is kept. */
static void test_codex_json_tool_flood(void)
{
	static const char item_line[] =
		"{\"type\":\"item.completed\",\"item\":{\"id\":\"%s\",\"type\":"
		"\"command_execution\",\"exit_code\":0}}\n";
	size_t line_max = sizeof(item_line) + TEST_HUGE_TEXT_LEN;
	size_t cap = (size_t)TEST_FLOOD_CALLS * TEST_FLOOD_LINE_MAX + line_max, len = 0;
	struct stream_json_result result;
	char *lines = malloc(cap), *huge = malloc(TEST_HUGE_TEXT_LEN + 1);
	char id[TEST_FLOOD_LINE_MAX];

	if (!lines || !huge) {
		harness_fail_setup("malloc");
		free(lines);
		free(huge);
		return;
	}
	memset(huge, 'a', TEST_HUGE_TEXT_LEN);
	huge[TEST_HUGE_TEXT_LEN] = '\0';
	len += (size_t)snprintf(lines, cap, item_line, huge);
	for (size_t i = 1; i < TEST_FLOOD_CALLS; i++) {
		snprintf(id, sizeof(id), "item_%zu", i);
		len += (size_t)snprintf(lines + len, cap - len, item_line, id);
	}
	CHECK_INT_EQ(codex_json_parse(lines, len, &result), 0);
	CHECK_INT_EQ((long)result.tool_call_count, STREAM_JSON_TOOL_CALLS_MAX);
	CHECK_INT_EQ((long)result.tool_calls_dropped, TEST_FLOOD_CALLS - STREAM_JSON_TOOL_CALLS_MAX);
	CHECK(result.tool_call_count > 0 && result.tool_calls[0].id &&
	      strlen(result.tool_calls[0].id) == STREAM_JSON_TOOL_ID_MAX);
	stream_json_result_free(&result);
	free(lines);
	free(huge);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: test_agent_units <path of voidbox-mock-claude>\n");
		return 1;
	}
	mock_claude_path = argv[1];
	RUN_TEST(test_llm_claude);
	RUN_TEST(test_llm_local_and_custom);
	RUN_TEST(test_llm_codex);
	RUN_TEST(test_codex_json);
	RUN_TEST(test_prompt);
	RUN_TEST(test_skills_plan);
	RUN_TEST(test_stream_json_scenarios);
	RUN_TEST(test_stream_json_hostile);
	RUN_TEST(test_stream_json_tool_flood);
	RUN_TEST(test_codex_json_tool_flood);
	return harness_finish();
}
