/*
 * libFuzzer target for what the daemon parses from a client itself (src/daemon/request.c and
 * address.c): the POST /v1/runs and cancel bodies, the from_event_id, state and telemetry
 * (from_seq, stage_name: split at the first '&') query values, the request path that picks a
 * route, listen addresses, the Authorization header check, and a guest telemetry sample as a
 * run relays it (JSON).
 * libmicrohttpd has split the request by then; these functions get its strings unchanged.
 *
 * The first byte picks the parser, the rest is its input; string parsers get a NUL-terminated
 * copy (what libmicrohttpd hands over). Whatever a parser accepts is checked against the
 * promises its callers rely on: ids and names it returns pass daemon_name_valid, a policy is
 * within its bounds, exactly one spec source is set.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/daemon_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum daemon_fuzz_parser {
	DAEMON_FUZZ_CREATE,
	DAEMON_FUZZ_CANCEL,
	DAEMON_FUZZ_EVENT_ID,
	DAEMON_FUZZ_STATE,
	DAEMON_FUZZ_ROUTE,
	DAEMON_FUZZ_ADDRESS,
	DAEMON_FUZZ_TOKEN,
	DAEMON_FUZZ_TELEMETRY_QUERY,
	DAEMON_FUZZ_GUEST_SAMPLE,
	DAEMON_FUZZ_PARSER_COUNT,
};

#define DAEMON_FUZZ_ERR_MAX 256
#define DAEMON_FUZZ_EXPECTED_TOKEN "0123456789abcdef"

static void daemon_fuzz_create(const char *body, size_t len)
{
	struct daemon_create_request req;
	struct daemon_error err;

	if (daemon_request_parse_create(body, len, &req, &err) < 0) {
		if (!daemon_error_name(err.code))
			abort();
		return;
	}
	if (!req.spec_text == !req.file)
		abort();
	if (req.run_id[0] && !daemon_name_valid(req.run_id, DAEMON_RUN_ID_MAX))
		abort();
	if (req.policy.max_parallel_microvms_per_run < 1 ||
	    req.policy.max_parallel_microvms_per_run > DAEMON_POLICY_MAX_PARALLEL ||
	    req.policy.max_stage_retries > DAEMON_POLICY_MAX_RETRIES ||
	    req.policy.stage_timeout_secs < 1 ||
	    req.policy.stage_timeout_secs > DAEMON_POLICY_MAX_STAGE_TIMEOUT ||
	    req.policy.cancel_grace_period_secs > DAEMON_POLICY_MAX_GRACE)
		abort();
	json_decref(daemon_policy_to_json(&req.policy));
	daemon_create_request_free(&req);
}

static void daemon_fuzz_route(const char *path)
{
	struct daemon_route_match match;
	enum daemon_route route = daemon_route_parse(path, &match);

	if (route != match.route)
		abort();
	if (route >= DAEMON_ROUTE_RUN && !daemon_name_valid(match.run_id, DAEMON_RUN_ID_MAX))
		abort();
	if ((route == DAEMON_ROUTE_RUN_OUTPUT_FILE || route == DAEMON_ROUTE_RUN_ARTIFACT) &&
	    !daemon_name_valid(match.stage, DAEMON_NAME_MAX))
		abort();
	if (route == DAEMON_ROUTE_RUN_ARTIFACT && !daemon_name_valid(match.artifact, DAEMON_NAME_MAX))
		abort();
}

/* "FROM_SEQ&STAGE_NAME" (no '&': from_seq alone); an accepted stage name must be valid. */
static void daemon_fuzz_telemetry_query(char *text)
{
	char *stage = strchr(text, '&');
	struct daemon_error err;
	uint64_t from_seq;

	if (stage)
		*stage++ = '\0';
	if (daemon_request_parse_telemetry_query(text, stage, &from_seq, &err) == 0 && stage &&
	    !daemon_name_valid(stage, DAEMON_NAME_MAX))
		abort();
}

/* An accepted sample has exactly the seven metrics, each within its bounds. */
static void daemon_fuzz_guest_sample(const char *body, size_t len)
{
	json_t *guest = json_loadb(body, len, 0, NULL);
	json_t *sample = daemon_request_guest_sample(guest);
	const char *key;
	json_t *value;

	if (sample) {
		if (json_object_size(sample) != 7)
			abort();
		json_object_foreach(sample, key, value) {
			if (!json_is_number(value) || json_number_value(value) < 0)
				abort();
		}
	}
	json_decref(sample);
	json_decref(guest);
}

static void daemon_fuzz_string(enum daemon_fuzz_parser parser, const char *text)
{
	char err_text[DAEMON_FUZZ_ERR_MAX];
	struct daemon_address address;
	enum daemon_state_filter filter;
	enum daemon_run_state state;
	struct daemon_error err;
	uint64_t event_id;

	switch (parser) {
	case DAEMON_FUZZ_EVENT_ID:
		daemon_request_parse_event_id(text, &event_id, &err);
		break;
	case DAEMON_FUZZ_STATE:
		if (daemon_request_parse_state_filter(text, &filter, &state, &err) == 0 &&
		    filter == DAEMON_FILTER_ONE_STATE)
			daemon_run_state_name(state);
		break;
	case DAEMON_FUZZ_ROUTE:
		daemon_fuzz_route(text);
		break;
	case DAEMON_FUZZ_ADDRESS:
		daemon_address_parse(text, NULL, &address, err_text, sizeof(err_text));
		break;
	default:
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	enum daemon_fuzz_parser parser;
	struct daemon_error err;
	char *text, *reason;

	if (size < 1)
		return 0;
	parser = (enum daemon_fuzz_parser)(data[0] % DAEMON_FUZZ_PARSER_COUNT);
	text = malloc(size);
	if (!text)
		return 0;
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';
	switch (parser) {
	case DAEMON_FUZZ_CREATE:
		daemon_fuzz_create(text, size - 1);
		break;
	case DAEMON_FUZZ_CANCEL:
		if (daemon_request_parse_cancel(text, size - 1, &reason, &err) == 0)
			free(reason);
		break;
	case DAEMON_FUZZ_TOKEN:
		daemon_request_token_matches(text, DAEMON_FUZZ_EXPECTED_TOKEN);
		break;
	case DAEMON_FUZZ_TELEMETRY_QUERY:
		daemon_fuzz_telemetry_query(text);
		break;
	case DAEMON_FUZZ_GUEST_SAMPLE:
		daemon_fuzz_guest_sample(text, size - 1);
		break;
	default:
		daemon_fuzz_string(parser, text);
		break;
	}
	free(text);
	return 0;
}
