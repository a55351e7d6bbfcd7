/*
 * The MCP protocol core of void-mcp: one JSON-RPC 2.0 message in, at most one out, with the
 * sidecar reached through a callback so the core is a pure function of its input (fuzzed by
 * fuzz/mcp_message_fuzz.c, tested without a network). It implements what the current MCP
 * specification asks of a tools-only server: initialize with protocol version negotiation,
 * notifications/initialized, ping, tools/list and tools/call; batches (dropped from the
 * specification in 2025-06-18) are refused as invalid requests.
 */
#ifndef VOIDBOX_GUEST_TOOLS_MCP_H
#define VOIDBOX_GUEST_TOOLS_MCP_H

#include <stdbool.h>
#include <stddef.h>

#define MCP_SERVER_NAME "void-mcp"
#define MCP_SERVER_VERSION "0.1.0"
#define MCP_PROTOCOL_LATEST "2025-06-18"
#define MCP_MESSAGE_MAX (1024u * 1024u)

/* A sidecar request: 0 with *status and a malloc'd *body, or -errno with err filled. */
typedef int (*mcp_sidecar_fn)(void *opaque, const char *method, const char *path,
			      const char *body, int *status, char **reply_body, char *err,
			      size_t errlen);

struct mcp_server {
	mcp_sidecar_fn sidecar;
	void *opaque;
};

/* What one message was, so a transport knows how to answer (HTTP: 200 vs 202). */
enum mcp_message_class {
	MCP_MESSAGE_REQUEST,	  /* has an id: *reply is the response */
	MCP_MESSAGE_NOTIFICATION, /* no id (or a response from the client): no reply */
	MCP_MESSAGE_INVALID,	  /* *reply is an error response with id null */
};

/*
 * Handles one message of len bytes. *reply is NULL or a malloc'd JSON text (no newline).
 * *initialize says whether it was an initialize request (HTTP starts a session on it).
 */
enum mcp_message_class mcp_handle(const struct mcp_server *srv, const char *text, size_t len,
				  char **reply, bool *initialize);

/* Whether text is an initialize request (checked before a session is required). */
bool mcp_is_initialize(const char *text, size_t len);

/* Whether version is one this server speaks (the MCP-Protocol-Version header's check). */
bool mcp_protocol_supported(const char *version);

#endif
