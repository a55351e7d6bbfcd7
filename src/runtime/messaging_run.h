/*
 * Messaging for agent and pipeline runs: one sidecar per run (src/messaging/sidecar.h), one
 * member per agent with messaging enabled, and what each such agent's guest needs to reach it
 * (VOID_SIDECAR_URL, void-mcp in .mcp.json for claude and in codex's config.toml). The runners
 * call run_messaging_open once, join each agent before its box opens, advance the iteration
 * when a stage ends, and close at the end. docs/messaging.md describes the whole.
 */
#ifndef VOIDBOX_RUNTIME_MESSAGING_RUN_H
#define VOIDBOX_RUNTIME_MESSAGING_RUN_H

#include <stddef.h>
#include <stdint.h>

#define RUN_MESSAGING_URL_ENV "VOID_SIDECAR_URL"
#define RUN_MESSAGING_URL_MAX 48u
#define RUN_MESSAGING_MCP_NAME "void"
#define RUN_MESSAGING_MCP_PROGRAM "void-mcp"
#define RUN_MESSAGING_CODEX_CONFIG_PATH "/home/sandbox/.codex/config.toml"
/* the inline skill that tells the agent how to message its peers (upstream's name) */
#define RUN_MESSAGING_SKILL_PATH "/workspace/.claude/skills/void-messaging.md"
#define RUN_MESSAGING_SKILL                                                                   \
	"# void-messaging\n\n"                                                                \
	"You share this run with other agents. Talk to them through the messaging sidecar:\n\n" \
	"- `void-message context`: your candidate id, role, peers and the iteration\n"        \
	"- `void-message inbox [--since N]`: your peers' messages (N: the version last read)\n" \
	"- `void-message send --kind proposal|signal|evaluation --audience broadcast|leader "   \
	"--summary TEXT [--priority high|normal|low]`: tell your peers or the leader\n\n"      \
	"The MCP server `void` offers the same as tools: read_shared_context, "                \
	"read_peer_messages, broadcast_observation, recommend_to_leader. Messages reach their " \
	"readers when the current stage ends; at most 3 per stage, 4096 bytes each.\n"
/* The address of the host's loopback from inside the guest (the user-mode network's gateway). */
#define RUN_MESSAGING_GUEST_HOST "10.0.2.2"

struct run_messaging;

/* What the run's caller decides (`voidbox run` reads it from the daemon's environment). */
struct run_messaging_options {
	const char *run_id;	  /* names the run to the agents; NULL: the spec's name */
	const char *control_path; /* a unix socket for the control routes; NULL: none */
};

/* Starts the run's sidecar. 0, or -errno with err saying why. */
int run_messaging_open(const char *spec_name, const struct run_messaging_options *options,
		       struct run_messaging **out, char *err, size_t errlen);

/*
 * A member as its box sees it: the URL its guest uses and the host loopback port behind it,
 * which the box's VM is granted (other sandboxes' guests are refused it: docs/messaging.md).
 */
struct run_messaging_member {
	char url[RUN_MESSAGING_URL_MAX]; /* http://10.0.2.2:PORT */
	uint16_t host_port;
};

/* Adds agent name as a member and fills *out. 0, or -errno with err. */
int run_messaging_join(struct run_messaging *rm, const char *name,
		       struct run_messaging_member *out, char *err, size_t errlen);

/* Ends the iteration (a stage ended): pending intents reach their inboxes. NULL is fine. */
void run_messaging_advance(struct run_messaging *rm);

void run_messaging_close(struct run_messaging *rm);

/*
 * existing .mcp.json text (NULL: none) with the void-mcp server added under "void" (stdio, the
 * sidecar URL in its env). NULL when out of memory or existing is not a JSON object.
 */
char *run_messaging_mcp_json(const char *existing, const char *url);

/* codex's config.toml declaring void-mcp as [mcp_servers.void]; NULL when out of memory. */
char *run_messaging_codex_toml(const char *url);

#endif
