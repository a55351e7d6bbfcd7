/*
 * void-mcp's pure parts without a network: the JSON-RPC core (mcp_handle) with a stub sidecar
 * that records what it was asked, and the Streamable HTTP request-head parser's limits. The
 * SDK test (mcp_sdk_test.mjs) covers the same over real transports; these pin the refusals.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "mcp.h"
#include "mcp_http.h"

struct stub {
	char method[8];
	char path[64];
	char *body;
};

static int stub_sidecar(void *opaque, const char *method, const char *path, const char *body,
			int *status, char **reply_body, char *err, size_t errlen)
{
	struct stub *stub = opaque;

	snprintf(stub->method, sizeof(stub->method), "%s", method);
	snprintf(stub->path, sizeof(stub->path), "%s", path);
	free(stub->body);
	stub->body = body ? strdup(body) : NULL;
	*status = strcmp(method, "POST") == 0 ? 201 : 200;
	*reply_body = strdup("{\"ok\":true}");
	return 0;
}

static enum mcp_message_class handle(struct stub *stub, const char *text, char **reply)
{
	struct mcp_server srv = { .sidecar = stub_sidecar, .opaque = stub };
	bool initialize;

	return mcp_handle(&srv, text, strlen(text), reply, &initialize);
}

static void test_jsonrpc_core(void)
{
	struct stub stub = { 0 };
	char *reply;

	CHECK_INT_EQ(handle(&stub, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
				   "\"params\":{\"protocolVersion\":\"2025-03-26\"}}", &reply),
		     MCP_MESSAGE_REQUEST);
	CHECK(reply && strstr(reply, "\"protocolVersion\":\"2025-03-26\""));
	free(reply);
	handle(&stub, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\","
		      "\"params\":{\"protocolVersion\":\"1999-01-01\"}}", &reply);
	CHECK(reply && strstr(reply, "\"protocolVersion\":\"" MCP_PROTOCOL_LATEST "\""));
	free(reply);
	CHECK_INT_EQ(handle(&stub, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}",
			    &reply), MCP_MESSAGE_NOTIFICATION);
	CHECK(reply == NULL);
	CHECK_INT_EQ(handle(&stub, "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]", &reply),
		     MCP_MESSAGE_INVALID);
	CHECK(reply && strstr(reply, "-32600"));
	free(reply);
	CHECK_INT_EQ(handle(&stub, "{\"jsonrpc\":", &reply), MCP_MESSAGE_INVALID);
	CHECK(reply && strstr(reply, "-32700"));
	free(reply);
	handle(&stub, "{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"method\":\"resources/list\"}", &reply);
	CHECK(reply && strstr(reply, "-32601") && strstr(reply, "\"id\":\"x\""));
	free(reply);
	handle(&stub, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":"
		      "\"recommend_to_leader\",\"arguments\":{\"summary_text\":\"s\"}}}", &reply);
	CHECK_STR_EQ(stub.method, "POST");
	CHECK_STR_EQ(stub.path, "/v1/intents");
	CHECK(stub.body && strstr(stub.body, "\"kind\":\"proposal\"") &&
	      strstr(stub.body, "\"audience\":\"leader\"") &&
	      strstr(stub.body, "\"disposition\":\"promote\""));
	CHECK(reply && strstr(reply, "\"isError\":false"));
	free(reply);
	handle(&stub, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":"
		      "\"read_peer_messages\",\"arguments\":{\"since\":7}}}", &reply);
	CHECK_STR_EQ(stub.path, "/v1/inbox?since=7");
	free(reply);
	handle(&stub, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":"
		      "\"broadcast_observation\",\"arguments\":{}}}", &reply);
	CHECK(reply && strstr(reply, "-32602"));
	free(reply);
	free(stub.body);
}

static void test_http_head(void)
{
	struct mcp_http_request req;
	const char *good = "POST /mcp?x=1 HTTP/1.1\r\nContent-Length: 12\r\nmcp-session-id:  abc \r\n"
			   "MCP-Protocol-Version: 2025-06-18\r\nOrigin: http://localhost:3000\r\n\r\n{}";
	char *big;

	CHECK_INT_EQ(mcp_http_parse_head(good, strlen(good), &req), (int)strlen(good) - 2);
	CHECK_INT_EQ(req.method, MCP_HTTP_POST);
	CHECK_STR_EQ(req.path, "/mcp");
	CHECK_INT_EQ(req.content_length, 12);
	CHECK_STR_EQ(req.session_id, "abc");
	CHECK_STR_EQ(req.protocol_version, "2025-06-18");
	CHECK_STR_EQ(req.origin, "http://localhost:3000");
	CHECK_INT_EQ(mcp_http_parse_head(good, 20, &req), 0);
	CHECK_INT_EQ(mcp_http_parse_head("POST /mcp HTTP/1.1\r\nContent-Length: 1\r\n"
					 "Content-Length: 2\r\n\r\n", 61, &req), -EINVAL);
	CHECK_INT_EQ(mcp_http_parse_head("POST /mcp HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 43,
					 &req), -EINVAL);
	CHECK_INT_EQ(mcp_http_parse_head("POST mcp HTTP/1.1\r\n\r\n", 21, &req), -EINVAL);
	CHECK_INT_EQ(mcp_http_parse_head("GARBAGE\r\n\r\n", 11, &req), -EINVAL);
	big = malloc(MCP_HTTP_HEAD_MAX + 1);
	if (big) {
		memset(big, 'a', MCP_HTTP_HEAD_MAX);
		CHECK_INT_EQ(mcp_http_parse_head(big, MCP_HTTP_HEAD_MAX, &req), -E2BIG);
		free(big);
	}
}

int main(void)
{
	RUN_TEST(test_jsonrpc_core);
	RUN_TEST(test_http_head);
	return harness_finish();
}
