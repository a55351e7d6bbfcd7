/*
 * void-mcp's protocol core (see mcp.h). Tool definitions are one table: name, description,
 * input schema and the sidecar request each makes, so tools/list and tools/call cannot
 * disagree. A sidecar refusal is a tool result with isError (the model should read it); only
 * malformed calls are JSON-RPC errors, as the specification separates them.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "mcp.h"

#define JSONRPC_VERSION "2.0"
#define JSONRPC_PARSE_ERROR (-32700)
#define JSONRPC_INVALID_REQUEST (-32600)
#define JSONRPC_METHOD_NOT_FOUND (-32601)
#define JSONRPC_INVALID_PARAMS (-32602)
#define MCP_ERR_MAX 256
#define MCP_PATH_MAX 64
#define MCP_HTTP_OK_MIN 200
#define MCP_HTTP_OK_END 300

static const char *const mcp_protocols[] = { "2025-06-18", "2025-03-26", NULL };

enum mcp_tool_id {
	MCP_TOOL_READ_SHARED_CONTEXT,
	MCP_TOOL_READ_PEER_MESSAGES,
	MCP_TOOL_BROADCAST_OBSERVATION,
	MCP_TOOL_RECOMMEND_TO_LEADER,
	MCP_TOOL_COUNT,
};

struct mcp_tool {
	const char *name;
	const char *description;
	const char *schema; /* JSON Schema of the arguments */
};

static const struct mcp_tool mcp_tools[MCP_TOOL_COUNT] = {
	[MCP_TOOL_READ_SHARED_CONTEXT] = {
		"read_shared_context",
		"Read this run's shared context: your candidate id, role, peers and the current iteration.",
		"{\"type\":\"object\",\"properties\":{}}" },
	[MCP_TOOL_READ_PEER_MESSAGES] = {
		"read_peer_messages",
		"Read messages from your peers. Pass since (the inbox version you last saw) to get only newer ones.",
		"{\"type\":\"object\",\"properties\":{\"since\":{\"type\":\"integer\",\"minimum\":0,"
		"\"description\":\"inbox version already read\"}}}" },
	[MCP_TOOL_BROADCAST_OBSERVATION] = {
		"broadcast_observation",
		"Share an observation with every peer (delivered at the next iteration; 3 messages per iteration).",
		"{\"type\":\"object\",\"properties\":{\"summary_text\":{\"type\":\"string\"},"
		"\"priority\":{\"type\":\"string\",\"enum\":[\"high\",\"normal\",\"low\"]}},"
		"\"required\":[\"summary_text\"]}" },
	[MCP_TOOL_RECOMMEND_TO_LEADER] = {
		"recommend_to_leader",
		"Recommend something to the run's leader: promote (a proposal), refine or reject (an evaluation).",
		"{\"type\":\"object\",\"properties\":{\"summary_text\":{\"type\":\"string\"},"
		"\"disposition\":{\"type\":\"string\",\"enum\":[\"promote\",\"refine\",\"reject\"]},"
		"\"priority\":{\"type\":\"string\",\"enum\":[\"high\",\"normal\",\"low\"]}},"
		"\"required\":[\"summary_text\"]}" },
};

bool mcp_protocol_supported(const char *version)
{
	for (size_t i = 0; version && mcp_protocols[i]; i++)
		if (strcmp(mcp_protocols[i], version) == 0)
			return true;
	return false;
}

bool mcp_is_initialize(const char *text, size_t len)
{
	json_t *msg = len <= MCP_MESSAGE_MAX ? json_loadb(text, len, 0, NULL) : NULL;
	const char *method = json_string_value(json_object_get(msg, "method"));
	bool initialize = method && strcmp(method, "initialize") == 0 &&
			  json_object_get(msg, "id") != NULL;

	json_decref(msg);
	return initialize;
}

static char *mcp_dump(json_t *value)
{
	char *text = value ? json_dumps(value, JSON_COMPACT) : NULL;

	json_decref(value);
	return text;
}

static char *mcp_error(json_t *id, int code, const char *message)
{
	return mcp_dump(json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", JSONRPC_VERSION, "id",
				  id ? id : json_null(), "error", "code", code, "message", message));
}

static char *mcp_result(json_t *id, json_t *result)
{
	return mcp_dump(json_pack("{s:s, s:O, s:o}", "jsonrpc", JSONRPC_VERSION, "id", id,
				  "result", result));
}

static json_t *mcp_initialize(json_t *params)
{
	const char *asked = json_string_value(json_object_get(params, "protocolVersion"));

	return json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s}, s:s}", "protocolVersion",
			 mcp_protocol_supported(asked) ? asked : MCP_PROTOCOL_LATEST,
			 "capabilities", "tools", "listChanged", 0, "serverInfo", "name",
			 MCP_SERVER_NAME, "version", MCP_SERVER_VERSION, "instructions",
			 "Tools to exchange messages with the other agents of this voidbox run.");
}

static json_t *mcp_tools_list(void)
{
	json_t *tools = json_array();

	for (size_t i = 0; tools && i < MCP_TOOL_COUNT; i++)
		json_array_append_new(tools,
				      json_pack("{s:s, s:s, s:o}", "name", mcp_tools[i].name,
						"description", mcp_tools[i].description,
						"inputSchema",
						json_loads(mcp_tools[i].schema, 0, NULL)));
	return json_pack("{s:o}", "tools", tools);
}

static json_t *mcp_text_result(const char *text, bool is_error)
{
	return json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", text,
			 "isError", is_error);
}

/* Builds the sidecar request for a tool; a bad argument is -EINVAL with err set. */
static int mcp_tool_request(enum mcp_tool_id tool, json_t *args, const char **method,
			    char *path, size_t path_len, char **body, char *err, size_t errlen)
{
	json_t *summary = json_object_get(args, "summary_text");
	json_t *priority = json_object_get(args, "priority");
	const char *disposition = json_string_value(json_object_get(args, "disposition"));
	json_t *since = json_object_get(args, "since");
	json_t *intent;

	*body = NULL;
	*method = "GET";
	switch (tool) {
	case MCP_TOOL_READ_SHARED_CONTEXT:
		snprintf(path, path_len, "/v1/context");
		return 0;
	case MCP_TOOL_READ_PEER_MESSAGES:
		if (since && (!json_is_integer(since) || json_integer_value(since) < 0)) {
			snprintf(err, errlen, "since must be a whole number");
			return -EINVAL;
		}
		snprintf(path, path_len, "/v1/inbox?since=%" JSON_INTEGER_FORMAT,
			 since ? json_integer_value(since) : 0);
		return 0;
	case MCP_TOOL_BROADCAST_OBSERVATION:
	case MCP_TOOL_RECOMMEND_TO_LEADER:
		break;
	case MCP_TOOL_COUNT:
		return -EINVAL;
	}
	if (!json_is_string(summary) || (priority && !json_is_string(priority)) ||
	    (json_object_get(args, "disposition") && !disposition)) {
		snprintf(err, errlen, "summary_text must be a string (priority and disposition too, when given)");
		return -EINVAL;
	}
	if (tool == MCP_TOOL_BROADCAST_OBSERVATION) {
		intent = json_pack("{s:s, s:s, s:{s:O}, s:O*}", "kind", "signal", "audience",
				   "broadcast", "payload", "summary_text", summary, "priority",
				   priority);
	} else {
		if (!disposition)
			disposition = "promote";
		if (strcmp(disposition, "promote") != 0 && strcmp(disposition, "refine") != 0 &&
		    strcmp(disposition, "reject") != 0) {
			snprintf(err, errlen, "disposition must be promote, refine or reject");
			return -EINVAL;
		}
		intent = json_pack("{s:s, s:s, s:{s:O, s:s}, s:O*}", "kind",
				   strcmp(disposition, "promote") == 0 ? "proposal" : "evaluation",
				   "audience", "leader", "payload", "summary_text", summary,
				   "disposition", disposition, "priority", priority);
	}
	*method = "POST";
	snprintf(path, path_len, "/v1/intents");
	*body = mcp_dump(intent);
	return *body ? 0 : -ENOMEM;
}

static char *mcp_tools_call(const struct mcp_server *srv, json_t *id, json_t *params)
{
	const char *name = json_string_value(json_object_get(params, "name"));
	json_t *args = json_object_get(params, "arguments");
	char path[MCP_PATH_MAX], err[MCP_ERR_MAX] = "", *body = NULL, *reply_body = NULL;
	const char *method;
	json_t *result;
	int status = 0, rc;
	size_t tool;

	for (tool = 0; name && tool < MCP_TOOL_COUNT; tool++)
		if (strcmp(mcp_tools[tool].name, name) == 0)
			break;
	if (!name || tool == MCP_TOOL_COUNT)
		return mcp_error(id, JSONRPC_INVALID_PARAMS, "unknown tool (tools/list names them)");
	if (args && !json_is_object(args))
		return mcp_error(id, JSONRPC_INVALID_PARAMS, "arguments must be an object");
	rc = mcp_tool_request((enum mcp_tool_id)tool, args, &method, path, sizeof(path), &body,
			      err, sizeof(err));
	if (rc == -EINVAL)
		return mcp_error(id, JSONRPC_INVALID_PARAMS, err);
	if (rc == 0)
		rc = srv->sidecar(srv->opaque, method, path, body, &status, &reply_body, err,
				  sizeof(err));
	if (rc < 0)
		result = mcp_text_result(err[0] ? err : "the messaging sidecar cannot be reached",
					 true);
	else
		result = mcp_text_result(reply_body ? reply_body : "",
					 status < MCP_HTTP_OK_MIN || status >= MCP_HTTP_OK_END);
	free(body);
	free(reply_body);
	return mcp_result(id, result);
}

static bool mcp_id_valid(json_t *id)
{
	return json_is_string(id) || json_is_integer(id);
}

enum mcp_message_class mcp_handle(const struct mcp_server *srv, const char *text, size_t len,
				  char **reply, bool *initialize)
{
	json_t *msg = len <= MCP_MESSAGE_MAX ? json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL)
					     : NULL;
	json_t *id = json_object_get(msg, "id");
	json_t *params = json_object_get(msg, "params");
	const char *method = json_string_value(json_object_get(msg, "method"));
	const char *version = json_string_value(json_object_get(msg, "jsonrpc"));
	enum mcp_message_class cls = MCP_MESSAGE_REQUEST;

	*reply = NULL;
	*initialize = false;
	if (!msg) {
		*reply = mcp_error(NULL, JSONRPC_PARSE_ERROR, "parse error: not one JSON value");
		return MCP_MESSAGE_INVALID;
	}
	if (!json_is_object(msg) || !version || strcmp(version, JSONRPC_VERSION) != 0 ||
	    (id && !mcp_id_valid(id)) || (params && !json_is_object(params))) {
		*reply = mcp_error(NULL, JSONRPC_INVALID_REQUEST,
				   "invalid request: one JSON-RPC 2.0 object (batches are not supported)");
		cls = MCP_MESSAGE_INVALID;
	} else if (!method) {
		cls = MCP_MESSAGE_NOTIFICATION; /* a response from the client: nothing to answer */
	} else if (!id) {
		cls = MCP_MESSAGE_NOTIFICATION; /* notifications/initialized and the like */
	} else if (strcmp(method, "initialize") == 0) {
		*initialize = true;
		*reply = mcp_result(id, mcp_initialize(params));
	} else if (strcmp(method, "ping") == 0) {
		*reply = mcp_result(id, json_object());
	} else if (strcmp(method, "tools/list") == 0) {
		*reply = mcp_result(id, mcp_tools_list());
	} else if (strcmp(method, "tools/call") == 0) {
		*reply = mcp_tools_call(srv, id, params);
	} else {
		*reply = mcp_error(id, JSONRPC_METHOD_NOT_FOUND, "method not found");
	}
	json_decref(msg);
	return cls;
}
