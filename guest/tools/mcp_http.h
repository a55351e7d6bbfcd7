/*
 * The Streamable HTTP transport of void-mcp (MCP 2025-06-18): `POST /mcp` takes one JSON-RPC
 * message and answers with one JSON response (application/json) or 202 for a notification;
 * initialize opens a session named by the Mcp-Session-Id header, which every later request
 * must carry (400 without it, 404 for an unknown one); `DELETE /mcp` ends a session; `GET
 * /mcp` is 405, as this server never starts a stream of its own. It binds 127.0.0.1 only and
 * refuses an Origin that is not local, as the specification asks against DNS rebinding.
 *
 * The guest has no static libmicrohttpd (Debian's needs GnuTLS and p11-kit archives it does
 * not ship), so the request head is parsed here by mcp_http_parse_head: bounded, pure and
 * fuzzed (fuzz/mcp_message_fuzz.c).
 */
#ifndef VOIDBOX_GUEST_TOOLS_MCP_HTTP_H
#define VOIDBOX_GUEST_TOOLS_MCP_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mcp.h"

#define MCP_HTTP_HEAD_MAX 8192u
#define MCP_HTTP_PATH_MAX 64u
#define MCP_HTTP_SESSION_ID_MAX 64u
#define MCP_HTTP_VERSION_MAX 32u
#define MCP_HTTP_ORIGIN_MAX 256u

enum mcp_http_method {
	MCP_HTTP_POST,
	MCP_HTTP_GET,
	MCP_HTTP_DELETE,
	MCP_HTTP_OTHER,
};

struct mcp_http_request {
	enum mcp_http_method method;
	char path[MCP_HTTP_PATH_MAX + 1];
	bool has_length;
	size_t content_length;
	bool chunked;
	char session_id[MCP_HTTP_SESSION_ID_MAX + 1];
	char protocol_version[MCP_HTTP_VERSION_MAX + 1];
	char origin[MCP_HTTP_ORIGIN_MAX + 1];
};

/*
 * Parses a request head from buf[0..len). Returns the head's length (through the blank line)
 * when it is complete and well formed, 0 when more bytes are needed, -EINVAL when it is
 * malformed and -E2BIG when it (or a field the server keeps) is over its limit.
 */
int mcp_http_parse_head(const char *buf, size_t len, struct mcp_http_request *out);

/* Serves srv on 127.0.0.1:port until killed; prints "void-mcp: listening on PORT". */
int mcp_http_serve(const struct mcp_server *srv, uint16_t port);

#endif
