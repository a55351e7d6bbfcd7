/*
 * libFuzzer target for what void-mcp parses (guest/tools/mcp.c and mcp_http.c): one JSON-RPC
 * message as stdio or POST /mcp delivers it (its framing is a line or a Content-Length body,
 * so the message bytes are the whole input), and a Streamable HTTP request head. The sidecar
 * is a stub that answers every call.
 *
 * The first byte picks the parser. Checked promises: a request always gets a reply, a
 * notification never does, every reply is one JSON object with "jsonrpc":"2.0"; an accepted
 * head is no longer than the input and its path starts with '/'.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "mcp.h"
#include "mcp_http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum mcp_fuzz_parser {
	MCP_FUZZ_MESSAGE,
	MCP_FUZZ_HTTP_HEAD,
	MCP_FUZZ_PARSER_COUNT,
};

static int mcp_fuzz_sidecar(void *opaque, const char *method, const char *path,
			    const char *body, int *status, char **reply_body, char *err,
			    size_t errlen)
{
	*status = 200;
	*reply_body = strdup("{}");
	return *reply_body ? 0 : -1;
}

static void mcp_fuzz_message(const char *text, size_t len)
{
	struct mcp_server srv = { .sidecar = mcp_fuzz_sidecar };
	enum mcp_message_class cls;
	bool initialize;
	char *reply;
	json_t *parsed;

	mcp_is_initialize(text, len);
	cls = mcp_handle(&srv, text, len, &reply, &initialize);
	if ((cls == MCP_MESSAGE_NOTIFICATION) != (reply == NULL))
		abort();
	if (!reply)
		return;
	parsed = json_loads(reply, 0, NULL);
	if (!json_is_object(parsed) ||
	    strcmp(json_string_value(json_object_get(parsed, "jsonrpc")) ?: "", "2.0") != 0)
		abort();
	json_decref(parsed);
	free(reply);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mcp_http_request req;
	int head_len;

	if (size == 0)
		return 0;
	switch ((enum mcp_fuzz_parser)(data[0] % MCP_FUZZ_PARSER_COUNT)) {
	case MCP_FUZZ_MESSAGE:
		mcp_fuzz_message((const char *)data + 1, size - 1);
		break;
	case MCP_FUZZ_HTTP_HEAD:
		head_len = mcp_http_parse_head((const char *)data + 1, size - 1, &req);
		if (head_len > 0 && ((size_t)head_len > size - 1 || req.path[0] != '/'))
			abort();
		break;
	case MCP_FUZZ_PARSER_COUNT:
		break;
	}
	return 0;
}
