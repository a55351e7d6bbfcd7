/*
 * void-mcp's Streamable HTTP server (see mcp_http.h): one connection at a time, one request per
 * connection (Connection: close), every read bounded in size and time. The session table is
 * small and fixed; when it is full the oldest session is forgotten (its client gets 404 and,
 * as the specification says, starts a new session).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "mcp_http.h"
#include "tool_io.h"

#define MCP_HTTP_BACKLOG 16
#define MCP_HTTP_TIMEOUT_SECS 15
#define MCP_HTTP_SESSIONS_MAX 16u
#define MCP_HTTP_SESSION_BYTES 16u
#define MCP_HTTP_ENDPOINT "/mcp"
#define MCP_HTTP_DECIMAL 10
#define MCP_HTTP_LINE_END "\r\n"
#define MCP_HTTP_HEAD_END "\r\n\r\n"
/* a Content-Length's digits and its NUL (more than any size_t has) */
#define MCP_HTTP_NUMBER_MAX 24

/* The answers this server gives: a closed set, each with its code and reason phrase. */
enum mcp_http_status {
	MCP_STATUS_OK,
	MCP_STATUS_ACCEPTED,
	MCP_STATUS_BAD_REQUEST,
	MCP_STATUS_FORBIDDEN,
	MCP_STATUS_NOT_FOUND,
	MCP_STATUS_METHOD_NOT_ALLOWED,
	MCP_STATUS_LENGTH_REQUIRED,
	MCP_STATUS_PAYLOAD_TOO_LARGE,
	MCP_STATUS_INTERNAL_ERROR,
};

static const struct {
	int code;
	const char *reason;
} mcp_http_statuses[] = {
	[MCP_STATUS_OK] = { 200, "OK" },
	[MCP_STATUS_ACCEPTED] = { 202, "Accepted" },
	[MCP_STATUS_BAD_REQUEST] = { 400, "Bad Request" },
	[MCP_STATUS_FORBIDDEN] = { 403, "Forbidden" },
	[MCP_STATUS_NOT_FOUND] = { 404, "Not Found" },
	[MCP_STATUS_METHOD_NOT_ALLOWED] = { 405, "Method Not Allowed" },
	[MCP_STATUS_LENGTH_REQUIRED] = { 411, "Length Required" },
	[MCP_STATUS_PAYLOAD_TOO_LARGE] = { 413, "Payload Too Large" },
	[MCP_STATUS_INTERNAL_ERROR] = { 500, "Internal Server Error" },
};

struct mcp_http_sessions {
	char ids[MCP_HTTP_SESSIONS_MAX][MCP_HTTP_SESSION_ID_MAX + 1];
	size_t next; /* the slot the next session takes */
};

static const char *const mcp_http_local_origins[] = { "http://localhost", "http://127.0.0.1",
						      "https://localhost", "https://127.0.0.1",
						      NULL };

/* Copies a header value into out (size max + 1); -E2BIG when it is longer. */
static int mcp_http_copy(char *out, size_t max, const char *value, size_t len)
{
	if (len > max)
		return -E2BIG;
	memcpy(out, value, len);
	out[len] = '\0';
	return 0;
}

static int mcp_http_header(struct mcp_http_request *out, const char *name, size_t name_len,
			   const char *value, size_t value_len)
{
	char number[MCP_HTTP_NUMBER_MAX];
	char *end;

#define MCP_HTTP_IS(literal) (name_len == strlen(literal) && strncasecmp(name, literal, name_len) == 0)
	if (MCP_HTTP_IS("Content-Length")) {
		if (value_len == 0 || value_len >= sizeof(number) ||
		    strspn(value, "0123456789") < value_len || out->has_length)
			return -EINVAL;
		memcpy(number, value, value_len);
		number[value_len] = '\0';
		out->content_length = strtoull(number, &end, MCP_HTTP_DECIMAL);
		out->has_length = true;
		return 0;
	}
	if (MCP_HTTP_IS("Transfer-Encoding")) {
		out->chunked = true;
		return 0;
	}
	if (MCP_HTTP_IS("Mcp-Session-Id"))
		return mcp_http_copy(out->session_id, MCP_HTTP_SESSION_ID_MAX, value, value_len);
	if (MCP_HTTP_IS("MCP-Protocol-Version"))
		return mcp_http_copy(out->protocol_version, MCP_HTTP_VERSION_MAX, value, value_len);
	if (MCP_HTTP_IS("Origin"))
		return mcp_http_copy(out->origin, MCP_HTTP_ORIGIN_MAX, value, value_len);
#undef MCP_HTTP_IS
	return 0;
}

static bool mcp_http_is_method(const char *text, size_t len, const char *method)
{
	return len == strlen(method) && strncmp(text, method, len) == 0;
}

static int mcp_http_request_line(const char *line, size_t len, struct mcp_http_request *out)
{
	const char *sp1 = memchr(line, ' ', len), *sp2, *query;
	size_t method_len, path_len;

	if (!sp1)
		return -EINVAL;
	sp2 = memchr(sp1 + 1, ' ', len - (size_t)(sp1 + 1 - line));
	if (!sp2 || (size_t)(line + len - (sp2 + 1)) != strlen("HTTP/1.1") ||
	    strncmp(sp2 + 1, "HTTP/1.", strlen("HTTP/1.")) != 0)
		return -EINVAL;
	method_len = (size_t)(sp1 - line);
	out->method = mcp_http_is_method(line, method_len, "POST")     ? MCP_HTTP_POST
		      : mcp_http_is_method(line, method_len, "GET")    ? MCP_HTTP_GET
		      : mcp_http_is_method(line, method_len, "DELETE") ? MCP_HTTP_DELETE
								       : MCP_HTTP_OTHER;
	path_len = (size_t)(sp2 - (sp1 + 1));
	query = memchr(sp1 + 1, '?', path_len);
	if (query)
		path_len = (size_t)(query - (sp1 + 1));
	if (path_len == 0 || sp1[1] != '/')
		return -EINVAL;
	return mcp_http_copy(out->path, MCP_HTTP_PATH_MAX, sp1 + 1, path_len);
}

int mcp_http_parse_head(const char *buf, size_t len, struct mcp_http_request *out)
{
	const char *end;
	size_t head_len, lines_len, pos = 0;
	bool first = true;
	int rc;

	memset(out, 0, sizeof(*out));
	end = memmem(buf, len, MCP_HTTP_HEAD_END, strlen(MCP_HTTP_HEAD_END));
	if (!end)
		return len >= MCP_HTTP_HEAD_MAX ? -E2BIG : 0;
	head_len = (size_t)(end - buf) + strlen(MCP_HTTP_HEAD_END);
	if (head_len > MCP_HTTP_HEAD_MAX)
		return -E2BIG;
	/* every line of the head with its CRLF, the blank line's excluded */
	lines_len = (size_t)(end - buf) + strlen(MCP_HTTP_LINE_END);
	while (pos < lines_len) {
		const char *line = buf + pos;
		size_t line_len = 0;
		const char *colon;

		/* the head ends in CRLF CRLF, so every line here ends in CRLF */
		while (pos + line_len + 1 < lines_len &&
		       !(line[line_len] == '\r' && line[line_len + 1] == '\n'))
			line_len++;
		pos += line_len + strlen(MCP_HTTP_LINE_END);
		if (memchr(line, '\0', line_len))
			return -EINVAL;
		if (first) {
			rc = mcp_http_request_line(line, line_len, out);
			first = false;
		} else {
			size_t value_off;

			colon = memchr(line, ':', line_len);
			if (!colon || colon == line)
				return -EINVAL;
			value_off = (size_t)(colon + 1 - line);
			while (value_off < line_len && (line[value_off] == ' ' || line[value_off] == '\t'))
				value_off++;
			while (line_len > value_off &&
			       (line[line_len - 1] == ' ' || line[line_len - 1] == '\t'))
				line_len--;
			rc = mcp_http_header(out, line, (size_t)(colon - line), line + value_off,
					     line_len - value_off);
		}
		if (rc < 0)
			return rc;
	}
	return (int)head_len;
}

/* ---- the server ----------------------------------------------------------------------------- */

static void mcp_http_respond(int fd, enum mcp_http_status status, const char *extra_headers,
			     const char *body)
{
	char *text = NULL;
	size_t body_len = body ? strlen(body) : 0;

	if (asprintf(&text,
		     "HTTP/1.1 %d %s\r\nConnection: close\r\nCache-Control: no-store\r\n%s"
		     "%sContent-Length: %zu\r\n\r\n%s",
		     mcp_http_statuses[status].code, mcp_http_statuses[status].reason,
		     extra_headers ? extra_headers : "",
		     body ? "Content-Type: application/json\r\n" : "", body_len,
		     body ? body : "") < 0)
		return;
	tool_write_all(fd, text, strlen(text));
	free(text);
}

static void mcp_http_refuse(int fd, enum mcp_http_status status, const char *message)
{
	char body[MCP_HTTP_ORIGIN_MAX * 2];

	snprintf(body, sizeof(body),
		 "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":\"%s\"}}",
		 message);
	mcp_http_respond(fd, status, NULL, body);
}

static bool mcp_http_origin_ok(const char *origin)
{
	if (!origin[0])
		return true;
	for (size_t i = 0; mcp_http_local_origins[i]; i++) {
		size_t n = strlen(mcp_http_local_origins[i]);

		if (strncmp(origin, mcp_http_local_origins[i], n) == 0 &&
		    (origin[n] == '\0' || origin[n] == ':' || origin[n] == '/'))
			return true;
	}
	return false;
}

static ssize_t mcp_http_session_find(const struct mcp_http_sessions *sessions, const char *id)
{
	for (size_t i = 0; id[0] && i < MCP_HTTP_SESSIONS_MAX; i++)
		if (strcmp(sessions->ids[i], id) == 0)
			return (ssize_t)i;
	return -1;
}

static int mcp_http_session_new(struct mcp_http_sessions *sessions, char *out, size_t out_len)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char bytes[MCP_HTTP_SESSION_BYTES];
	char *slot = sessions->ids[sessions->next];

	if (getrandom(bytes, sizeof(bytes), 0) != (ssize_t)sizeof(bytes))
		return -EIO;
	for (size_t i = 0; i < sizeof(bytes); i++) {
		slot[2 * i] = hex[bytes[i] >> 4];
		slot[2 * i + 1] = hex[bytes[i] & 0xf];
	}
	slot[2 * sizeof(bytes)] = '\0';
	sessions->next = (sessions->next + 1) % MCP_HTTP_SESSIONS_MAX;
	snprintf(out, out_len, "%s", slot);
	return 0;
}

/* Reads one request: the head, then exactly Content-Length body bytes. */
static int mcp_http_read(int fd, struct mcp_http_request *req, char **body)
{
	char head[MCP_HTTP_HEAD_MAX];
	size_t len = 0, have;
	int head_len = 0;

	*body = NULL;
	while (head_len == 0) {
		ssize_t n = read(fd, head + len, sizeof(head) - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EIO;
		len += (size_t)n;
		head_len = mcp_http_parse_head(head, len, req);
		if (head_len < 0)
			return head_len;
	}
	if (req->chunked || (req->method == MCP_HTTP_POST && !req->has_length))
		return -ENOSYS;
	if (req->content_length > MCP_MESSAGE_MAX)
		return -EFBIG;
	*body = malloc(req->content_length + 1);
	if (!*body)
		return -ENOMEM;
	have = len - (size_t)head_len;
	if (have > req->content_length)
		have = req->content_length;
	memcpy(*body, head + head_len, have);
	while (have < req->content_length) {
		ssize_t n = read(fd, *body + have, req->content_length - have);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EIO;
		have += (size_t)n;
	}
	(*body)[have] = '\0';
	return 0;
}

static void mcp_http_post(int fd, const struct mcp_server *srv, struct mcp_http_sessions *sessions,
			  const struct mcp_http_request *req, const char *body)
{
	char header[MCP_HTTP_SESSION_ID_MAX * 2] = "", session[MCP_HTTP_SESSION_ID_MAX + 1];
	bool initialize = false;
	char *reply = NULL;
	enum mcp_message_class cls;

	if (req->protocol_version[0] && !mcp_protocol_supported(req->protocol_version)) {
		mcp_http_refuse(fd, MCP_STATUS_BAD_REQUEST, "unsupported MCP-Protocol-Version");
		return;
	}
	if (!mcp_is_initialize(body, req->content_length)) {
		if (!req->session_id[0]) {
			mcp_http_refuse(fd, MCP_STATUS_BAD_REQUEST,
					"missing Mcp-Session-Id: send initialize first");
			return;
		}
		if (mcp_http_session_find(sessions, req->session_id) < 0) {
			mcp_http_refuse(fd, MCP_STATUS_NOT_FOUND,
					"unknown Mcp-Session-Id: start a new session");
			return;
		}
	}
	cls = mcp_handle(srv, body, req->content_length, &reply, &initialize);
	if (initialize && reply) {
		if (mcp_http_session_new(sessions, session, sizeof(session)) < 0) {
			free(reply);
			mcp_http_refuse(fd, MCP_STATUS_INTERNAL_ERROR, "cannot make a session id");
			return;
		}
		snprintf(header, sizeof(header), "Mcp-Session-Id: %s\r\n", session);
	}
	if (cls == MCP_MESSAGE_NOTIFICATION)
		mcp_http_respond(fd, MCP_STATUS_ACCEPTED, NULL, NULL);
	else if (cls == MCP_MESSAGE_INVALID)
		mcp_http_respond(fd, MCP_STATUS_BAD_REQUEST, NULL, reply);
	else
		mcp_http_respond(fd, MCP_STATUS_OK, header, reply);
	free(reply);
}

static void mcp_http_connection(int fd, const struct mcp_server *srv,
				struct mcp_http_sessions *sessions)
{
	struct mcp_http_request req;
	char *body = NULL;
	ssize_t slot;
	int rc = mcp_http_read(fd, &req, &body);

	if (rc == -E2BIG || rc == -EFBIG)
		mcp_http_refuse(fd, MCP_STATUS_PAYLOAD_TOO_LARGE, "the request is over the limit");
	else if (rc == -ENOSYS)
		mcp_http_refuse(fd, MCP_STATUS_LENGTH_REQUIRED, "send a Content-Length");
	else if (rc < 0)
		mcp_http_refuse(fd, MCP_STATUS_BAD_REQUEST, "malformed HTTP request");
	else if (strcmp(req.path, MCP_HTTP_ENDPOINT) != 0)
		mcp_http_refuse(fd, MCP_STATUS_NOT_FOUND, "the MCP endpoint is /mcp");
	else if (!mcp_http_origin_ok(req.origin))
		mcp_http_refuse(fd, MCP_STATUS_FORBIDDEN, "Origin not allowed");
	else if (req.method == MCP_HTTP_POST)
		mcp_http_post(fd, srv, sessions, &req, body);
	else if (req.method == MCP_HTTP_DELETE) {
		slot = mcp_http_session_find(sessions, req.session_id);
		if (slot < 0) {
			mcp_http_refuse(fd, MCP_STATUS_NOT_FOUND, "unknown Mcp-Session-Id");
		} else {
			sessions->ids[slot][0] = '\0';
			mcp_http_respond(fd, MCP_STATUS_OK, NULL, NULL);
		}
	} else {
		mcp_http_respond(fd, MCP_STATUS_METHOD_NOT_ALLOWED, "Allow: POST, DELETE\r\n", NULL);
	}
	free(body);
}

int mcp_http_serve(const struct mcp_server *srv, uint16_t port)
{
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons(port),
				    .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct timeval timeout = { .tv_sec = MCP_HTTP_TIMEOUT_SECS };
	static struct mcp_http_sessions sessions;
	socklen_t addr_len = sizeof(addr);
	int one = 1;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 ||
	    listen(fd, MCP_HTTP_BACKLOG) < 0 ||
	    getsockname(fd, (struct sockaddr *)&addr, &addr_len) < 0) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	printf("void-mcp: listening on %u\n", ntohs(addr.sin_port));
	fflush(stdout);
	for (;;) {
		int conn = accept4(fd, NULL, NULL, SOCK_CLOEXEC);

		if (conn < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			close(fd);
			return -errno;
		}
		setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
		setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
		mcp_http_connection(conn, srv, &sessions);
		close(conn);
	}
}
