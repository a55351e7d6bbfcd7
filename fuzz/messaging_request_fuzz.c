/*
 * libFuzzer target for what the messaging sidecar parses from a guest or the host (src/
 * messaging/message.c and the state changes in sidecar.c that take bodies): POST /v1/intents
 * bodies, ?since= values, Idempotency-Key headers, and the control routes' inbox and message
 * bodies. libmicrohttpd has split the request by then; these get its bytes unchanged.
 *
 * The first byte picks the parser, the rest is its input. What a parser accepts is checked
 * against what the sidecar relies on: 1 to MESSAGING_INTENTS_PER_ITERATION intents, each with
 * an object payload within MESSAGING_PAYLOAD_MAX bytes and names inside their enums; a loaded
 * inbox never moves the iteration backwards.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "messaging/sidecar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum messaging_fuzz_parser {
	MESSAGING_FUZZ_INTENTS,
	MESSAGING_FUZZ_SINCE,
	MESSAGING_FUZZ_KEY,
	MESSAGING_FUZZ_INBOX,
	MESSAGING_FUZZ_MESSAGE,
	MESSAGING_FUZZ_PARSER_COUNT,
};

static void messaging_fuzz_intents(const char *body, size_t len)
{
	struct messaging_intent *intents;
	struct messaging_error err;
	json_t *root;
	size_t count;

	if (messaging_parse_intents(body, len, &root, &intents, &count, &err) < 0) {
		if (messaging_error_http_status(err.code) < 400 || root || intents)
			abort();
		return;
	}
	if (count == 0 || count > MESSAGING_INTENTS_PER_ITERATION)
		abort();
	for (size_t i = 0; i < count; i++) {
		if (intents[i].kind >= MESSAGING_KIND_COUNT ||
		    intents[i].audience >= MESSAGING_AUDIENCE_COUNT ||
		    intents[i].priority >= MESSAGING_PRIORITY_COUNT ||
		    !json_is_object(intents[i].payload) ||
		    json_dumpb(intents[i].payload, NULL, 0, JSON_COMPACT) > MESSAGING_PAYLOAD_MAX)
			abort();
	}
	messaging_intents_free(intents);
	json_decref(root);
}

static void messaging_fuzz_state(enum messaging_fuzz_parser parser, const char *body, size_t len)
{
	struct messaging_error err;
	struct sidecar *sc;
	json_t *status;
	json_int_t before, after;

	if (sidecar_create("fuzz", &sc) < 0)
		return;
	status = sidecar_status(sc);
	before = json_integer_value(json_object_get(status, "iteration"));
	json_decref(status);
	if (parser == MESSAGING_FUZZ_INBOX)
		sidecar_load_inbox(sc, body, len, &err);
	else
		sidecar_push_message(sc, body, len, &err);
	status = sidecar_status(sc);
	after = json_integer_value(json_object_get(status, "iteration"));
	json_decref(status);
	if (after < before)
		abort();
	json_decref(sidecar_drain_intents(sc));
	sidecar_advance(sc);
	sidecar_destroy(sc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	enum messaging_fuzz_parser parser;
	struct messaging_error err;
	uint64_t since;
	char *text;

	if (size == 0)
		return 0;
	parser = (enum messaging_fuzz_parser)(data[0] % MESSAGING_FUZZ_PARSER_COUNT);
	text = malloc(size);
	if (!text)
		return 0;
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';
	switch (parser) {
	case MESSAGING_FUZZ_INTENTS:
		messaging_fuzz_intents(text, size - 1);
		break;
	case MESSAGING_FUZZ_SINCE:
		messaging_parse_since(text, &since, &err);
		break;
	case MESSAGING_FUZZ_KEY:
		if (messaging_idempotency_key_valid(text) &&
		    (strlen(text) == 0 || strlen(text) > MESSAGING_IDEMPOTENCY_KEY_MAX))
			abort();
		break;
	case MESSAGING_FUZZ_INBOX:
	case MESSAGING_FUZZ_MESSAGE:
		messaging_fuzz_state(parser, text, size - 1);
		break;
	case MESSAGING_FUZZ_PARSER_COUNT:
		break;
	}
	free(text);
	return 0;
}
