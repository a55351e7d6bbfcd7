/*
 * Agent runs: one coding-agent invocation (claude-code or codex) in a box, provisioned the way
 * upstream does it (skills, claude bootstrap files, previous-stage input), its stream-json
 * parsed into a run-report stage, and its output file read back.
 *
 * agent_invoke() is the unit shared by `kind: agent` and every pipeline box: it takes a box
 * that is already open and one task, so the pipeline decides how many boxes exist and the
 * agent code never does. agent_run() is `voidbox run` for an agent spec: check, open a box
 * from the spec, invoke, close. In a mock box (no VM) claude-code is answered in-process with
 * a minimal, deterministic stream (docs/agents.md), so mock runs still produce a full report.
 */
#ifndef VOIDBOX_RUNTIME_AGENT_H
#define VOIDBOX_RUNTIME_AGENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/box.h"
#include "runtime/messaging_run.h"
#include "runtime/run_report.h"
#include "runtime/spec.h"

/* Features agent and pipeline runs honour today (the rest are refused before a VM boots). */
#define AGENT_SUPPORTED_FEATURES \
	(SPEC_FEATURE_BIT(SPEC_FEATURE_SKILL_MCP) | SPEC_FEATURE_BIT(SPEC_FEATURE_SNAPSHOT) | \
	 SPEC_FEATURE_BIT(SPEC_FEATURE_NETWORK) | SPEC_FEATURE_BIT(SPEC_FEATURE_MOUNTS) |     \
	 SPEC_FEATURE_BIT(SPEC_FEATURE_MESSAGING) | SPEC_FEATURE_BIT(SPEC_FEATURE_IMAGE) |      \
	 SPEC_FEATURE_BIT(SPEC_FEATURE_SERVICE_MODE))

#define AGENT_CLAUDE_JSON_PATH "/home/sandbox/.claude.json"
#define AGENT_CLAUDE_SETTINGS_PATH "/workspace/.claude/settings.json"
#define AGENT_CREDENTIALS_GUEST_PATH "/home/sandbox/.claude/.credentials.json"

struct agent_options {
	/* `voidbox run --input`: handed to the agent as previous-stage input; NULL: none */
	const char *input;
	size_t input_len;
	/* replaces the spec's sandbox.mode when set */
	bool override_mode;
	enum box_mode mode;
	/* the VM console file of a local box; NULL: a temporary one */
	const char *serial_log_path;
	/* the host's sandbox settings; NULL: defaults */
	const struct sandbox_host_settings *host;
	/* an agent's (or pipeline box's) timeout when it sets no timeout_secs; 0: none. A
	 * service agent never gets one. (`voidbox run --step-timeout`, the daemon's policy) */
	uint32_t default_timeout_secs;
	/* the host's environment for provider keys and HOME (the CLI's: getenv); NULL: empty */
	spec_env_lookup_fn host_env;
	void *host_env_ctx;
	/* mock boxes only: answers execs instead of the built-in stand-in (see agent_mock) */
	int (*mock_exec)(struct box *box, void *opaque, const struct box_exec_request *req,
			 struct box_exec_result *result);
	void *mock_exec_opaque;
	/* the run's id and control socket for the messaging sidecar (docs/messaging.md) */
	struct run_messaging_options messaging;
};

/* One invocation: what a `kind: agent` spec or one pipeline box asks for. */
struct agent_task {
	const char *name;
	const char *prompt;
	const struct spec_skill *skills;
	size_t skill_count;
	const struct spec_llm *llm; /* NULL: provider claude */
	const char *output_file;    /* NULL: SPEC_DEFAULT_OUTPUT_FILE */
	uint32_t timeout_secs;	    /* 0: none */
	bool service;		    /* mode: service (src/runtime/service.h) */
	const char *input;	    /* previous stage's output; NULL: none */
	size_t input_len;
	spec_env_lookup_fn host_env;
	void *host_env_ctx;
	/* http://10.0.2.2:PORT of this agent's messaging sidecar; NULL: messaging is off */
	const char *sidecar_url;
	const struct run_report *report; /* whose observer hears a service's output; may be NULL */
};

/*
 * Runs task in box and fills stage (success, output = the agent's result text, error, tokens,
 * cost, turns, tool calls, is_error, exit code, duration). *file_output receives the output
 * file's contents (malloc'd) when the agent wrote one, else NULL. Returns 0 when the agent
 * succeeded, -ECANCELED when it ran and failed, or another -errno when it could not run; in
 * every failing case stage->error says why.
 */
int agent_invoke(struct box *box, const struct agent_task *task, struct run_stage *stage,
		 char **file_output);

/*
 * The agent flavour image an agent with this llm section boots (docs/images.md): "codex" for
 * provider codex, "claude" for every claude-shaped provider, which all run claude-code.
 * Explicit kernel/initramfs choices (spec, flag, VOID_BOX_* variables) still win.
 */
const char *agent_guest_image_name(const struct spec_llm *llm);

/*
 * Adds an error to diag for everything that stops spec from running as an agent here (another
 * kind, mode interactive, unsupported features). Returns the number of errors added.
 */
size_t agent_check(const struct spec *spec, struct spec_diagnostics *diag);

/* `voidbox run` for an agent spec; report initialised by the caller. Same return as invoke. */
int agent_run(const struct spec *spec, const struct agent_options *options,
	      struct run_report *report);
/*
 * The same in a box the caller opened. No messaging: agent_run starts the sidecar before the
 * box opens, since the box's network must allow it.
 */
int agent_run_in_box(const struct spec *spec, struct box *box, const struct agent_options *options,
		     struct run_report *report);

/*
 * The in-process claude-code stand-in used for mock boxes (a box_mock_handler_fn); opaque is
 * a struct agent_mock whose box is set once the box is open, so the output file can be
 * written. Answers claude-code and the `command -v claude-code` probe; returns 0 otherwise.
 */
typedef int (*agent_mock_exec_fn)(struct box *box, void *opaque,
				  const struct box_exec_request *req,
				  struct box_exec_result *result);

struct agent_mock {
	struct box *box;
	/* replaces the built-in answers when set (tests run the real mock agent this way) */
	agent_mock_exec_fn exec;
	void *exec_opaque;
};
int agent_mock_handler(void *opaque, const struct box_exec_request *req,
		       struct box_exec_result *result);

#endif
