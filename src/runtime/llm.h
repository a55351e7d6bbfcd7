/*
 * LLM providers: how a spec's `llm` section becomes the program, argv and environment of the
 * coding agent in the guest, exactly as upstream invokes it (docs/agents.md has the table).
 *
 * Building an invocation is pure: the host environment is read through a lookup callback
 * (the CLI passes getenv's; NULL: nothing set) so tests pin every provider's argv and env
 * without touching the process environment, and nothing here talks to a box.
 */
#ifndef VOIDBOX_RUNTIME_LLM_H
#define VOIDBOX_RUNTIME_LLM_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/spec.h"

#define LLM_GUEST_HOME "/home/sandbox"
#define LLM_GUEST_WORKSPACE "/workspace"
#define LLM_CLAUDE_PROGRAM "claude-code"
#define LLM_CODEX_PROGRAM "codex"
#define LLM_MCP_CONFIG_PATH "/workspace/.mcp.json"
#define LLM_INPUT_PATH "/workspace/input.json"
/* the previous stage's output is inlined into the prompt up to this many bytes */
#define LLM_INPUT_INLINE_MAX 4000u
#define LLM_GATEWAY_OLLAMA_URL "http://10.0.2.2:11434"
#define LLM_GATEWAY_LM_STUDIO_URL "http://10.0.2.2:1234"

struct llm_env_var {
	char *name;
	char *value;
};

struct llm_invocation {
	enum spec_llm_provider provider;
	char *program;		/* argv[0] */
	char **args;		/* the arguments after the program */
	size_t arg_count;
	struct llm_env_var *env;
	size_t env_count;
	/* local providers (ollama, lm-studio) cost nothing: the report's cost is zeroed */
	bool local_provider;
	/* claude-shaped providers speak stream-json; codex prints its own JSON */
	bool stream_json;
};

struct llm_invocation_request {
	const struct spec_llm *llm; /* NULL: provider claude */
	const char *full_prompt;    /* from llm_prompt_build() */
	bool has_mcp_config;	    /* adds --mcp-config LLM_MCP_CONFIG_PATH */
	spec_env_lookup_fn host_env; /* the host's environment; NULL: empty */
	void *host_env_ctx;
};

/* 0, or -ENOMEM. */
int llm_invocation_build(const struct llm_invocation_request *req, struct llm_invocation *out);
void llm_invocation_free(struct llm_invocation *inv);

/*
 * "<prompt>[\n\n--- Previous stage output ---\n<input, at most LLM_INPUT_INLINE_MAX bytes>\n
 * --- End of previous stage output ---]\n\nWrite your output to <output_file>."
 * input may be NULL. Returns a malloc'd string or NULL.
 */
char *llm_prompt_build(const char *prompt, const char *output_file, const char *input,
		       size_t input_len);

/* The env value named name in inv, or NULL. */
const char *llm_invocation_env(const struct llm_invocation *inv, const char *name);

#endif
