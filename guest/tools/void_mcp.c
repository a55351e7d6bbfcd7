/*
 * void-mcp: an MCP server that gives a coding agent four tools on the run's messaging sidecar
 * (read_shared_context, read_peer_messages, broadcast_observation, recommend_to_leader; see
 * docs/messaging.md).
 *   void-mcp [--sidecar URL]                  stdio: newline-delimited JSON-RPC 2.0
 *   void-mcp [--sidecar URL] --http [--port P]  Streamable HTTP on 127.0.0.1:P/mcp (P 0: any)
 * The sidecar is $VOID_SIDECAR_URL unless --sidecar names it. On stdio, stdout carries only
 * MCP messages, one per line; diagnostics go to stderr. A line over MCP_MESSAGE_MAX is
 * discarded whole and answered with a parse error, so one bad message never desynchronises
 * the stream.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp.h"
#include "mcp_http.h"
#include "sidecar_client.h"

#define VMCP_EXIT_OK 0
#define VMCP_EXIT_FAILED 1
#define VMCP_EXIT_USAGE 2
#define VMCP_DEFAULT_PORT 8222u
#define VMCP_PORT_MAX 65535ul
#define VMCP_DECIMAL 10
#define VMCP_LINE_START 4096u /* the first line buffer; it doubles up to MCP_MESSAGE_MAX */
#define VMCP_TOO_LONG "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"parse error: the message is over the size limit\"}}"

static int vmcp_sidecar(void *opaque, const char *method, const char *path, const char *body,
			int *status, char **reply_body, char *err, size_t errlen)
{
	const struct sidecar_endpoint *ep = opaque;
	char key[SIDECAR_CLIENT_KEY_HEX + 1];
	struct sidecar_reply reply;
	bool keyed = strcmp(method, "POST") == 0;
	int rc;

	if (!ep) {
		snprintf(err, errlen, "%s is not set to http://IPV4:PORT; messaging is not enabled for this agent",
			 SIDECAR_URL_ENV);
		return -ENOTCONN;
	}
	if (keyed && sidecar_new_key(key, sizeof(key)) < 0) {
		snprintf(err, errlen, "cannot make an Idempotency-Key");
		return -EIO;
	}
	rc = sidecar_call(ep, method, path, body, keyed ? key : NULL, &reply, err, errlen);
	if (rc < 0)
		return rc;
	*status = reply.status;
	*reply_body = reply.body;
	return 0;
}

/* Reads one line into *buf (grown up to MCP_MESSAGE_MAX); *too_long when it was cut. */
static int vmcp_read_line(FILE *in, char **buf, size_t *cap, size_t *len, bool *too_long)
{
	int c;

	*len = 0;
	*too_long = false;
	while ((c = fgetc(in)) != EOF && c != '\n') {
		if (*too_long)
			continue;
		if (*len + 1 >= *cap) {
			size_t grown_cap = *cap ? *cap * 2 : VMCP_LINE_START;
			char *grown;

			if (*len >= MCP_MESSAGE_MAX) {
				*too_long = true;
				continue;
			}
			grown = realloc(*buf, grown_cap);
			if (!grown)
				return -ENOMEM;
			*buf = grown;
			*cap = grown_cap;
		}
		(*buf)[(*len)++] = (char)c;
	}
	if (c == EOF && *len == 0 && !*too_long)
		return -ENODATA;
	if (*buf)
		(*buf)[*len] = '\0';
	return 0;
}

static int vmcp_stdio(const struct mcp_server *srv)
{
	char *line = NULL;
	size_t cap = 0, len;
	bool too_long, initialize;
	int rc;

	while ((rc = vmcp_read_line(stdin, &line, &cap, &len, &too_long)) == 0) {
		char *reply = NULL;

		if (too_long) {
			printf("%s\n", VMCP_TOO_LONG);
		} else if (strspn(line, " \t\r") < len) {
			mcp_handle(srv, line, len, &reply, &initialize);
			if (reply)
				printf("%s\n", reply);
		}
		fflush(stdout);
		free(reply);
	}
	free(line);
	return rc == -ENODATA ? VMCP_EXIT_OK : VMCP_EXIT_FAILED;
}

int main(int argc, char **argv)
{
	const char *url = getenv(SIDECAR_URL_ENV);
	unsigned long port = VMCP_DEFAULT_PORT;
	struct sidecar_endpoint ep;
	struct mcp_server srv = { .sidecar = vmcp_sidecar };
	bool http = false;
	int rc;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--http") == 0) {
			http = true;
		} else if (strcmp(argv[i], "--sidecar") == 0 && i + 1 < argc) {
			url = argv[++i];
		} else if (strcmp(argv[i], "--port") == 0 && i + 1 < argc) {
			char *end;

			port = strtoul(argv[++i], &end, VMCP_DECIMAL);
			if (*end || port > VMCP_PORT_MAX) {
				fprintf(stderr, "void-mcp: --port takes 0-65535\n");
				return VMCP_EXIT_USAGE;
			}
		} else {
			fprintf(stderr, "usage: void-mcp [--sidecar URL] [--http [--port P]]\n");
			return VMCP_EXIT_USAGE;
		}
	}
	if (url && sidecar_endpoint_parse(url, &ep) == 0)
		srv.opaque = &ep;
	else
		fprintf(stderr, "void-mcp: warning: %s is not http://IPV4:PORT (%s); every tool will answer with an error\n",
			SIDECAR_URL_ENV, url ? url : "unset");
	if (!http)
		return vmcp_stdio(&srv);
	rc = mcp_http_serve(&srv, (uint16_t)port);
	fprintf(stderr, "void-mcp: cannot serve on 127.0.0.1:%lu: %s\n", port, strerror(-rc));
	return VMCP_EXIT_FAILED;
}
