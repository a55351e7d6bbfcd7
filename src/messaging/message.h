/*
 * The messaging wire format, shared by the sidecar (src/messaging/sidecar.c) and its tests:
 * the names of the closed sets (kind, audience, priority, role), the one error shape
 * {code, message, retryable} the daemon also uses, and the parsers of what a guest sends
 * (intent bodies, ?since=). The parsers are pure functions of bytes so they are fuzzed
 * (fuzz/messaging_request_fuzz.c); every limit is checked here, before the sidecar's state is
 * touched. Field names follow upstream void-box (docs/messaging.md).
 */
#ifndef VOIDBOX_MESSAGING_MESSAGE_H
#define VOIDBOX_MESSAGING_MESSAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* At most this many intents per sender per iteration; more get 429. */
#define MESSAGING_INTENTS_PER_ITERATION 3u
/*
 * At most this many new Idempotency-Keys per sender per iteration; a request with one more
 * gets 429, while a key already used still answers. Each key is remembered for the
 * iteration, so this bounds that table even when every request repeats known content.
 */
#define MESSAGING_KEYS_PER_ITERATION 32u
/* An intent's serialized payload may be this long; longer gets 413. */
#define MESSAGING_PAYLOAD_MAX 4096u
/* A request body may be this long (a batch of intents with their envelopes); longer gets 413. */
#define MESSAGING_BODY_MAX (16u * 1024u)
/* An intent lives this many iterations after the one it was sent in. */
#define MESSAGING_TTL_ITERATIONS 2u
#define MESSAGING_IDEMPOTENCY_KEY_MAX 128u
#define MESSAGING_ERROR_MESSAGE_MAX 256u

enum messaging_kind {
	MESSAGING_KIND_PROPOSAL,
	MESSAGING_KIND_SIGNAL,
	MESSAGING_KIND_EVALUATION,
	MESSAGING_KIND_COUNT,
};

enum messaging_audience {
	MESSAGING_AUDIENCE_BROADCAST,
	MESSAGING_AUDIENCE_LEADER,
	MESSAGING_AUDIENCE_COUNT,
};

enum messaging_priority {
	MESSAGING_PRIORITY_HIGH,
	MESSAGING_PRIORITY_NORMAL,
	MESSAGING_PRIORITY_LOW,
	MESSAGING_PRIORITY_COUNT,
};

enum messaging_role {
	MESSAGING_ROLE_CANDIDATE,
	MESSAGING_ROLE_LEADER,
	MESSAGING_ROLE_COUNT,
};

/* The sidecar's error codes: the daemon's names and its one JSON shape. */
enum messaging_error_code {
	MESSAGING_ERR_INVALID_PARAMS,
	MESSAGING_ERR_NOT_FOUND,
	MESSAGING_ERR_METHOD_NOT_ALLOWED,
	MESSAGING_ERR_PAYLOAD_TOO_LARGE,
	MESSAGING_ERR_TOO_MANY_REQUESTS,
	MESSAGING_ERR_INTERNAL_ERROR,
};

struct messaging_error {
	enum messaging_error_code code;
	char message[MESSAGING_ERROR_MESSAGE_MAX];
};

/* One intent as a guest submits it, checked. payload is a JSON object (a reference). */
struct messaging_intent {
	enum messaging_kind kind;
	enum messaging_audience audience;
	enum messaging_priority priority;
	json_t *payload;
};

const char *messaging_kind_name(enum messaging_kind kind);
const char *messaging_audience_name(enum messaging_audience audience);
const char *messaging_priority_name(enum messaging_priority priority);
const char *messaging_role_name(enum messaging_role role);
/* 0, or -EINVAL for a name outside the set. */
int messaging_kind_parse(const char *text, enum messaging_kind *out);
int messaging_audience_parse(const char *text, enum messaging_audience *out);
int messaging_priority_parse(const char *text, enum messaging_priority *out);

unsigned messaging_error_http_status(enum messaging_error_code code);
/* Fills err and returns -1, so parsers can `return messaging_error_set(...)`. */
int messaging_error_set(struct messaging_error *err, enum messaging_error_code code,
			const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* {code, message, retryable}; NULL on allocation failure. */
json_t *messaging_error_to_json(const struct messaging_error *err);

/*
 * POST /v1/intents: one intent object or an array of up to MESSAGING_INTENTS_PER_ITERATION.
 * On success *out is a malloc'd array of *count intents (their payloads referenced from
 * *root, which the caller json_decref()s after messaging_intents_free). -1 with err set.
 */
int messaging_parse_intents(const char *body, size_t len, json_t **root,
			    struct messaging_intent **out, size_t *count,
			    struct messaging_error *err);
void messaging_intents_free(struct messaging_intent *intents);

/* ?since=V: NULL or "" is 0. */
int messaging_parse_since(const char *text, uint64_t *out, struct messaging_error *err);

/* An Idempotency-Key header: printable ASCII, 1..MESSAGING_IDEMPOTENCY_KEY_MAX bytes. */
bool messaging_idempotency_key_valid(const char *key);

#endif
