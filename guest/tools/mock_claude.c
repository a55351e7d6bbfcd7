/*
 * voidbox-mock-claude: a deterministic stand-in for claude-code, installed as
 * /usr/local/bin/claude-code in the test image so agent and pipeline runs are exercised end to
 * end without a model or a network.
 *
 * It accepts claude-code's command line (-p PROMPT, --output-format stream-json, --verbose,
 * --model M, --settings JSON, --mcp-config PATH, --dangerously-skip-permissions) and writes the
 * same stream-json events the real tool does: one `system` init event, then one `assistant`
 * tool_use / `user` tool_result pair per tool call, then one `result` event with cost, tokens
 * and turns. Everything comes from the scenario and MOCK_CLAUDE_* knobs, never from a clock
 * or a random source, so the host's parser can be tested against exact numbers.
 *
 * Like the real agent it honours the prompt's "Write your output to PATH." instruction (that is
 * how pipelines carry output between stages) and reports the skills and MCP servers it finds
 * under the workspace. MOCK_CLAUDE_ROOT prefixes every guest path (the workspace and the output
 * file) and MOCK_CLAUDE_WORKSPACE relocates /workspace alone, so the host's unit tests can run
 * the very same binary.
 *
 * MOCK_CLAUDE_BASH is a shell command the mock runs (sh -c) before it answers, as an agent's
 * Bash tool would; its stdout and exit status join the result text. VM tests use it to make a
 * "model" act inside the guest, e.g. call void-message (docs/messaging.md).
 *
 * MOCK_CLAUDE_SERVE=1 makes it a service-mode agent: after writing its output file it waits
 * for SIGTERM (blocked from the start, so an early stop is not lost), then ends as usual with
 * its result event and exit 0, as a service that shuts down cleanly does.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <signal.h>

#include <jansson.h>

#define MOCK_DEFAULT_WORKSPACE "/workspace"
#define MOCK_DEFAULT_MODEL "claude-sonnet-4-20250514"
#define MOCK_DEFAULT_INPUT_TOKENS 500ull
#define MOCK_DEFAULT_OUTPUT_TOKENS 200ull
#define MOCK_DEFAULT_COST 0.003
#define MOCK_DEFAULT_ERROR "mock error: the scenario asked for a failure"
#define MOCK_SESSION_ID "mock-session-0001"
#define MOCK_OUTPUT_MARKER "Write your output to "
#define MOCK_PROMPT_EXCERPT_MAX 60
#define MOCK_SKILL_READ_MAX 4096
#define MOCK_API_MS_PER_TURN 100ull
#define MOCK_MAX_COUNT 10000ul
#define MOCK_MAX_SKILLS 256
/* significant digits of a cost, so 0.003 prints as 0.003 */
#define MOCK_COST_DIGITS 10
#define MOCK_EXIT_ERROR 1
#define MOCK_EXIT_USAGE 2
#define MOCK_BASH_ENV "MOCK_CLAUDE_BASH"
#define MOCK_BASH_OUTPUT_MAX (16u * 1024u)

enum mock_scenario {
	MOCK_SCENARIO_SIMPLE,
	MOCK_SCENARIO_MULTI_TOOL,
	MOCK_SCENARIO_ERROR,
	MOCK_SCENARIO_HEAVY,
	MOCK_SCENARIO_CUSTOM,
};

struct mock_scenario_shape {
	const char *name;
	enum mock_scenario scenario;
	unsigned long tools;
	unsigned long turns;
};

static const struct mock_scenario_shape mock_scenarios[] = {
	{ "simple", MOCK_SCENARIO_SIMPLE, 1, 1 },
	{ "multi_tool", MOCK_SCENARIO_MULTI_TOOL, 5, 3 },
	{ "error", MOCK_SCENARIO_ERROR, 1, 1 },
	{ "heavy", MOCK_SCENARIO_HEAVY, 20, 10 },
	{ "custom", MOCK_SCENARIO_CUSTOM, 0, 0 },
};

/* The tools a call rotates through, as claudio does. */
static const char *const mock_tool_names[] = { "Write", "Read", "Bash", "Glob", "Grep" };
#define MOCK_TOOL_NAME_COUNT (sizeof(mock_tool_names) / sizeof(mock_tool_names[0]))

struct mock_config {
	char workspace_buf[PATH_MAX];
	const char *root; /* prefix of guest paths; "" in the guest */
	const char *prompt;
	const char *model;
	const char *mcp_config;
	const char *workspace;
	const struct mock_scenario_shape *shape;
	unsigned long tools;
	unsigned long turns;
	unsigned long long input_tokens;
	unsigned long long output_tokens;
	double cost;
	unsigned long delay_ms;
	const char *error_text;
	const char *traceparent;
};

struct mock_findings {
	json_t *skills;      /* array of skill names */
	json_t *skill_paths; /* array of paths, parallel to skills */
	json_t *mcp_servers; /* array of server names */
};

static unsigned long long mock_env_number(const char *name, unsigned long long fallback)
{
	const char *text = getenv(name);
	char *end;
	unsigned long long value;

	if (!text || !*text)
		return fallback;
	errno = 0;
	value = strtoull(text, &end, 10);
	if (errno || *end || text[0] == '-') {
		fprintf(stderr, "claude-code (mock): %s must be a whole number, not '%s'; using %llu\n",
			name, text, fallback);
		return fallback;
	}
	return value;
}

static double mock_env_cost(const char *name, double fallback)
{
	const char *text = getenv(name);
	char *end;
	double value;

	if (!text || !*text)
		return fallback;
	value = strtod(text, &end);
	if (*end || value < 0) {
		fprintf(stderr, "claude-code (mock): %s must be a non-negative number, not '%s'\n",
			name, text);
		return fallback;
	}
	return value;
}

static const struct mock_scenario_shape *mock_scenario_find(const char *name)
{
	for (size_t i = 0; i < sizeof(mock_scenarios) / sizeof(mock_scenarios[0]); i++)
		if (strcmp(mock_scenarios[i].name, name) == 0)
			return &mock_scenarios[i];
	return NULL;
}

static void mock_usage(void)
{
	fprintf(stderr,
		"usage: claude-code -p PROMPT [--output-format stream-json] [--verbose] [--model M]\n"
		"                   [--settings JSON] [--mcp-config PATH] [--dangerously-skip-permissions]\n"
		"This is voidbox's deterministic mock; see docs/agents.md for MOCK_CLAUDE_* knobs.\n");
}

static int mock_parse_args(int argc, char **argv, struct mock_config *cfg)
{
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		bool has_value = i + 1 < argc;

		if ((strcmp(arg, "-p") == 0 || strcmp(arg, "--print") == 0) && has_value) {
			cfg->prompt = argv[++i];
		} else if (strcmp(arg, "--model") == 0 && has_value) {
			cfg->model = argv[++i];
		} else if (strcmp(arg, "--mcp-config") == 0 && has_value) {
			cfg->mcp_config = argv[++i];
		} else if ((strcmp(arg, "--output-format") == 0 || strcmp(arg, "--settings") == 0) &&
			   has_value) {
			i++; /* accepted; the mock only speaks stream-json */
		} else if (strcmp(arg, "--verbose") == 0 ||
			   strcmp(arg, "--dangerously-skip-permissions") == 0) {
			continue;
		} else if (strcmp(arg, "--version") == 0) {
			printf("0.0.0 (voidbox mock claude-code)\n");
			exit(0);
		} else {
			fprintf(stderr, "claude-code (mock): unknown argument '%s'\n", arg);
			mock_usage();
			return -EINVAL;
		}
	}
	if (!cfg->prompt) {
		fprintf(stderr, "claude-code (mock): no prompt: pass -p PROMPT\n");
		mock_usage();
		return -EINVAL;
	}
	return 0;
}

static int mock_load_config(int argc, char **argv, struct mock_config *cfg)
{
	const char *scenario = getenv("MOCK_CLAUDE_SCENARIO");
	const char *model = getenv("MOCK_CLAUDE_MODEL");
	const char *workspace = getenv("MOCK_CLAUDE_WORKSPACE");
	const char *error_text = getenv("MOCK_CLAUDE_ERROR");

	memset(cfg, 0, sizeof(*cfg));
	cfg->shape = mock_scenario_find(scenario && *scenario ? scenario : "simple");
	if (!cfg->shape) {
		fprintf(stderr, "claude-code (mock): MOCK_CLAUDE_SCENARIO '%s' is unknown; use simple, multi_tool, error, heavy or custom\n",
			scenario);
		return -EINVAL;
	}
	cfg->tools = (unsigned long)mock_env_number("MOCK_CLAUDE_TOOLS", cfg->shape->tools);
	cfg->turns = (unsigned long)mock_env_number("MOCK_CLAUDE_TURNS", cfg->shape->turns);
	if (cfg->tools > MOCK_MAX_COUNT)
		cfg->tools = MOCK_MAX_COUNT;
	if (cfg->turns > MOCK_MAX_COUNT)
		cfg->turns = MOCK_MAX_COUNT;
	cfg->input_tokens = mock_env_number("MOCK_CLAUDE_INPUT_TOKENS", MOCK_DEFAULT_INPUT_TOKENS);
	cfg->output_tokens =
		mock_env_number("MOCK_CLAUDE_OUTPUT_TOKENS", MOCK_DEFAULT_OUTPUT_TOKENS);
	cfg->cost = mock_env_cost("MOCK_CLAUDE_COST", MOCK_DEFAULT_COST);
	cfg->delay_ms = (unsigned long)mock_env_number("MOCK_CLAUDE_DELAY_MS", 0);
	cfg->model = model && *model ? model : MOCK_DEFAULT_MODEL;
	cfg->root = getenv("MOCK_CLAUDE_ROOT") ? getenv("MOCK_CLAUDE_ROOT") : "";
	snprintf(cfg->workspace_buf, sizeof(cfg->workspace_buf), "%s%s", cfg->root,
		 MOCK_DEFAULT_WORKSPACE);
	cfg->workspace = workspace && *workspace ? workspace : cfg->workspace_buf;
	cfg->error_text = error_text && *error_text ? error_text : NULL;
	cfg->traceparent = getenv("TRACEPARENT");
	return mock_parse_args(argc, argv, cfg);
}

static void mock_delay(const struct mock_config *cfg)
{
	struct timespec pause;

	if (!cfg->delay_ms)
		return;
	pause.tv_sec = (time_t)(cfg->delay_ms / 1000);
	pause.tv_nsec = (long)(cfg->delay_ms % 1000) * 1000000L;
	while (nanosleep(&pause, &pause) < 0 && errno == EINTR)
		;
}

/* Prints one event as a single line and flushes, so the host sees it as it happens. */
static void mock_emit(const struct mock_config *cfg, json_t *event)
{
	char *line = json_dumps(event, JSON_COMPACT | JSON_PRESERVE_ORDER |
				       JSON_REAL_PRECISION(MOCK_COST_DIGITS));

	if (line) {
		fputs(line, stdout);
		fputc('\n', stdout);
		fflush(stdout);
		free(line);
	}
	json_decref(event);
	mock_delay(cfg);
}

static int mock_name_compare(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Skill files are /workspace/.claude/skills/<name>.md, reported sorted by name. */
static void mock_find_skills(const struct mock_config *cfg, struct mock_findings *found)
{
	char dir_path[PATH_MAX];
	char *names[MOCK_MAX_SKILLS];
	size_t count = 0;
	struct dirent *entry;
	DIR *dir;

	snprintf(dir_path, sizeof(dir_path), "%s/.claude/skills", cfg->workspace);
	dir = opendir(dir_path);
	if (!dir)
		return;
	while ((entry = readdir(dir)) && count < sizeof(names) / sizeof(names[0])) {
		size_t len = strlen(entry->d_name);

		if (len > 3 && strcmp(entry->d_name + len - 3, ".md") == 0)
			names[count++] = strndup(entry->d_name, len - 3);
	}
	closedir(dir);
	qsort(names, count, sizeof(names[0]), mock_name_compare);
	for (size_t i = 0; i < count; i++) {
		char path[PATH_MAX];

		if (!names[i])
			continue;
		if (snprintf(path, sizeof(path), "%s/%s.md", dir_path, names[i]) >=
		    (int)sizeof(path)) {
			free(names[i]);
			continue;
		}
		json_array_append_new(found->skills, json_string(names[i]));
		json_array_append_new(found->skill_paths, json_string(path));
		free(names[i]);
	}
}

/* MCP servers come from --mcp-config, else .mcp.json, else .claude/mcp.json in the workspace. */
static void mock_find_mcp(const struct mock_config *cfg, struct mock_findings *found)
{
	char path[PATH_MAX];
	const char *key;
	json_t *root, *servers, *value;

	if (cfg->mcp_config)
		snprintf(path, sizeof(path), "%s%s", cfg->root, cfg->mcp_config);
	else
		snprintf(path, sizeof(path), "%s/.mcp.json", cfg->workspace);
	root = json_load_file(path, 0, NULL);
	if (!root && !cfg->mcp_config) {
		snprintf(path, sizeof(path), "%s/.claude/mcp.json", cfg->workspace);
		root = json_load_file(path, 0, NULL);
	}
	if (!root)
		return;
	servers = json_object_get(root, "mcpServers");
	json_object_foreach(servers, key, value)
		json_array_append_new(found->mcp_servers, json_string(key));
	json_decref(root);
}

static json_t *mock_usage_json(unsigned long long input_tokens, unsigned long long output_tokens)
{
	return json_pack("{sIsI}", "input_tokens", (json_int_t)input_tokens, "output_tokens",
			 (json_int_t)output_tokens);
}

static void mock_emit_init(const struct mock_config *cfg, const struct mock_findings *found)
{
	json_t *tools = json_array();
	json_t *event;

	for (size_t i = 0; i < MOCK_TOOL_NAME_COUNT; i++)
		json_array_append_new(tools, json_string(mock_tool_names[i]));
	event = json_pack("{sssssssssOsOsOss}", "type", "system", "subtype", "init",
			  "session_id", MOCK_SESSION_ID, "model", cfg->model, "tools", tools,
			  "skills", found->skills, "mcp_servers", found->mcp_servers, "cwd",
			  cfg->workspace);
	json_decref(tools);
	if (event && cfg->traceparent)
		json_object_set_new(event, "traceparent", json_string(cfg->traceparent));
	if (event)
		mock_emit(cfg, event);
}

/* Reads up to MOCK_SKILL_READ_MAX bytes of a skill for a Read tool result. */
static json_t *mock_read_excerpt(const char *path)
{
	char buf[MOCK_SKILL_READ_MAX + 1];
	json_t *excerpt;
	size_t got;
	FILE *file = fopen(path, "r");

	if (!file)
		return json_string("(skill file unreadable)");
	got = fread(buf, 1, MOCK_SKILL_READ_MAX, file);
	fclose(file);
	buf[got] = '\0';
	excerpt = json_stringn(buf, got);
	return excerpt ? excerpt : json_string("(skill file is not UTF-8)");
}

/* Share `total` over `parts` calls: the first ones take the remainder. */
static unsigned long long mock_share(unsigned long long total, unsigned long parts,
				     unsigned long index)
{
	unsigned long long each = total / parts;

	return each + (index < total % parts ? 1 : 0);
}

static void mock_emit_tool_call(const struct mock_config *cfg, const struct mock_findings *found,
				unsigned long index, unsigned long calls)
{
	size_t skill_count = json_array_size(found->skills);
	size_t mcp_count = json_array_size(found->mcp_servers);
	unsigned long rotating = calls - (unsigned long)mcp_count;
	char tool_id[32], tool_name[128];
	json_t *input, *result_text, *event;

	snprintf(tool_id, sizeof(tool_id), "toolu_mock_%04lu", index + 1);
	if (index >= rotating) {
		const char *server =
			json_string_value(json_array_get(found->mcp_servers, index - rotating));

		snprintf(tool_name, sizeof(tool_name), "mcp__%s", server);
		input = json_pack("{ss}", "server", server);
		result_text = json_sprintf("mcp server %s answered", server);
	} else {
		const char *name = mock_tool_names[index % MOCK_TOOL_NAME_COUNT];

		snprintf(tool_name, sizeof(tool_name), "%s", name);
		if (strcmp(name, "Read") == 0 && skill_count) {
			const char *path = json_string_value(
				json_array_get(found->skill_paths, index % skill_count));

			input = json_pack("{ss}", "file_path", path);
			result_text = mock_read_excerpt(path);
		} else {
			input = json_pack("{sI}", "step", (json_int_t)index + 1);
			result_text = json_sprintf("%s step %lu done", name, index + 1);
		}
	}
	event = json_pack("{sss{sssss[{ssssssso}]so}ss}", "type", "assistant", "message",
			  "role", "assistant", "model", cfg->model, "content", "type", "tool_use",
			  "id", tool_id, "name", tool_name, "input", input, "usage",
			  mock_usage_json(mock_share(cfg->input_tokens, calls, index),
					  mock_share(cfg->output_tokens, calls, index)),
			  "session_id", MOCK_SESSION_ID);
	if (event)
		mock_emit(cfg, event);
	event = json_pack("{sss{sss[{sssssosb}]}ss}", "type", "user", "message", "role", "user",
			  "content", "type", "tool_result", "tool_use_id", tool_id, "content",
			  result_text, "is_error", false, "session_id", MOCK_SESSION_ID);
	if (event)
		mock_emit(cfg, event);
}

/* "mock: <excerpt of the prompt's first line>; skills: a, b; mcp: x" */
static char *mock_summary(const struct mock_config *cfg, const struct mock_findings *found)
{
	size_t first_line = strcspn(cfg->prompt, "\n");
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);
	json_t *name;
	size_t i;

	if (!out)
		return NULL;
	if (first_line > MOCK_PROMPT_EXCERPT_MAX)
		first_line = MOCK_PROMPT_EXCERPT_MAX;
	fprintf(out, "mock: completed '%.*s'", (int)first_line, cfg->prompt);
	fprintf(out, "; skills: ");
	json_array_foreach(found->skills, i, name)
		fprintf(out, "%s%s", i ? ", " : "", json_string_value(name));
	if (!json_array_size(found->skills))
		fprintf(out, "none");
	fprintf(out, "; mcp: ");
	json_array_foreach(found->mcp_servers, i, name)
		fprintf(out, "%s%s", i ? ", " : "", json_string_value(name));
	if (!json_array_size(found->mcp_servers))
		fprintf(out, "none");
	fclose(out);
	return text;
}

/* The path after "Write your output to " up to the final '.', or NULL. */
static char *mock_output_path(const char *prompt)
{
	const char *marker = NULL, *next = prompt;
	size_t len;

	while ((next = strstr(next, MOCK_OUTPUT_MARKER))) {
		marker = next;
		next += strlen(MOCK_OUTPUT_MARKER);
	}
	if (!marker)
		return NULL;
	marker += strlen(MOCK_OUTPUT_MARKER);
	len = strcspn(marker, "\n");
	while (len > 0 && (marker[len - 1] == '.' || marker[len - 1] == ' '))
		len--;
	return len && marker[0] == '/' ? strndup(marker, len) : NULL;
}

static void mock_write_output(const struct mock_config *cfg, const char *summary)
{
	char *guest_path = mock_output_path(cfg->prompt);
	char *path = NULL;
	json_t *doc;

	if (!guest_path)
		return;
	if (asprintf(&path, "%s%s", cfg->root, guest_path) < 0) {
		free(guest_path);
		return;
	}
	free(guest_path);
	doc = json_pack("{sssssI}", "agent", "voidbox-mock-claude", "result", summary,
			"prompt_chars", (json_int_t)strlen(cfg->prompt));
	if (!doc || json_dump_file(doc, path, JSON_COMPACT | JSON_PRESERVE_ORDER) < 0)
		fprintf(stderr, "claude-code (mock): cannot write the output file %s: %s\n", path,
			strerror(errno));
	json_decref(doc);
	free(path);
}

/* Runs $MOCK_CLAUDE_BASH and appends "; bash (exit N): <stdout>" to *summary. */
static void mock_run_bash(char **summary)
{
	const char *command = getenv(MOCK_BASH_ENV);
	char output[MOCK_BASH_OUTPUT_MAX + 1];
	char *joined = NULL;
	size_t got;
	int status;
	FILE *pipe;

	if (!command || !*command)
		return;
	fflush(stdout);
	pipe = popen(command, "r");
	if (!pipe) {
		fprintf(stderr, "claude-code (mock): cannot run %s: %s\n", MOCK_BASH_ENV,
			strerror(errno));
		return;
	}
	got = fread(output, 1, MOCK_BASH_OUTPUT_MAX, pipe);
	output[got] = '\0';
	while (fgetc(pipe) != EOF)
		;
	status = pclose(pipe);
	while (got && output[got - 1] == '\n')
		output[--got] = '\0';
	if (asprintf(&joined, "%s; bash (exit %d): %s", *summary,
		     WIFEXITED(status) ? WEXITSTATUS(status) : -1, output) >= 0) {
		free(*summary);
		*summary = joined;
	}
}

static void mock_emit_result(const struct mock_config *cfg, const char *summary, bool is_error)
{
	unsigned long long api_ms = MOCK_API_MS_PER_TURN * cfg->turns;
	json_t *event;

	event = json_pack("{sssssbsIsIsIsssssfso}", "type", "result", "subtype",
			  is_error ? "error_during_execution" : "success", "is_error", is_error,
			  "duration_ms", (json_int_t)(api_ms + cfg->delay_ms), "duration_api_ms",
			  (json_int_t)api_ms, "num_turns", (json_int_t)cfg->turns, "result",
			  summary, "session_id", MOCK_SESSION_ID, "total_cost_usd", cfg->cost,
			  "usage", mock_usage_json(cfg->input_tokens, cfg->output_tokens));
	if (event)
		mock_emit(cfg, event);
}

/* MOCK_CLAUDE_CUSTOM_JSONL names a file replayed line by line, verbatim. */
static int mock_replay_custom(const struct mock_config *cfg)
{
	const char *path = getenv("MOCK_CLAUDE_CUSTOM_JSONL");
	char *line = NULL;
	size_t capacity = 0;
	FILE *file;

	if (!path || !*path) {
		fprintf(stderr, "claude-code (mock): scenario custom needs MOCK_CLAUDE_CUSTOM_JSONL=<file of events>\n");
		return MOCK_EXIT_USAGE;
	}
	file = fopen(path, "r");
	if (!file) {
		fprintf(stderr, "claude-code (mock): cannot open %s: %s\n", path, strerror(errno));
		return MOCK_EXIT_ERROR;
	}
	while (getline(&line, &capacity, file) > 0) {
		fputs(line, stdout);
		fflush(stdout);
		mock_delay(cfg);
	}
	free(line);
	fclose(file);
	return 0;
}

/* MOCK_CLAUDE_SERVE=1: SIGTERM is blocked now and waited for once the output is written. */
static bool mock_serve_begin(sigset_t *term)
{
	const char *serve = getenv("MOCK_CLAUDE_SERVE");

	if (!serve || strcmp(serve, "1") != 0)
		return false;
	sigemptyset(term);
	sigaddset(term, SIGTERM);
	sigprocmask(SIG_BLOCK, term, NULL);
	return true;
}

static void mock_serve_until_stopped(const sigset_t *term)
{
	int signal_number;

	fflush(stdout);
	fprintf(stderr, "claude-code (mock): serving until SIGTERM\n");
	sigwait(term, &signal_number);
}

int main(int argc, char **argv)
{
	struct mock_config cfg;
	struct mock_findings found;
	bool is_error, serve;
	sigset_t term;
	char *summary;
	unsigned long calls;

	serve = mock_serve_begin(&term);
	if (mock_load_config(argc, argv, &cfg) < 0)
		return MOCK_EXIT_USAGE;
	if (cfg.shape->scenario == MOCK_SCENARIO_CUSTOM)
		return mock_replay_custom(&cfg);

	found.skills = json_array();
	found.skill_paths = json_array();
	found.mcp_servers = json_array();
	mock_find_skills(&cfg, &found);
	mock_find_mcp(&cfg, &found);
	mock_emit_init(&cfg, &found);

	/* every MCP server gets one call on top of the scenario's rotating tools */
	calls = cfg.tools + (unsigned long)json_array_size(found.mcp_servers);
	for (unsigned long i = 0; i < calls; i++)
		mock_emit_tool_call(&cfg, &found, i, calls);

	is_error = cfg.shape->scenario == MOCK_SCENARIO_ERROR || cfg.error_text;
	if (is_error)
		summary = strdup(cfg.error_text ? cfg.error_text : MOCK_DEFAULT_ERROR);
	else
		summary = mock_summary(&cfg, &found);
	if (!summary)
		return MOCK_EXIT_ERROR;
	if (!is_error)
		mock_run_bash(&summary);
	if (!is_error)
		mock_write_output(&cfg, summary);
	if (serve)
		mock_serve_until_stopped(&term);
	mock_emit_result(&cfg, summary, is_error);
	free(summary);
	json_decref(found.skills);
	json_decref(found.skill_paths);
	json_decref(found.mcp_servers);
	return is_error ? MOCK_EXIT_ERROR : 0;
}
