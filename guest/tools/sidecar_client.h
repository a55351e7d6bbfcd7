/*
 * The guest tools' way to the messaging sidecar: VOID_SIDECAR_URL (http://IPv4:PORT) and one
 * HTTP/1.1 request per connection. The tools are static binaries in a guest with no libcurl,
 * so the client is a few bounded steps (connect, write, read to EOF, split the status line
 * from the body); the server side, which parses untrusted input, is libmicrohttpd on the host.
 */
#ifndef VOIDBOX_GUEST_TOOLS_SIDECAR_CLIENT_H
#define VOIDBOX_GUEST_TOOLS_SIDECAR_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#define SIDECAR_URL_ENV "VOID_SIDECAR_URL"
#define SIDECAR_CLIENT_RESPONSE_MAX (1024u * 1024u)
#define SIDECAR_CLIENT_KEY_HEX 32u

struct sidecar_endpoint {
	char host[16]; /* dotted IPv4 */
	uint16_t port;
};

struct sidecar_reply {
	int status;
	char *body; /* NUL-terminated, malloc'd */
	size_t len;
};

/* Parses http://IPv4:PORT (a trailing '/' allowed; "localhost" is 127.0.0.1). 0 or -EINVAL. */
int sidecar_endpoint_parse(const char *url, struct sidecar_endpoint *out);

/*
 * method path with body (NULL: none) and an Idempotency-Key (NULL: none). 0 with *reply
 * filled (any status), or -errno when no answer came; err says why.
 */
int sidecar_call(const struct sidecar_endpoint *ep, const char *method, const char *path,
		 const char *body, const char *idempotency_key, struct sidecar_reply *reply,
		 char *err, size_t errlen);

void sidecar_reply_free(struct sidecar_reply *reply);

/* SIDECAR_CLIENT_KEY_HEX random hex digits and a NUL into out (size > SIDECAR_CLIENT_KEY_HEX). */
int sidecar_new_key(char *out, size_t len);

#endif
