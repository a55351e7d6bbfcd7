/*
 * The daemon client (see client.h). Every call builds one curl easy handle, so a client is
 * plain data and can be used from any thread. Bodies are bounded: a response larger than
 * CLIENT_RESPONSE_MAX fails rather than growing without end. libcurl is opened by the first
 * request (src/dynlib/curl_dl.h), so commands that never talk to a daemon do not load it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/client.h"
#include "dynlib/curl_dl.h"

#define CLIENT_RESPONSE_MAX (64u * 1024u * 1024u)
#define CLIENT_URL_MAX 4096
#define CLIENT_HEADER_MAX (DAEMON_CLIENT_TOKEN_MAX + 64)
#define CLIENT_CONNECT_TIMEOUT_SECS 10L
#define CLIENT_UNIX_HOST "localhost"
#define CLIENT_PURPOSE "talking to the voidbox daemon"

struct client_body {
	char *data;
	size_t len;
	bool too_large;
};

struct client_stream {
	daemon_client_data_fn on_data;
	void *opaque;
};

static int client_read_token(const char *path, char *token, size_t size, char *err,
			     size_t errlen)
{
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		snprintf(err, errlen, "cannot read the daemon token %s: %s (pass --token-file)",
			 path, strerror(errno));
		return -errno;
	}
	n = read(fd, token, size - 1);
	close(fd);
	if (n <= 0) {
		snprintf(err, errlen, "the daemon token file %s is empty", path);
		return -EINVAL;
	}
	token[n] = '\0';
	token[strcspn(token, "\r\n")] = '\0';
	return 0;
}

int daemon_client_init(struct daemon_client *client, const char *url, const char *token_file,
		       const struct daemon_env *env, char *err, size_t errlen)
{
	char path[CLIENT_URL_MAX];
	int rc;

	memset(client, 0, sizeof(*client));
	rc = daemon_address_parse(url, env, &client->address, err, errlen);
	if (rc < 0 || client->address.kind != DAEMON_LISTEN_TCP)
		return rc;
	if (token_file)
		snprintf(path, sizeof(path), "%s", token_file);
	else if (daemon_default_token_file(env, path, sizeof(path)) < 0) {
		snprintf(err, errlen, "a tcp daemon needs a token: pass --token-file");
		return -ENOENT;
	}
	return client_read_token(path, client->token, sizeof(client->token), err, errlen);
}

static size_t client_collect(char *data, size_t size, size_t count, void *opaque)
{
	struct client_body *body = opaque;
	size_t len = size * count;
	char *grown;

	if (body->len + len > CLIENT_RESPONSE_MAX) {
		body->too_large = true;
		return 0;
	}
	grown = realloc(body->data, body->len + len + 1);
	if (!grown)
		return 0;
	body->data = grown;
	memcpy(body->data + body->len, data, len);
	body->len += len;
	body->data[body->len] = '\0';
	return len;
}

static size_t client_forward(char *data, size_t size, size_t count, void *opaque)
{
	struct client_stream *stream = opaque;

	return stream->on_data(data, size * count, stream->opaque) ? size * count : 0;
}

/*
 * A handle aimed at path on the client's daemon in *out, with its auth header in *headers.
 * 0, or -errno with err set when libcurl cannot be loaded or started.
 */
static int client_handle(const struct daemon_client *client, const char *path, CURL **out,
			 struct curl_slist **headers, char *err, size_t errlen)
{
	char url[CLIENT_URL_MAX], header[CLIENT_HEADER_MAX];
	CURL *curl;
	int rc;

	*out = NULL;
	*headers = NULL;
	rc = curl_dl_load(CLIENT_PURPOSE, err, errlen);
	if (rc < 0)
		return rc;
	curl = curl_dl.easy_init();
	if (!curl) {
		snprintf(err, errlen, "out of memory starting a request");
		return -ENOMEM;
	}
	if (client->address.kind == DAEMON_LISTEN_UNIX) {
		curl_dl.easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, client->address.path);
		snprintf(url, sizeof(url), "http://%s%s", CLIENT_UNIX_HOST, path);
	} else {
		snprintf(url, sizeof(url), "http://%s:%u%s", client->address.host,
			 client->address.port, path);
	}
	if (client->token[0]) {
		snprintf(header, sizeof(header), "Authorization: Bearer %s", client->token);
		*headers = curl_dl.slist_append(*headers, header);
	}
	curl_dl.easy_setopt(curl, CURLOPT_URL, url);
	curl_dl.easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_dl.easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, CLIENT_CONNECT_TIMEOUT_SECS);
	curl_dl.easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http");
	*out = curl;
	return 0;
}

static int client_perform(CURL *curl, struct curl_slist *headers, long *status, char *err,
			  size_t errlen)
{
	CURLcode code;

	curl_dl.easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
	code = curl_dl.easy_perform(curl);
	curl_dl.easy_getinfo(curl, CURLINFO_RESPONSE_CODE, status);
	if (code != CURLE_OK && *status == 0) {
		snprintf(err, errlen, "cannot reach the daemon: %s (is `voidbox serve` running?)",
			 curl_dl.easy_strerror(code));
		return -EIO;
	}
	return 0;
}

int daemon_client_request(const struct daemon_client *client, const char *method,
			  const char *path, const char *body, struct daemon_response *out,
			  char *err, size_t errlen)
{
	struct client_body collected = { 0 };
	struct curl_slist *headers;
	CURL *curl;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = client_handle(client, path, &curl, &headers, err, errlen);
	if (rc < 0)
		return rc;
	curl_dl.easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
	if (body) {
		headers = curl_dl.slist_append(headers, "Content-Type: application/json");
		curl_dl.easy_setopt(curl, CURLOPT_POSTFIELDS, body);
		curl_dl.easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
	}
	curl_dl.easy_setopt(curl, CURLOPT_WRITEFUNCTION, client_collect);
	curl_dl.easy_setopt(curl, CURLOPT_WRITEDATA, &collected);
	rc = client_perform(curl, headers, &out->status, err, errlen);
	if (rc == 0 && collected.too_large) {
		snprintf(err, errlen, "the daemon's response is over %u bytes", CLIENT_RESPONSE_MAX);
		rc = -EFBIG;
	}
	curl_dl.slist_free_all(headers);
	curl_dl.easy_cleanup(curl);
	if (rc < 0) {
		free(collected.data);
		return rc;
	}
	out->body = collected.data ? collected.data : strdup("");
	out->len = collected.len;
	return out->body ? 0 : -ENOMEM;
}

void daemon_response_free(struct daemon_response *response)
{
	free(response->body);
	memset(response, 0, sizeof(*response));
}

int daemon_client_stream(const struct daemon_client *client, const char *path,
			 daemon_client_data_fn on_data, void *opaque, long *status, char *err,
			 size_t errlen)
{
	struct client_stream stream = { .on_data = on_data, .opaque = opaque };
	struct curl_slist *headers;
	CURL *curl;
	int rc;

	*status = 0;
	rc = client_handle(client, path, &curl, &headers, err, errlen);
	if (rc < 0)
		return rc;
	headers = curl_dl.slist_append(headers, "Accept: text/event-stream");
	curl_dl.easy_setopt(curl, CURLOPT_WRITEFUNCTION, client_forward);
	curl_dl.easy_setopt(curl, CURLOPT_WRITEDATA, &stream);
	rc = client_perform(curl, headers, status, err, errlen);
	curl_dl.slist_free_all(headers);
	curl_dl.easy_cleanup(curl);
	return rc;
}
