/*
 * One agent invocation, in upstream's provisioning order: skills, claude bootstrap files,
 * ownership, the claude-code probe, the input file, the exec, then the output file. Each step
 * is a short function that leaves a sentence in the stage on failure, so a report always says
 * which step stopped the run and what to do about it.
 *
 * The report's numbers come from one parse of the agent's complete stdout after the exec.
 * While it runs, a second, live parser reads the output chunk by chunk as the box delivers it
 * and tells the report's observer one line per stream-json event (`[tool_use] Bash`, ...), so
 * a daemon run shows the agent's progress as it happens; it never decides the outcome.
 * A `mode: service` agent runs with no timeout under a service watcher (service.h), which
 * publishes its output file while it runs and stops it on request.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/log.h"
#include "runtime/agent.h"
#include "runtime/codex_json.h"
#include "runtime/llm.h"
#include "runtime/service.h"
#include "runtime/skills.h"
#include "runtime/stream_json.h"
#include "store/agent_flavour.h"

#define AGENT_ERROR_MAX 1024
#define AGENT_CLAUDE_JSON "{\"hasCompletedOnboarding\":true}\n"
#define AGENT_SETTINGS_JSON "{\"skipWebFetchPreflight\":true}\n"
#define AGENT_CHOWN_SCRIPT "chown -R 1000:1000 /workspace /home/sandbox"
#define AGENT_PROBE_SCRIPT "command -v " LLM_CLAUDE_PROGRAM
#define AGENT_PROBE_TIMEOUT_SECS 30u
#define AGENT_HOST_CREDENTIALS ".claude/.credentials.json"
#define AGENT_CREDENTIALS_MAX (1u << 20)
#define AGENT_MOCK_SESSION "mock-box-session"
#define AGENT_MOCK_MODEL "voidbox-mock"
#define AGENT_OUTPUT_MARKER "Write your output to "
#define AGENT_MOCK_EXCERPT_MAX 60

static int agent_fail(struct run_stage *stage, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int agent_fail(struct run_stage *stage, int rc, const char *fmt, ...)
{
	char text[AGENT_ERROR_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	stage->success = false;
	if (run_stage_set_error(stage, "%s", text) < 0)
		return -ENOMEM;
	return rc;
}

static int agent_write(struct box *box, struct run_stage *stage, const char *path,
		       const void *data, size_t len)
{
	int rc = box_write_file(box, path, data, len);

	if (rc < 0)
		return agent_fail(stage, rc, "cannot write %s in the sandbox: %s", path,
				  box_last_error());
	return 0;
}

static int agent_provision_skills(struct box *box, const struct agent_task *task,
				  struct run_stage *stage, bool *has_mcp)
{
	struct skill_plan plan;
	char err[AGENT_ERROR_MAX] = "";
	int rc;

	*has_mcp = false;
	rc = skills_plan_build(task->skills, task->skill_count, &plan, err, sizeof(err));
	if (rc < 0)
		return agent_fail(stage, rc, "%s", err);
	rc = box_mkdir_p(box, SKILLS_GUEST_DIR);
	if (rc < 0)
		rc = agent_fail(stage, rc, "cannot create %s in the sandbox: %s",
				SKILLS_GUEST_DIR, box_last_error());
	for (size_t i = 0; rc == 0 && i < plan.count; i++) {
		const struct skill_plan_item *item = &plan.items[i];

		if (item->guest_path && item->content)
			rc = agent_write(box, stage, item->guest_path, item->content,
					 item->content_len);
	}
	if (rc == 0 && task->sidecar_url)
		rc = agent_write(box, stage, RUN_MESSAGING_SKILL_PATH, RUN_MESSAGING_SKILL,
				 strlen(RUN_MESSAGING_SKILL));
	if (rc == 0 && task->sidecar_url) {
		char *merged = run_messaging_mcp_json(plan.mcp_json, task->sidecar_url);

		if (!merged)
			rc = agent_fail(stage, -ENOMEM, "cannot add void-mcp to %s",
					SKILLS_MCP_CONFIG_PATH);
		free(plan.mcp_json);
		plan.mcp_json = merged;
	}
	if (rc == 0 && plan.mcp_json) {
		rc = agent_write(box, stage, SKILLS_MCP_CONFIG_PATH, plan.mcp_json,
				 strlen(plan.mcp_json));
		*has_mcp = rc == 0;
	}
	skills_plan_free(&plan);
	return rc;
}

/* codex reads its MCP servers from config.toml, not .mcp.json. */
static int agent_provision_codex_messaging(struct box *box, const struct agent_task *task,
					   struct run_stage *stage)
{
	char *toml = run_messaging_codex_toml(task->sidecar_url);
	int rc;

	if (!toml)
		return agent_fail(stage, -ENOMEM, "out of memory");
	rc = agent_write(box, stage, RUN_MESSAGING_CODEX_CONFIG_PATH, toml, strlen(toml));
	free(toml);
	return rc;
}

static char *agent_read_host_file(const char *path, size_t max, size_t *len)
{
	FILE *file = fopen(path, "rb");
	char *data;

	if (!file)
		return NULL;
	data = malloc(max + 1);
	if (data) {
		*len = fread(data, 1, max + 1, file);
		if (*len > max) {
			free(data);
			data = NULL;
		}
	}
	fclose(file);
	return data;
}

static int agent_stage_credentials(struct box *box, const struct agent_task *task,
				   struct run_stage *stage)
{
	const char *home = task->host_env ? task->host_env("HOME", task->host_env_ctx) : NULL;
	char path[AGENT_ERROR_MAX];
	size_t len = 0;
	char *data;
	int rc;

	snprintf(path, sizeof(path), "%s/%s", home ? home : "", AGENT_HOST_CREDENTIALS);
	data = home ? agent_read_host_file(path, AGENT_CREDENTIALS_MAX, &len) : NULL;
	if (!data)
		return agent_fail(stage, -ENOENT,
				  "provider claude-personal needs the host's OAuth credentials in %s: log in with claude on the host, or use provider claude with ANTHROPIC_API_KEY",
				  path);
	rc = agent_write(box, stage, AGENT_CREDENTIALS_GUEST_PATH, data, len);
	free(data);
	return rc;
}

/* claude-code's first-run files, the user's ownership of them, and the binary's presence. */
static int agent_bootstrap_claude(struct box *box, const struct agent_task *task,
				  struct run_stage *stage)
{
	const char *chown_args[] = { "-c", AGENT_CHOWN_SCRIPT };
	const char *probe_args[] = { "-c", AGENT_PROBE_SCRIPT };
	struct box_exec_request req = { .program = "sh", .arg_count = 2,
					.timeout_secs = AGENT_PROBE_TIMEOUT_SECS };
	struct box_exec_result result;
	int rc;

	rc = agent_write(box, stage, AGENT_CLAUDE_JSON_PATH, AGENT_CLAUDE_JSON,
			 strlen(AGENT_CLAUDE_JSON));
	if (rc == 0)
		rc = agent_write(box, stage, AGENT_CLAUDE_SETTINGS_PATH, AGENT_SETTINGS_JSON,
				 strlen(AGENT_SETTINGS_JSON));
	if (rc == 0 && task->llm && task->llm->provider == SPEC_LLM_PROVIDER_CLAUDE_PERSONAL)
		rc = agent_stage_credentials(box, task, stage);
	if (rc < 0)
		return rc;

	req.args = chown_args;
	memset(&result, 0, sizeof(result));
	/* our guest agent already gives the files it writes to the sandbox user; this is upstream's
	 * belt and braces for images whose agent does not, so a failure is only worth a debug line */
	if (box_exec(box, &req, &result) < 0 || result.exit_code != 0)
		log_debug("agent", "[agent:%s] chown of /workspace and /home/sandbox failed (exit %d)",
			  task->name, result.exit_code);
	box_exec_result_free(&result);

	req.args = probe_args;
	memset(&result, 0, sizeof(result));
	rc = box_exec(box, &req, &result);
	if (rc == 0 && result.exit_code != 0)
		rc = -ENOENT;
	box_exec_result_free(&result);
	if (rc < 0)
		return agent_fail(stage, rc,
				  "claude-code is not in the guest image: boot the claude flavour image (voidbox image build --flavour claude; a spec's kernel, initramfs or VOID_BOX_* variables chose another), or for tests one with the mock (voidbox image build --name test --with-mock-agent, then VOID_BOX_INITRAMFS=<its initramfs>)");
	return 0;
}

static int agent_fill_stream(struct run_stage *stage, const struct llm_invocation *inv,
			     const struct box_exec_result *result)
{
	struct stream_json_result parsed;
	size_t tool_calls;
	int rc = inv->stream_json ?
			 stream_json_parse(result->stdout_data, result->stdout_len, &parsed) :
			 codex_json_parse(result->stdout_data, result->stdout_len, &parsed);

	if (rc < 0)
		return agent_fail(stage, rc, "cannot parse the agent's JSON output: %s",
				  strerror(-rc));
	stage->input_tokens = parsed.input_tokens;
	stage->output_tokens = parsed.output_tokens;
	stage->cost_usd = inv->local_provider ? 0.0 : parsed.cost_usd;
	stage->turns = parsed.num_turns;
	/* every call the agent made, also those past what the parser keeps */
	tool_calls = parsed.tool_call_count + parsed.tool_calls_dropped;
	stage->tool_calls = tool_calls > UINT32_MAX ? UINT32_MAX : (uint32_t)tool_calls;
	stage->is_error = parsed.is_error;
	rc = run_stage_set_output(stage, parsed.result_text ? parsed.result_text : "", SIZE_MAX);
	if (rc == 0 && !parsed.has_result_event)
		rc = agent_fail(stage, -ECANCELED,
				"%s ended (exit %d) without a result event: %.*s", inv->program,
				result->exit_code, (int)(result->stderr_len > 200 ? 200 :
							 result->stderr_len),
				result->stderr_data ? result->stderr_data : "");
	else if (rc == 0 && parsed.is_error)
		rc = agent_fail(stage, -ECANCELED, "the agent reported an error: %s",
				parsed.result_text ? parsed.result_text : "(no text)");
	stream_json_result_free(&parsed);
	return rc;
}

/* The live view of a running agent's output: stream-json events, else the raw text. */
struct agent_live {
	const struct run_report *report;
	const struct run_stage *stage;
	bool stream_json;
	struct stream_json_parser parser;
};

static void agent_live_event(void *opaque, const char *line, size_t len)
{
	struct agent_live *live = opaque;
	char text[STREAM_JSON_EVENT_TEXT_MAX + 1];

	memcpy(text, line, len);
	text[len] = '\n';
	run_report_stage_output(live->report, live->stage, false, text, len + 1);
}

static void agent_live_chunk(void *opaque, bool is_stderr, const void *data, size_t len)
{
	struct agent_live *live = opaque;

	if (is_stderr || !live->stream_json)
		run_report_stage_output(live->report, live->stage, is_stderr, data, len);
	else if (stream_json_parser_feed(&live->parser, data, len) < 0)
		live->stream_json = false; /* the final parse reports the problem */
}

static int agent_exec(struct box *box, const struct agent_task *task,
		      const struct llm_invocation *inv, struct run_stage *stage)
{
	struct box_env_var *env = calloc(inv->env_count + 1, sizeof(*env));
	struct box_exec_request req = {
		.program = inv->program, .args = (const char *const *)inv->args,
		.arg_count = inv->arg_count, .env = env, .env_count = inv->env_count,
		.working_dir = LLM_GUEST_WORKSPACE, .timeout_secs = task->timeout_secs,
	};
	const char *output_file = task->output_file ? task->output_file : SPEC_DEFAULT_OUTPUT_FILE;
	struct agent_live live = { .report = task->report, .stage = stage,
				   .stream_json = inv->stream_json };
	struct service_watch watch = { 0 };
	struct box_exec_result result;
	int rc;

	if (!env)
		return -ENOMEM;
	stream_json_parser_init(&live.parser);
	stream_json_parser_listen(&live.parser, agent_live_event, &live);
	if (task->report && task->report->observer && task->report->observer->stage_output) {
		req.on_chunk = agent_live_chunk;
		req.chunk_opaque = &live;
	}
	for (size_t i = 0; i < inv->env_count; i++)
		env[i] = (struct box_env_var){ inv->env[i].name, inv->env[i].value };
	/* the one slot calloc left over */
	if (task->sidecar_url)
		env[req.env_count++] = (struct box_env_var){ RUN_MESSAGING_URL_ENV,
							     task->sidecar_url };
	memset(&result, 0, sizeof(result));
	if (task->service) {
		req.service_name = task->name;
		if (service_watch_start(&watch, box, task->name, output_file, task->report,
					stage) < 0)
			log_warn("agent",
				 "[agent:%s] the service has no watcher: its output is published when it ends and it cannot be stopped",
				 task->name);
	}
	rc = box_exec(box, &req, &result);
	if (task->service)
		service_watch_finish(&watch);
	if (req.on_chunk) {
		struct stream_json_result unused;

		/* an unterminated last line still reaches the listener */
		if (live.stream_json && stream_json_parser_finish(&live.parser, &unused) == 0)
			stream_json_result_free(&unused);
	}
	stream_json_parser_free(&live.parser);
	free(env);
	if (rc < 0) {
		rc = agent_fail(stage, rc, "cannot run %s: %s", inv->program,
				result.error ? result.error : box_last_error());
		goto out;
	}
	stage->exit_code = result.exit_code;
	stage->duration_ms = result.duration_ms;
	if (result.timed_out) {
		rc = agent_fail(stage, -ETIMEDOUT, "%s timed out after %u s (raise timeout_secs)",
				inv->program, task->timeout_secs);
		goto out;
	}
	/* both CLIs print JSON events: claude-code stream-json, codex `exec --json` */
	if (inv->stream_json || inv->provider == SPEC_LLM_PROVIDER_CODEX)
		rc = agent_fill_stream(stage, inv, &result);
	else
		rc = run_stage_set_output(stage, result.stdout_data, result.stdout_len);
	if (rc == 0 && result.exit_code != 0 &&
	    !(task->service && service_stage_succeeded(&watch, result.exit_code, false)))
		rc = agent_fail(stage, -ECANCELED, "%s exited with status %d", inv->program,
				result.exit_code);
out:
	box_exec_result_free(&result);
	return rc;
}

static int agent_prepare(struct box *box, const struct agent_task *task, const char *output_file,
			 struct run_stage *stage, struct llm_invocation *inv)
{
	struct llm_invocation_request llm_req = { .llm = task->llm,
						  .host_env = task->host_env,
						  .host_env_ctx = task->host_env_ctx };
	bool claude = !task->llm || task->llm->provider != SPEC_LLM_PROVIDER_CODEX;
	char *prompt;
	int rc;

	rc = agent_provision_skills(box, task, stage, &llm_req.has_mcp_config);
	if (rc == 0 && !claude && task->sidecar_url)
		rc = agent_provision_codex_messaging(box, task, stage);
	if (rc == 0 && claude)
		rc = agent_bootstrap_claude(box, task, stage);
	if (rc == 0 && task->input)
		rc = agent_write(box, stage, LLM_INPUT_PATH, task->input, task->input_len);
	if (rc < 0)
		return rc;
	prompt = llm_prompt_build(task->prompt, output_file, task->input, task->input_len);
	if (!prompt)
		return -ENOMEM;
	llm_req.full_prompt = prompt;
	rc = llm_invocation_build(&llm_req, inv);
	free(prompt);
	return rc;
}

const char *agent_guest_image_name(const struct spec_llm *llm)
{
	return agent_flavour_name(llm && llm->provider == SPEC_LLM_PROVIDER_CODEX ?
					  AGENT_FLAVOUR_CODEX : AGENT_FLAVOUR_CLAUDE);
}

int agent_invoke(struct box *box, const struct agent_task *task, struct run_stage *stage,
		 char **file_output)
{
	const char *output_file = task->output_file ? task->output_file : SPEC_DEFAULT_OUTPUT_FILE;
	struct llm_invocation inv;
	size_t len;
	int rc;

	*file_output = NULL;
	stage->ran = true;
	rc = agent_prepare(box, task, output_file, stage, &inv);
	if (rc < 0)
		return rc == -ENOMEM && !stage->error ? agent_fail(stage, rc, "out of memory") : rc;
	log_info("agent", "[agent:%s] running %s (%s)", task->name, inv.program,
		 spec_llm_provider_name(inv.provider));
	rc = agent_exec(box, task, &inv, stage);
	llm_invocation_free(&inv);
	if (rc < 0)
		return rc;
	if (box_read_file(box, output_file, file_output, &len) < 0)
		*file_output = NULL;
	stage->success = true;
	return 0;
}

/* ---- kind: agent ------------------------------------------------------------------------ */

size_t agent_check(const struct spec *spec, struct spec_diagnostics *diag)
{
	size_t errors = 0;

	if (spec->kind != SPEC_KIND_AGENT || !spec->has_agent) {
		spec_diagnostics_add(diag, SPEC_SEVERITY_ERROR, spec->file, spec->kind_pos,
				     "use kind: agent with an agent: section",
				     "this spec is not an agent spec");
		return 1;
	}
	if (spec->agent.mode == SPEC_AGENT_MODE_INTERACTIVE) {
		spec_diagnostics_add(diag, SPEC_SEVERITY_ERROR, spec->file, spec->agent.mode_pos,
				     "use mode: task, or `voidbox shell` for interactive work",
				     "agent mode %s is not supported yet",
				     spec_agent_mode_name(spec->agent.mode));
		errors++;
	}
	errors += spec_check_supported(spec, AGENT_SUPPORTED_FEATURES, diag);
	return errors;
}

static void agent_report_finish(struct run_report *report, const struct run_stage *stage,
				const char *file_output, int rc)
{
	run_report_sum_usage(report);
	report->success = rc == 0;
	if (rc == 0)
		run_report_set_output(report, file_output ? file_output : stage->output, SIZE_MAX);
	else
		run_report_set_error(report, "agent '%s' failed: %s", stage->name,
				     stage->error ? stage->error : strerror(-rc));
}

/* agent_run_in_box with the agent's messaging sidecar URL (NULL: messaging is off). */
static int agent_run_in_box_with(const struct spec *spec, struct box *box,
				 const struct agent_options *options, const char *sidecar_url,
				 struct run_report *report);

int agent_run_in_box(const struct spec *spec, struct box *box, const struct agent_options *options,
		     struct run_report *report)
{
	return agent_run_in_box_with(spec, box, options, NULL, report);
}

static int agent_run_in_box_with(const struct spec *spec, struct box *box,
				 const struct agent_options *options, const char *sidecar_url,
				 struct run_report *report)
{
	struct agent_task task = {
		.name = spec->name, .prompt = spec->agent.prompt, .skills = spec->agent.skills,
		.skill_count = spec->agent.skill_count, .llm = spec->has_llm ? &spec->llm : NULL,
		.output_file = spec->agent.output_file,
		.timeout_secs = spec->agent.has_timeout_secs		  ? spec->agent.timeout_secs
				: spec->agent.mode == SPEC_AGENT_MODE_SERVICE || !options ? 0
											  : options->default_timeout_secs,
		.service = spec->agent.mode == SPEC_AGENT_MODE_SERVICE,
		.report = report,
		.input = options ? options->input : NULL,
		.input_len = options ? options->input_len : 0,
		.host_env = options ? options->host_env : NULL,
		.host_env_ctx = options ? options->host_env_ctx : NULL,
		.sidecar_url = sidecar_url,
	};
	struct run_stage *stage = run_report_add_stage(report, spec->name);
	char *file_output = NULL;
	int rc;

	if (!stage)
		return -ENOMEM;
	run_report_set_sandbox_mode(report, box_mode_name(box_mode(box)));
	run_report_stage_started(report, stage);
	rc = agent_invoke(box, &task, stage, &file_output);
	agent_report_finish(report, stage, file_output, rc);
	run_report_stage_finished(report, stage);
	free(file_output);
	return rc;
}

int agent_run(const struct spec *spec, const struct agent_options *options,
	      struct run_report *report)
{
	struct spec_diagnostics diag;
	struct agent_mock mock = { 0 };
	struct run_messaging *messaging = NULL;
	struct run_messaging_member member = { .url = "" };
	struct box_config cfg;
	struct box *box = NULL;
	char err[AGENT_ERROR_MAX];
	int rc;

	spec_diagnostics_init(&diag);
	if (agent_check(spec, &diag)) {
		run_report_set_error(report, "%s%s",
				     diag.count ? diag.items[0].message : "spec cannot run",
				     diag.count > 1 ? " (and more: see voidbox validate)" : "");
		spec_diagnostics_free(&diag);
		return -ENOTSUP;
	}
	spec_diagnostics_free(&diag);
	box_config_from_spec(&cfg, spec, NULL);
	cfg.image_name = agent_guest_image_name(spec->has_llm ? &spec->llm : NULL);
	if (options && options->override_mode)
		cfg.mode = options->mode;
	if (options) {
		cfg.serial_log_path = options->serial_log_path;
		cfg.host = options->host;
	}
	cfg.mock_handler = agent_mock_handler;
	cfg.mock_opaque = &mock;
	run_report_wire_telemetry(report, &cfg);
	if (options) {
		mock.exec = options->mock_exec;
		mock.exec_opaque = options->mock_exec_opaque;
	}
	if (spec->agent.messaging.enabled) {
		rc = run_messaging_open(spec->name, options ? &options->messaging : NULL, &messaging,
					err, sizeof(err));
		if (rc == 0)
			rc = run_messaging_join(messaging, spec->name, &member, err, sizeof(err));
		if (rc < 0) {
			run_messaging_close(messaging);
			run_report_set_error(report, "%s", err);
			return rc;
		}
		cfg.network = true;
		cfg.sidecar_port = member.host_port;
	}
	rc = box_open(&cfg, &box, err, sizeof(err));
	if (rc < 0) {
		run_messaging_close(messaging);
		run_report_set_error(report, "%s", err);
		return rc;
	}
	mock.box = box;
	rc = agent_run_in_box_with(spec, box, options, messaging ? member.url : NULL, report);
	box_close(box, rc != 0);
	run_messaging_close(messaging);
	return rc;
}

/* ---- the in-process stand-in for mock boxes --------------------------------------------- */

static const char *agent_basename(const char *path)
{
	const char *slash = strrchr(path, '/');

	return slash ? slash + 1 : path;
}

static const char *agent_find_arg(const struct box_exec_request *req, const char *flag)
{
	for (size_t i = 0; i + 1 < req->arg_count; i++)
		if (strcmp(req->args[i], flag) == 0)
			return req->args[i + 1];
	return NULL;
}

static int agent_mock_fill(struct box_exec_result *result, char *out, int exit_code)
{
	result->stdout_data = out;
	result->stdout_len = strlen(out);
	result->stderr_data = strdup("");
	result->exit_code = exit_code;
	if (!result->stderr_data)
		return -ENOMEM;
	return 1;
}

/* Writes {"result": text} to the path after the prompt's "Write your output to". */
static void agent_mock_write_output(struct agent_mock *mock, const char *prompt, const char *text)
{
	const char *marker = strstr(prompt, AGENT_OUTPUT_MARKER);
	const char *next;
	char *path, *doc;
	size_t len;
	json_t *json;

	if (!marker || !mock || !mock->box)
		return;
	while ((next = strstr(marker + 1, AGENT_OUTPUT_MARKER)))
		marker = next;
	marker += strlen(AGENT_OUTPUT_MARKER);
	len = strcspn(marker, "\n");
	while (len && marker[len - 1] == '.')
		len--;
	path = strndup(marker, len);
	json = json_pack("{ss}", "result", text);
	doc = json ? json_dumps(json, JSON_COMPACT) : NULL;
	if (path && doc)
		box_write_file(mock->box, path, doc, strlen(doc));
	json_decref(json);
	free(doc);
	free(path);
}

int agent_mock_handler(void *opaque, const struct box_exec_request *req,
		       struct box_exec_result *result)
{
	const char *program = agent_basename(req->program);
	const char *prompt;
	char summary[AGENT_ERROR_MAX];
	json_t *init, *final;
	char *init_text, *final_text, *out = NULL;
	size_t first_line;

	struct agent_mock *mock = opaque;

	if (mock && mock->exec)
		return mock->exec(mock->box, mock->exec_opaque, req, result);
	if (strcmp(program, "sh") == 0 && req->arg_count == 2 &&
	    strcmp(req->args[1], AGENT_PROBE_SCRIPT) == 0)
		return agent_mock_fill(result, strdup("/usr/local/bin/claude-code\n"), 0);
	if (strcmp(program, LLM_CLAUDE_PROGRAM) != 0)
		return 0;
	prompt = agent_find_arg(req, "-p");
	if (!prompt)
		return agent_mock_fill(result, strdup(""), 2);
	first_line = strcspn(prompt, "\n");
	snprintf(summary, sizeof(summary), "mock: completed '%.*s'",
		 (int)(first_line > AGENT_MOCK_EXCERPT_MAX ? AGENT_MOCK_EXCERPT_MAX : first_line),
		 prompt);
	agent_mock_write_output(opaque, prompt, summary);
	init = json_pack("{ssssssss}", "type", "system", "subtype", "init", "session_id",
			 AGENT_MOCK_SESSION, "model", AGENT_MOCK_MODEL);
	final = json_pack("{sssssbsisssssfs{sisi}}", "type", "result", "subtype", "success",
			  "is_error", 0, "num_turns", 1, "result", summary, "session_id",
			  AGENT_MOCK_SESSION, "total_cost_usd", 0.0, "usage", "input_tokens", 0,
			  "output_tokens", 0);
	init_text = init ? json_dumps(init, JSON_COMPACT) : NULL;
	final_text = final ? json_dumps(final, JSON_COMPACT) : NULL;
	if (init_text && final_text && asprintf(&out, "%s\n%s\n", init_text, final_text) < 0)
		out = NULL;
	json_decref(init);
	json_decref(final);
	free(init_text);
	free(final_text);
	if (!out)
		return -ENOMEM;
	return agent_mock_fill(result, out, 0);
}
