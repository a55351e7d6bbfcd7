/*
 * Parsing and naming for the messaging wire format (see message.h). Each closed set is one
 * table indexed by its enum, so a name and its value cannot drift apart; parsers refuse
 * before they allocate anything that a guest could make large.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/api_error.h"
#include "common/parse_number.h"
#include "messaging/message.h"

#define MESSAGE_FIRST_PRINTABLE 0x21
#define MESSAGE_LAST_PRINTABLE 0x7e

static const struct api_error_info messaging_errors[] = {
	[MESSAGING_ERR_INVALID_PARAMS] = { "INVALID_PARAMS", 400, false },
	[MESSAGING_ERR_NOT_FOUND] = { "NOT_FOUND", 404, false },
	[MESSAGING_ERR_METHOD_NOT_ALLOWED] = { "METHOD_NOT_ALLOWED", 405, false },
	[MESSAGING_ERR_PAYLOAD_TOO_LARGE] = { "PAYLOAD_TOO_LARGE", 413, false },
	[MESSAGING_ERR_TOO_MANY_REQUESTS] = { "TOO_MANY_REQUESTS", 429, true },
	[MESSAGING_ERR_INTERNAL_ERROR] = { "INTERNAL_ERROR", 500, true },
};

static const char *const messaging_kind_names[] = {
	[MESSAGING_KIND_PROPOSAL] = "proposal",
	[MESSAGING_KIND_SIGNAL] = "signal",
	[MESSAGING_KIND_EVALUATION] = "evaluation",
};

static const char *const messaging_audience_names[] = {
	[MESSAGING_AUDIENCE_BROADCAST] = "broadcast",
	[MESSAGING_AUDIENCE_LEADER] = "leader",
};

static const char *const messaging_priority_names[] = {
	[MESSAGING_PRIORITY_HIGH] = "high",
	[MESSAGING_PRIORITY_NORMAL] = "normal",
	[MESSAGING_PRIORITY_LOW] = "low",
};

static const char *const messaging_role_names[] = {
	[MESSAGING_ROLE_CANDIDATE] = "candidate",
	[MESSAGING_ROLE_LEADER] = "leader",
};

const char *messaging_kind_name(enum messaging_kind kind)
{
	return messaging_kind_names[kind];
}

const char *messaging_audience_name(enum messaging_audience audience)
{
	return messaging_audience_names[audience];
}

const char *messaging_priority_name(enum messaging_priority priority)
{
	return messaging_priority_names[priority];
}

const char *messaging_role_name(enum messaging_role role)
{
	return messaging_role_names[role];
}

/* The index of text in names[count], or -EINVAL. */
static int message_lookup(const char *const *names, size_t count, const char *text)
{
	for (size_t i = 0; text && i < count; i++)
		if (strcmp(names[i], text) == 0)
			return (int)i;
	return -EINVAL;
}

int messaging_kind_parse(const char *text, enum messaging_kind *out)
{
	int index = message_lookup(messaging_kind_names, MESSAGING_KIND_COUNT, text);

	if (index < 0)
		return index;
	*out = (enum messaging_kind)index;
	return 0;
}

int messaging_audience_parse(const char *text, enum messaging_audience *out)
{
	int index = message_lookup(messaging_audience_names, MESSAGING_AUDIENCE_COUNT, text);

	if (index < 0)
		return index;
	*out = (enum messaging_audience)index;
	return 0;
}

int messaging_priority_parse(const char *text, enum messaging_priority *out)
{
	int index = message_lookup(messaging_priority_names, MESSAGING_PRIORITY_COUNT, text);

	if (index < 0)
		return index;
	*out = (enum messaging_priority)index;
	return 0;
}

unsigned messaging_error_http_status(enum messaging_error_code code)
{
	return messaging_errors[code].http_status;
}

int messaging_error_set(struct messaging_error *err, enum messaging_error_code code,
			const char *fmt, ...)
{
	va_list ap;

	err->code = code;
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
	return -1;
}

json_t *messaging_error_to_json(const struct messaging_error *err)
{
	return json_pack("{s:s, s:s, s:b}", "code", messaging_errors[err->code].name, "message",
			 err->message, "retryable", messaging_errors[err->code].retryable);
}

/* One intent object: kind and audience required, payload an object, priority optional. */
static int message_parse_one(json_t *item, size_t index, struct messaging_intent *out,
			     struct messaging_error *err)
{
	json_t *payload = json_object_get(item, "payload");
	json_t *priority = json_object_get(item, "priority");
	size_t payload_len;

	if (!json_is_object(item))
		return messaging_error_set(err, MESSAGING_ERR_INVALID_PARAMS,
					   "intent %zu is not a JSON object", index);
	if (messaging_kind_parse(json_string_value(json_object_get(item, "kind")), &out->kind) < 0)
		return messaging_error_set(err, MESSAGING_ERR_INVALID_PARAMS,
					   "intent %zu: kind must be proposal, signal or evaluation",
					   index);
	if (messaging_audience_parse(json_string_value(json_object_get(item, "audience")),
				     &out->audience) < 0)
		return messaging_error_set(err, MESSAGING_ERR_INVALID_PARAMS,
					   "intent %zu: audience must be broadcast or leader", index);
	out->priority = MESSAGING_PRIORITY_NORMAL;
	if (priority && !json_is_null(priority) &&
	    messaging_priority_parse(json_string_value(priority), &out->priority) < 0)
		return messaging_error_set(err, MESSAGING_ERR_INVALID_PARAMS,
					   "intent %zu: priority must be high, normal or low", index);
	if (!json_is_object(payload))
		return messaging_error_set(err, MESSAGING_ERR_INVALID_PARAMS,
					   "intent %zu: payload must be a JSON object, e.g. {\"summary_text\": \"...\"}",
					   index);
	payload_len = json_dumpb(payload, NULL, 0, JSON_COMPACT);
	if (payload_len > MESSAGING_PAYLOAD_MAX)
		return messaging_error_set(err, MESSAGING_ERR_PAYLOAD_TOO_LARGE,
					   "intent %zu: the payload is %zu bytes; the limit is %u",
					   index, payload_len, MESSAGING_PAYLOAD_MAX);
	out->payload = payload;
	return 0;
}

int messaging_parse_intents(const char *body, size_t len, json_t **root,
			    struct messaging_intent **out, size_t *count,
			    struct messaging_error *err)
{
	json_error_t json_err;
	json_t *doc;
	size_t n;

	*root = NULL;
	*out = NULL;
	*count = 0;
	if (len > MESSAGING_BODY_MAX)
		return messaging_error_set(err, MESSAGING_ERR_PAYLOAD_TOO_LARGE,
					   "the body is %zu bytes; the limit is %u", len,
					   MESSAGING_BODY_MAX);
	doc = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &json_err);
	if (!doc)
		return messaging_error_set(err, MESSAGING_ERR_INVALID_PARAMS,
					   "the body is not JSON: %s", json_err.text);
	n = json_is_array(doc) ? json_array_size(doc) : 1;
	if (n == 0) {
		json_decref(doc);
		return messaging_error_set(err, MESSAGING_ERR_INVALID_PARAMS,
					   "send one intent or a non-empty array of them");
	}
	if (n > MESSAGING_INTENTS_PER_ITERATION) {
		json_decref(doc);
		return messaging_error_set(err, MESSAGING_ERR_TOO_MANY_REQUESTS,
					   "a batch of %zu intents is over the limit of %u per iteration",
					   n, MESSAGING_INTENTS_PER_ITERATION);
	}
	*out = calloc(n, sizeof(**out));
	if (!*out) {
		json_decref(doc);
		return messaging_error_set(err, MESSAGING_ERR_INTERNAL_ERROR, "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		json_t *item = json_is_array(doc) ? json_array_get(doc, i) : doc;

		if (message_parse_one(item, i, &(*out)[i], err) < 0) {
			messaging_intents_free(*out);
			*out = NULL;
			json_decref(doc);
			return -1;
		}
	}
	*root = doc;
	*count = n;
	return 0;
}

void messaging_intents_free(struct messaging_intent *intents)
{
	free(intents);
}

int messaging_parse_since(const char *text, uint64_t *out, struct messaging_error *err)
{
	*out = 0;
	if (!text || !*text)
		return 0;
	if (parse_decimal_u64(text, 0, UINT64_MAX, out) < 0)
		return messaging_error_set(err, MESSAGING_ERR_INVALID_PARAMS,
					   "since must be a whole number (an inbox version), not '%.32s'",
					   text);
	return 0;
}

bool messaging_idempotency_key_valid(const char *key)
{
	size_t len = key ? strlen(key) : 0;

	if (len == 0 || len > MESSAGING_IDEMPOTENCY_KEY_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)key[i] < MESSAGE_FIRST_PRINTABLE ||
		    (unsigned char)key[i] > MESSAGE_LAST_PRINTABLE)
			return false;
	return true;
}
