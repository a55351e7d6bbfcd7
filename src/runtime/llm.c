/*
 * Provider table as code: one function per provider family fills the environment, and the
 * argv is shared by every claude-shaped provider (only --model differs). Each provider's
 * choices stay next to each other so the table in docs/agents.md can be checked by reading
 * one function.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/llm.h"

#define LLM_SETTINGS_JSON "{\"skipWebFetchPreflight\":true}"
#define LLM_OLLAMA_AUTH_TOKEN "ollama"
#define LLM_LM_STUDIO_API_KEY "lm-studio"
#define LLM_ARGS_MAX 16

struct llm_builder {
	struct llm_invocation *inv;
	const struct llm_invocation_request *req;
	size_t env_capacity;
	int error;
};

static const char *llm_host_lookup(const struct llm_invocation_request *req, const char *name)
{
	return req->host_env ? req->host_env(name, req->host_env_ctx) : NULL;
}

static void llm_add_arg(struct llm_builder *b, const char *arg)
{
	char *copy;

	if (b->error)
		return;
	copy = strdup(arg);
	if (!copy) {
		b->error = -ENOMEM;
		return;
	}
	b->inv->args[b->inv->arg_count++] = copy;
}

/* Sets name=value, replacing an earlier value of the same name. */
static void llm_set_env(struct llm_builder *b, const char *name, const char *value)
{
	struct llm_invocation *inv = b->inv;
	struct llm_env_var *var = NULL;
	char *copy;

	if (b->error)
		return;
	for (size_t i = 0; i < inv->env_count; i++)
		if (strcmp(inv->env[i].name, name) == 0)
			var = &inv->env[i];
	if (!var) {
		if (inv->env_count == b->env_capacity) {
			size_t capacity = b->env_capacity ? b->env_capacity * 2 : 8;
			struct llm_env_var *grown = realloc(inv->env, capacity * sizeof(*grown));

			if (!grown) {
				b->error = -ENOMEM;
				return;
			}
			inv->env = grown;
			b->env_capacity = capacity;
		}
		var = &inv->env[inv->env_count];
		var->name = strdup(name);
		var->value = NULL;
		if (!var->name) {
			b->error = -ENOMEM;
			return;
		}
		inv->env_count++;
	}
	copy = strdup(value);
	if (!copy) {
		b->error = -ENOMEM;
		return;
	}
	free(var->value);
	var->value = copy;
}

static void llm_copy_host_env(struct llm_builder *b, const char *name)
{
	const char *value = name ? llm_host_lookup(b->req, name) : NULL;

	if (value)
		llm_set_env(b, name, value);
}

static void llm_claude_env(struct llm_builder *b, const struct spec_llm *llm)
{
	enum spec_llm_provider provider = llm ? llm->provider : SPEC_LLM_PROVIDER_CLAUDE;
	const char *base_url = llm ? llm->base_url : NULL;
	const char *key;

	llm_set_env(b, "HOME", LLM_GUEST_HOME);
	switch (provider) {
	case SPEC_LLM_PROVIDER_CLAUDE:
		llm_copy_host_env(b, "ANTHROPIC_API_KEY");
		break;
	case SPEC_LLM_PROVIDER_CLAUDE_PERSONAL:
		/* OAuth credentials are a file staged by the agent runner, not env */
		break;
	case SPEC_LLM_PROVIDER_OLLAMA:
		llm_set_env(b, "ANTHROPIC_BASE_URL", base_url ? base_url : LLM_GATEWAY_OLLAMA_URL);
		llm_set_env(b, "ANTHROPIC_API_KEY", "");
		llm_set_env(b, "ANTHROPIC_AUTH_TOKEN", LLM_OLLAMA_AUTH_TOKEN);
		break;
	case SPEC_LLM_PROVIDER_LM_STUDIO:
		llm_set_env(b, "ANTHROPIC_BASE_URL",
			    base_url ? base_url : LLM_GATEWAY_LM_STUDIO_URL);
		llm_set_env(b, "ANTHROPIC_API_KEY", LLM_LM_STUDIO_API_KEY);
		break;
	case SPEC_LLM_PROVIDER_CUSTOM:
		llm_set_env(b, "ANTHROPIC_BASE_URL", base_url ? base_url : LLM_GATEWAY_OLLAMA_URL);
		key = llm->api_key_env ? llm_host_lookup(b->req, llm->api_key_env) : NULL;
		if (key)
			llm_set_env(b, "ANTHROPIC_API_KEY", key);
		break;
	case SPEC_LLM_PROVIDER_CODEX:
		break;
	}
}

static void llm_claude_args(struct llm_builder *b, const struct spec_llm *llm)
{
	llm_add_arg(b, "-p");
	llm_add_arg(b, b->req->full_prompt);
	llm_add_arg(b, "--output-format");
	llm_add_arg(b, "stream-json");
	llm_add_arg(b, "--verbose");
	llm_add_arg(b, "--dangerously-skip-permissions");
	if (llm && llm->model) {
		llm_add_arg(b, "--model");
		llm_add_arg(b, llm->model);
	}
	llm_add_arg(b, "--settings");
	llm_add_arg(b, LLM_SETTINGS_JSON);
	if (b->req->has_mcp_config) {
		llm_add_arg(b, "--mcp-config");
		llm_add_arg(b, LLM_MCP_CONFIG_PATH);
	}
}

static void llm_codex(struct llm_builder *b)
{
	llm_set_env(b, "HOME", LLM_GUEST_HOME);
	llm_copy_host_env(b, "OPENAI_API_KEY");
	llm_add_arg(b, "exec");
	llm_add_arg(b, "--json");
	llm_add_arg(b, "--skip-git-repo-check");
	llm_add_arg(b, "--dangerously-bypass-approvals-and-sandbox");
	llm_add_arg(b, b->req->full_prompt);
}

int llm_invocation_build(const struct llm_invocation_request *req, struct llm_invocation *out)
{
	const struct spec_llm *llm = req->llm;
	struct llm_builder b = { .inv = out, .req = req };

	memset(out, 0, sizeof(*out));
	out->provider = llm ? llm->provider : SPEC_LLM_PROVIDER_CLAUDE;
	out->args = calloc(LLM_ARGS_MAX, sizeof(*out->args));
	if (!out->args)
		return -ENOMEM;
	if (out->provider == SPEC_LLM_PROVIDER_CODEX) {
		out->program = strdup(LLM_CODEX_PROGRAM);
		llm_codex(&b);
	} else {
		out->program = strdup(LLM_CLAUDE_PROGRAM);
		out->stream_json = true;
		out->local_provider = out->provider == SPEC_LLM_PROVIDER_OLLAMA ||
				      out->provider == SPEC_LLM_PROVIDER_LM_STUDIO;
		llm_claude_env(&b, llm);
		llm_claude_args(&b, llm);
	}
	if (!out->program && !b.error)
		b.error = -ENOMEM;
	if (b.error) {
		llm_invocation_free(out);
		return b.error;
	}
	return 0;
}

void llm_invocation_free(struct llm_invocation *inv)
{
	for (size_t i = 0; i < inv->arg_count; i++)
		free(inv->args[i]);
	for (size_t i = 0; i < inv->env_count; i++) {
		free(inv->env[i].name);
		free(inv->env[i].value);
	}
	free(inv->args);
	free(inv->env);
	free(inv->program);
	memset(inv, 0, sizeof(*inv));
}

const char *llm_invocation_env(const struct llm_invocation *inv, const char *name)
{
	for (size_t i = 0; i < inv->env_count; i++)
		if (strcmp(inv->env[i].name, name) == 0)
			return inv->env[i].value;
	return NULL;
}

char *llm_prompt_build(const char *prompt, const char *output_file, const char *input,
		       size_t input_len)
{
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);

	if (!out)
		return NULL;
	fputs(prompt ? prompt : "", out);
	if (input) {
		size_t shown = input_len > LLM_INPUT_INLINE_MAX ? LLM_INPUT_INLINE_MAX : input_len;

		fputs("\n\n--- Previous stage output ---\n", out);
		fwrite(input, 1, shown, out);
		if (shown < input_len)
			fprintf(out, "\n[... truncated; the full input is in %s]", LLM_INPUT_PATH);
		fputs("\n--- End of previous stage output ---", out);
	}
	fprintf(out, "\n\nWrite your output to %s.", output_file);
	if (fclose(out) != 0) {
		free(text);
		return NULL;
	}
	return text;
}
