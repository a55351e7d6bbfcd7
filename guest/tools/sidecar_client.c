/*
 * A minimal HTTP/1.1 client for the guest tools (see sidecar_client.h). Every step is
 * bounded: the URL's parts, the request (built with asprintf), the response (at most
 * SIDECAR_CLIENT_RESPONSE_MAX bytes, read until the server closes, as Connection: close asks),
 * and the time a connect or read may take (SO_RCVTIMEO/SO_SNDTIMEO).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "sidecar_client.h"
#include "tool_io.h"

#define CLIENT_SCHEME "http://"
#define CLIENT_LOCALHOST "localhost"
#define CLIENT_LOOPBACK "127.0.0.1"
#define CLIENT_TIMEOUT_SECS 15
#define CLIENT_READ_CHUNK 4096
#define CLIENT_PORT_MAX 65535ul
#define CLIENT_DECIMAL 10
#define CLIENT_STATUS_PREFIX "HTTP/1."
#define CLIENT_HEAD_END "\r\n\r\n"
/* "HTTP/1.x NNN": the status code starts after the minor version and a space */
#define CLIENT_STATUS_CODE_OFFSET (sizeof(CLIENT_STATUS_PREFIX) - 1 + 2)
#define CLIENT_STATUS_LINE_MIN (CLIENT_STATUS_CODE_OFFSET + 3)

int sidecar_endpoint_parse(const char *url, struct sidecar_endpoint *out)
{
	const char *host, *colon, *end;
	char *num_end;
	unsigned long port;
	struct in_addr addr;
	size_t host_len;

	if (!url || strncmp(url, CLIENT_SCHEME, strlen(CLIENT_SCHEME)) != 0)
		return -EINVAL;
	host = url + strlen(CLIENT_SCHEME);
	colon = strchr(host, ':');
	if (!colon)
		return -EINVAL;
	host_len = (size_t)(colon - host);
	if (host_len == strlen(CLIENT_LOCALHOST) && strncmp(host, CLIENT_LOCALHOST, host_len) == 0) {
		host = CLIENT_LOOPBACK;
		host_len = strlen(CLIENT_LOOPBACK);
	}
	if (host_len == 0 || host_len >= sizeof(out->host))
		return -EINVAL;
	memcpy(out->host, host, host_len);
	out->host[host_len] = '\0';
	if (inet_pton(AF_INET, out->host, &addr) != 1)
		return -EINVAL;
	if (colon[1] < '0' || colon[1] > '9')
		return -EINVAL;
	errno = 0;
	port = strtoul(colon + 1, &num_end, CLIENT_DECIMAL);
	end = num_end;
	if (errno || port == 0 || port > CLIENT_PORT_MAX || (*end && strcmp(end, "/") != 0))
		return -EINVAL;
	out->port = (uint16_t)port;
	return 0;
}

static int client_connect(const struct sidecar_endpoint *ep, char *err, size_t errlen)
{
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons(ep->port) };
	struct timeval timeout = { .tv_sec = CLIENT_TIMEOUT_SECS };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	inet_pton(AF_INET, ep->host, &addr.sin_addr);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		int rc = -errno;

		snprintf(err, errlen, "cannot reach the messaging sidecar at %s:%u: %s", ep->host,
			 ep->port, strerror(-rc));
		close(fd);
		return rc;
	}
	return fd;
}

/* Reads to EOF, at most SIDECAR_CLIENT_RESPONSE_MAX bytes. */
static int client_read_all(int fd, char **out, size_t *out_len)
{
	size_t len = 0, cap = CLIENT_READ_CHUNK;
	char *buf = malloc(cap + 1);

	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t n;

		if (len == cap) {
			char *grown;

			if (cap >= SIDECAR_CLIENT_RESPONSE_MAX) {
				free(buf);
				return -EFBIG;
			}
			cap *= 2;
			grown = realloc(buf, cap + 1);
			if (!grown) {
				free(buf);
				return -ENOMEM;
			}
			buf = grown;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int rc = -errno;

			free(buf);
			return rc;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	*out = buf;
	*out_len = len;
	return 0;
}

/* Splits "HTTP/1.x NNN ...\r\n...\r\n\r\nbody" into status and body. */
static int client_split(char *raw, size_t len, struct sidecar_reply *reply)
{
	char *head_end = strstr(raw, CLIENT_HEAD_END);
	size_t body_off;

	if (strncmp(raw, CLIENT_STATUS_PREFIX, strlen(CLIENT_STATUS_PREFIX)) != 0 || !head_end ||
	    len < CLIENT_STATUS_LINE_MIN)
		return -EPROTO;
	reply->status = atoi(raw + CLIENT_STATUS_CODE_OFFSET);
	body_off = (size_t)(head_end - raw) + strlen(CLIENT_HEAD_END);
	reply->len = len - body_off;
	reply->body = malloc(reply->len + 1);
	if (!reply->body)
		return -ENOMEM;
	memcpy(reply->body, raw + body_off, reply->len);
	reply->body[reply->len] = '\0';
	return 0;
}

int sidecar_call(const struct sidecar_endpoint *ep, const char *method, const char *path,
		 const char *body, const char *idempotency_key, struct sidecar_reply *reply,
		 char *err, size_t errlen)
{
	char *request = NULL, *raw = NULL;
	size_t raw_len = 0, body_len = body ? strlen(body) : 0;
	int fd, rc;

	memset(reply, 0, sizeof(*reply));
	if (asprintf(&request,
		     "%s %s HTTP/1.1\r\nHost: %s:%u\r\nConnection: close\r\nAccept: application/json\r\n"
		     "%s%s%sContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
		     method, path, ep->host, ep->port, idempotency_key ? "Idempotency-Key: " : "",
		     idempotency_key ? idempotency_key : "", idempotency_key ? "\r\n" : "",
		     body_len, body ? body : "") < 0)
		return -ENOMEM;
	fd = client_connect(ep, err, errlen);
	if (fd < 0) {
		free(request);
		return fd;
	}
	rc = tool_write_all(fd, request, strlen(request));
	if (rc == 0)
		rc = client_read_all(fd, &raw, &raw_len);
	if (rc == 0)
		rc = client_split(raw, raw_len, reply);
	if (rc < 0)
		snprintf(err, errlen, "the messaging sidecar at %s:%u gave no usable answer: %s",
			 ep->host, ep->port, strerror(-rc));
	close(fd);
	free(raw);
	free(request);
	return rc;
}

void sidecar_reply_free(struct sidecar_reply *reply)
{
	free(reply->body);
	memset(reply, 0, sizeof(*reply));
}

int sidecar_new_key(char *out, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char bytes[SIDECAR_CLIENT_KEY_HEX / 2];

	if (len <= SIDECAR_CLIENT_KEY_HEX ||
	    getrandom(bytes, sizeof(bytes), 0) != (ssize_t)sizeof(bytes))
		return -EIO;
	for (size_t i = 0; i < sizeof(bytes); i++) {
		out[2 * i] = hex[bytes[i] >> 4];
		out[2 * i + 1] = hex[bytes[i] & 0xf];
	}
	out[SIDECAR_CLIENT_KEY_HEX] = '\0';
	return 0;
}
