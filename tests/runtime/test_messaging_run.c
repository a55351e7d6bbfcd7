/*
 * Messaging in agent and pipeline runs, in mock boxes: the mock_exec hook plays each agent's
 * guest and talks to the real sidecar over HTTP (10.0.2.2 in the URL is the host's 127.0.0.1,
 * so it swaps the address, as the user-mode network does). A two-stage pipeline proves that
 * what the first agent sends reaches the second's inbox once the stage ends; the hook also
 * records what each agent was given: VOID_SIDECAR_URL, void-mcp in .mcp.json or, for codex,
 * in config.toml, and nothing at all for a box without messaging. The shipped example
 * (examples/messaging-pipeline.yaml, argv[1] is the directory) loads and runs in mock mode.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "harness.h"
#include "runtime/agent.h"
#include "runtime/pipeline.h"

#define TEST_TEXT_MAX 4096
#define TEST_GUEST_PREFIX "http://10.0.2.2:"
#define TEST_HOST_PREFIX "http://127.0.0.1:"
#define TEST_AGENTS_MAX 4

struct test_agent_seen {
	char name[32];
	char url[64];	     /* VOID_SIDECAR_URL as given; "" when absent */
	bool mcp_has_void;   /* .mcp.json names void-mcp with that URL */
	bool codex_has_void; /* config.toml declares [mcp_servers.void] */
	bool has_skill;	     /* the void-messaging skill tells it how */
	char answer[TEST_TEXT_MAX];
};

static struct test_agent_seen seen[TEST_AGENTS_MAX];
static size_t seen_count;

static size_t test_collect(char *data, size_t size, size_t nmemb, void *opaque)
{
	char *out = opaque;
	size_t have = strlen(out), n = size * nmemb;

	if (have + n >= TEST_TEXT_MAX)
		n = TEST_TEXT_MAX - 1 - have;
	memcpy(out + have, data, n);
	out[have + n] = '\0';
	return size * nmemb;
}

/* method path on the sidecar at guest_url (its host address); answer into out. */
static long test_sidecar(const char *guest_url, const char *method, const char *path,
			 const char *body, char *out)
{
	char url[256];
	long status = 0;
	CURL *curl = curl_easy_init();

	out[0] = '\0';
	if (!curl || strncmp(guest_url, TEST_GUEST_PREFIX, strlen(TEST_GUEST_PREFIX)) != 0)
		return 0;
	snprintf(url, sizeof(url), TEST_HOST_PREFIX "%s%s", guest_url + strlen(TEST_GUEST_PREFIX),
		 path);
	curl_easy_setopt(curl, CURLOPT_URL, url);
	curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, test_collect);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, out);
	if (body)
		curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
	if (curl_easy_perform(curl) == CURLE_OK)
		curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_cleanup(curl);
	return status;
}

static const char *env_of(const struct box_exec_request *req, const char *name)
{
	for (size_t i = 0; i < req->env_count; i++)
		if (strcmp(req->env[i].name, name) == 0)
			return req->env[i].value;
	return NULL;
}

static const char *arg_after(const struct box_exec_request *req, const char *flag)
{
	for (size_t i = 0; i + 1 < req->arg_count; i++)
		if (strcmp(req->args[i], flag) == 0)
			return req->args[i + 1];
	return "";
}

static bool file_mentions(struct box *box, const char *path, const char *a, const char *b)
{
	char *data = NULL;
	size_t len;
	bool found;

	if (box_read_file(box, path, &data, &len) < 0)
		return false;
	found = strstr(data, a) && strstr(data, b);
	free(data);
	return found;
}

/* A stream-json answer whose result text is text. */
/* The final answer in the program's own event format: codex `exec --json` or stream-json. */
static int test_answer(struct box_exec_result *result, const char *program, const char *text)
{
	json_t *final = strcmp(program, "codex") == 0 ?
				json_pack("{s:s, s:{s:s, s:s}}", "type", "item.completed", "item",
					  "type", "agent_message", "text", text) :
				json_pack("{s:s, s:s, s:b, s:i, s:s}", "type", "result", "subtype",
					  "success", "is_error", 0, "num_turns", 1, "result", text);
	const char *trailer = strcmp(program, "codex") == 0 ?
				      "{\"type\":\"turn.completed\",\"usage\":{}}\n" : "";
	char *line = final ? json_dumps(final, JSON_COMPACT) : NULL;

	json_decref(final);
	if (!line || asprintf(&result->stdout_data, "%s\n%s", line, trailer) < 0)
		result->stdout_data = NULL;
	free(line);
	result->stdout_len = result->stdout_data ? strlen(result->stdout_data) : 0;
	result->stderr_data = strdup("");
	result->exit_code = 0;
	return result->stdout_data && result->stderr_data ? 1 : -ENOMEM;
}

/* Each agent: "send: TEXT" broadcasts TEXT, "read" answers with its inbox. */
static int test_agent_exec(struct box *box, void *opaque, const struct box_exec_request *req,
			   struct box_exec_result *result)
{
	const char *program = strrchr(req->program, '/') ? strrchr(req->program, '/') + 1 :
							   req->program;
	const char *prompt = strcmp(program, "codex") == 0 ? req->args[req->arg_count - 1]
							    : arg_after(req, "-p");
	const char *url = env_of(req, "VOID_SIDECAR_URL");
	struct test_agent_seen *agent;
	char body[TEST_TEXT_MAX];

	(void)opaque;
	if (strcmp(program, "claude-code") != 0 && strcmp(program, "codex") != 0)
		return 0;
	if (seen_count == TEST_AGENTS_MAX)
		return -E2BIG;
	agent = &seen[seen_count++];
	snprintf(agent->name, sizeof(agent->name), "%.*s", (int)strcspn(prompt, " \n"), prompt);
	snprintf(agent->url, sizeof(agent->url), "%s", url ? url : "");
	agent->mcp_has_void = url && file_mentions(box, "/workspace/.mcp.json", "void-mcp", url);
	agent->codex_has_void = url && file_mentions(box, "/home/sandbox/.codex/config.toml",
						     "[mcp_servers.void]", url);
	agent->has_skill = file_mentions(box, "/workspace/.claude/skills/void-messaging.md",
					 "void-message send", "read_peer_messages");
	if (url && strstr(prompt, "send: ")) {
		const char *text = strstr(prompt, "send: ") + strlen("send: ");

		snprintf(body, sizeof(body),
			 "{\"kind\":\"signal\",\"audience\":\"broadcast\",\"payload\":{\"summary_text\":\"%.*s\"}}",
			 (int)strcspn(text, "\n"), text);
		test_sidecar(url, "POST", "/v1/intents", body, agent->answer);
	} else if (url && strstr(prompt, "read")) {
		test_sidecar(url, "GET", "/v1/inbox", NULL, agent->answer);
	}
	return test_answer(result, program, agent->answer[0] ? agent->answer : "no messaging");
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

static const char pipeline_yaml[] =
	"api_version: v1\nkind: pipeline\nname: chat\nsandbox: {mode: mock}\n"
	"pipeline:\n"
	"  boxes:\n"
	"    - {name: scout, prompt: \"scout send: the door is blue\", messaging: {enabled: true}}\n"
	"    - {name: reader, prompt: \"reader read\", messaging: {enabled: true}}\n"
	"    - {name: loner, prompt: \"loner read\"}\n"
	"  stages:\n"
	"    - {type: box, name: scout}\n"
	"    - {type: box, name: reader}\n"
	"    - {type: box, name: loner}\n";

static const struct test_agent_seen *find(const char *name)
{
	for (size_t i = 0; i < seen_count; i++)
		if (strcmp(seen[i].name, name) == 0)
			return &seen[i];
	return NULL;
}

static void test_pipeline_intent_reaches_next_agent(void)
{
	struct pipeline_options options = { .agent.mock_exec = test_agent_exec };
	const struct test_agent_seen *scout, *reader, *loner;
	struct spec *spec = load(pipeline_yaml);
	struct run_report report;
	json_t *inbox, *entry;

	CHECK(spec != NULL);
	if (!spec)
		return;
	seen_count = 0;
	CHECK_INT_EQ(run_report_init(&report, spec->name, spec->kind), 0);
	CHECK_INT_EQ(pipeline_run(spec, &options, &report), 0);
	scout = find("scout");
	reader = find("reader");
	loner = find("loner");
	CHECK(scout && reader && loner);
	if (!scout || !reader || !loner)
		goto out;
	CHECK(strncmp(scout->url, TEST_GUEST_PREFIX, strlen(TEST_GUEST_PREFIX)) == 0);
	CHECK(strcmp(scout->url, reader->url) != 0); /* one listener per member */
	CHECK(scout->mcp_has_void && reader->mcp_has_void);
	CHECK(scout->has_skill && reader->has_skill && !loner->has_skill);
	CHECK_STR_EQ(loner->url, "");
	CHECK(strstr(scout->answer, "\"intent_id\"") != NULL);
	inbox = json_loads(reader->answer, 0, NULL);
	entry = json_array_get(json_object_get(inbox, "entries"), 0);
	CHECK_INT_EQ(json_array_size(json_object_get(inbox, "entries")), 1);
	CHECK_STR_EQ(json_string_value(json_object_get(entry, "from_candidate_id")), "scout");
	CHECK_STR_EQ(json_string_value(json_object_get(json_object_get(entry, "payload"),
						       "summary_text")),
		     "the door is blue");
	CHECK_STR_EQ(json_string_value(json_object_get(inbox, "run_id")), "chat");
	json_decref(inbox);
out:
	run_report_free(&report);
	spec_free(spec);
}

static void test_codex_agent_gets_config_toml(void)
{
	static const char yaml[] =
		"api_version: v1\nkind: agent\nname: solo\nsandbox: {mode: mock}\n"
		"llm: {provider: codex}\n"
		"agent:\n  prompt: \"solo read\"\n  messaging: {enabled: true}\n";
	struct agent_options options = { .mock_exec = test_agent_exec,
					 .messaging = { .run_id = "run-42" } };
	struct spec *spec = load(yaml);
	struct run_report report;
	const struct test_agent_seen *solo;

	CHECK(spec != NULL);
	if (!spec)
		return;
	seen_count = 0;
	CHECK_INT_EQ(run_report_init(&report, spec->name, spec->kind), 0);
	CHECK_INT_EQ(agent_run(spec, &options, &report), 0);
	solo = find("solo");
	CHECK(solo && solo->codex_has_void);
	/* the run id the daemon passes names the run; the inbox is empty (no peers) */
	CHECK(solo && strstr(solo->answer, "\"run_id\":\"run-42\"") &&
	      strstr(solo->answer, "\"entries\":[]"));
	run_report_free(&report);
	spec_free(spec);
}

static const char *examples_dir = "examples";

static void test_example_runs_in_mock_mode(void)
{
	struct spec_diagnostics diag;
	struct run_report report;
	char path[TEST_TEXT_MAX];
	struct spec *spec;

	snprintf(path, sizeof(path), "%s/messaging-pipeline.yaml", examples_dir);
	spec_diagnostics_init(&diag);
	spec = spec_load_file(path, &diag);
	if (!spec || diag.count)
		spec_diagnostics_print(&diag, stderr);
	CHECK(spec != NULL && diag.count == 0);
	spec_diagnostics_free(&diag);
	if (!spec)
		return;
	CHECK(spec->pipeline.box_count == 2 && spec->pipeline.boxes[0].messaging.enabled &&
	      spec->pipeline.boxes[1].messaging.enabled);
	CHECK_INT_EQ(run_report_init(&report, spec->name, spec->kind), 0);
	CHECK_INT_EQ(pipeline_run(spec, NULL, &report), 0);
	CHECK(report.success);
	run_report_free(&report);
	spec_free(spec);
}

int main(int argc, char **argv)
{
	if (argc > 1)
		examples_dir = argv[1];
	curl_global_init(CURL_GLOBAL_DEFAULT);
	RUN_TEST(test_pipeline_intent_reaches_next_agent);
	RUN_TEST(test_codex_agent_gets_config_toml);
	RUN_TEST(test_example_runs_in_mock_mode);
	curl_global_cleanup();
	return harness_finish();
}
