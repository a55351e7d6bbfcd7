/*
 * A client of `voidbox serve` on libcurl: the CLI's status, logs, cancel and run --daemon,
 * and the daemon's contract tests, talk to the daemon through this one file. A unix address
 * goes through CURLOPT_UNIX_SOCKET_PATH (the URL's host is then a placeholder); a TCP address
 * sends the bearer token read from the token file.
 */
#ifndef VOIDBOX_DAEMON_CLIENT_H
#define VOIDBOX_DAEMON_CLIENT_H

#include <stdbool.h>
#include <stddef.h>

#include "daemon/daemon.h"

#define DAEMON_CLIENT_TOKEN_MAX 256

struct daemon_client {
	struct daemon_address address;
	char token[DAEMON_CLIENT_TOKEN_MAX]; /* "" when none is sent */
};

/* A response: HTTP status and the body (NUL-terminated, malloc'd). */
struct daemon_response {
	long status;
	char *body;
	size_t len;
};

/*
 * url: unix://PATH, tcp://HOST:PORT or NULL (the default socket). token_file: read for TCP
 * (NULL: the default token file). env: the defaults' variables (NULL: unset). 0, or negative
 * errno with err set.
 */
int daemon_client_init(struct daemon_client *client, const char *url, const char *token_file,
		       const struct daemon_env *env, char *err, size_t errlen);

/* One request; body NULL sends none. 0 once any HTTP response arrived, else -EIO with err. */
int daemon_client_request(const struct daemon_client *client, const char *method,
			  const char *path, const char *body, struct daemon_response *out,
			  char *err, size_t errlen);
void daemon_response_free(struct daemon_response *response);

/* Called for every piece of a streamed body; return false to stop the stream. */
typedef bool (*daemon_client_data_fn)(const char *data, size_t len, void *opaque);

/* GET path as a stream (Accept: text/event-stream), handing each piece to on_data. */
int daemon_client_stream(const struct daemon_client *client, const char *path,
			 daemon_client_data_fn on_data, void *opaque, long *status, char *err,
			 size_t errlen);

#endif
