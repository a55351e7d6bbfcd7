/*
 * Everything the daemon parses from a client itself: the JSON bodies of POST /v1/runs and
 * POST /v1/runs/{id}/cancel (and stop), the query values from_event_id, state, from_seq and
 * stage_name, the guest telemetry a run relays from its VM, and the request path
 * that picks a route, and the bearer token check. libmicrohttpd has already split headers and the query string; what is
 * left is here as pure functions with no daemon state, so fuzz/daemon_request_fuzz.c drives
 * them directly. Every id taken from a path or a body is checked against one character set
 * before it reaches the store or a file name.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/api_error.h"
#include "common/path.h"
#include "daemon/daemon_internal.h"

#define REQUEST_DECIMAL 10
#define REQUEST_MAX_SEGMENTS 7
#define REQUEST_SEGMENT_MAX 256
#define REQUEST_BEARER_PREFIX "Bearer "
#define REQUEST_CPU_PERCENT_MAX 100.0 /* the guest sums every CPU into one percentage */

static const struct api_error_info daemon_errors[] = {
	[DAEMON_ERR_INVALID_SPEC] = { "INVALID_SPEC", 400, false },
	[DAEMON_ERR_INVALID_POLICY] = { "INVALID_POLICY", 400, false },
	[DAEMON_ERR_INVALID_PARAMS] = { "INVALID_PARAMS", 400, false },
	[DAEMON_ERR_NOT_FOUND] = { "NOT_FOUND", 404, false },
	[DAEMON_ERR_METHOD_NOT_ALLOWED] = { "METHOD_NOT_ALLOWED", 405, false },
	[DAEMON_ERR_ALREADY_TERMINAL] = { "ALREADY_TERMINAL", 409, false },
	[DAEMON_ERR_STRUCTURED_OUTPUT_MISSING] = { "STRUCTURED_OUTPUT_MISSING", 404, false },
	[DAEMON_ERR_ARTIFACT_NOT_FOUND] = { "ARTIFACT_NOT_FOUND", 404, false },
	[DAEMON_ERR_PAYLOAD_TOO_LARGE] = { "PAYLOAD_TOO_LARGE", 413, false },
	[DAEMON_ERR_UNAUTHORIZED] = { "UNAUTHORIZED", 401, false },
	[DAEMON_ERR_INTERNAL_ERROR] = { "INTERNAL_ERROR", 500, true },
};

static const char *const daemon_run_state_names[] = {
	[DAEMON_RUN_PENDING] = "pending",
	[DAEMON_RUN_RUNNING] = "running",
	[DAEMON_RUN_SUCCEEDED] = "succeeded",
	[DAEMON_RUN_FAILED] = "failed",
	[DAEMON_RUN_CANCELLED] = "cancelled",
};

#define DAEMON_RUN_STATE_COUNT (sizeof(daemon_run_state_names) / sizeof(daemon_run_state_names[0]))

const char *daemon_error_name(enum daemon_error_code code)
{
	return daemon_errors[code].name;
}

unsigned daemon_error_http_status(enum daemon_error_code code)
{
	return daemon_errors[code].http_status;
}

bool daemon_error_retryable(enum daemon_error_code code)
{
	return daemon_errors[code].retryable;
}

int daemon_error_set(struct daemon_error *err, enum daemon_error_code code, const char *fmt, ...)
{
	va_list ap;

	err->code = code;
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
	return -1;
}

json_t *daemon_error_to_json(const struct daemon_error *err)
{
	return json_pack("{s:s, s:s, s:b}", "code", daemon_error_name(err->code), "message",
			 err->message, "retryable", daemon_error_retryable(err->code));
}

const char *daemon_run_state_name(enum daemon_run_state state)
{
	return daemon_run_state_names[state];
}

int daemon_run_state_parse(const char *text, enum daemon_run_state *out)
{
	if (strcmp(text, "completed") == 0) {
		*out = DAEMON_RUN_SUCCEEDED;
		return 0;
	}
	for (size_t i = 0; i < DAEMON_RUN_STATE_COUNT; i++)
		if (strcmp(text, daemon_run_state_names[i]) == 0) {
			*out = (enum daemon_run_state)i;
			return 0;
		}
	return -EINVAL;
}

bool daemon_run_state_terminal(enum daemon_run_state state)
{
	return state == DAEMON_RUN_SUCCEEDED || state == DAEMON_RUN_FAILED ||
	       state == DAEMON_RUN_CANCELLED;
}

void daemon_policy_default(struct daemon_policy *policy)
{
	policy->max_parallel_microvms_per_run = DAEMON_POLICY_DEFAULT_PARALLEL;
	policy->max_stage_retries = DAEMON_POLICY_DEFAULT_RETRIES;
	policy->stage_timeout_secs = DAEMON_POLICY_DEFAULT_STAGE_TIMEOUT;
	policy->cancel_grace_period_secs = DAEMON_POLICY_DEFAULT_GRACE;
}

json_t *daemon_policy_to_json(const struct daemon_policy *policy)
{
	return json_pack("{s:I, s:I, s:I, s:I}",
			 "max_parallel_microvms_per_run",
			 (json_int_t)policy->max_parallel_microvms_per_run,
			 "max_stage_retries", (json_int_t)policy->max_stage_retries,
			 "stage_timeout_secs", (json_int_t)policy->stage_timeout_secs,
			 "cancel_grace_period_secs", (json_int_t)policy->cancel_grace_period_secs);
}

bool daemon_name_valid(const char *name, size_t max)
{
	return path_name_valid(name, max);
}

bool daemon_request_token_matches(const char *header, const char *token)
{
	size_t prefix_len = strlen(REQUEST_BEARER_PREFIX);
	size_t token_len = strlen(token);
	const char *given;
	size_t given_len;
	unsigned char diff = 0;

	if (!header || strncmp(header, REQUEST_BEARER_PREFIX, prefix_len) != 0 || token_len == 0)
		return false;
	given = header + prefix_len;
	given_len = strlen(given);
	/* every byte of the expected token is compared whatever the given one holds */
	for (size_t i = 0; i < token_len; i++)
		diff |= (unsigned char)(token[i] ^ (i < given_len ? given[i] : 0));
	return diff == 0 && given_len == token_len;
}

/* One optional unsigned policy field within [min, max]. */
static int request_policy_field(json_t *policy, const char *key, uint32_t min, uint32_t max,
				uint32_t *out, struct daemon_error *err)
{
	json_t *value = json_object_get(policy, key);
	json_int_t number;

	if (!value || json_is_null(value))
		return 0;
	if (!json_is_integer(value))
		return daemon_error_set(err, DAEMON_ERR_INVALID_POLICY,
					"policy.%s must be a whole number from %u to %u", key, min,
					max);
	number = json_integer_value(value);
	if (number < (json_int_t)min || number > (json_int_t)max)
		return daemon_error_set(err, DAEMON_ERR_INVALID_POLICY,
					"policy.%s is %lld; use a value from %u to %u", key,
					(long long)number, min, max);
	*out = (uint32_t)number;
	return 0;
}

static int request_parse_policy(json_t *root, struct daemon_policy *policy,
				struct daemon_error *err)
{
	json_t *value = json_object_get(root, "policy");

	daemon_policy_default(policy);
	if (!value || json_is_null(value))
		return 0;
	if (!json_is_object(value))
		return daemon_error_set(err, DAEMON_ERR_INVALID_POLICY,
					"policy must be an object (see docs/daemon.md)");
	if (request_policy_field(value, "max_parallel_microvms_per_run", 1,
				 DAEMON_POLICY_MAX_PARALLEL,
				 &policy->max_parallel_microvms_per_run, err) < 0 ||
	    request_policy_field(value, "max_stage_retries", 0, DAEMON_POLICY_MAX_RETRIES,
				 &policy->max_stage_retries, err) < 0 ||
	    request_policy_field(value, "stage_timeout_secs", 1, DAEMON_POLICY_MAX_STAGE_TIMEOUT,
				 &policy->stage_timeout_secs, err) < 0 ||
	    request_policy_field(value, "cancel_grace_period_secs", 0, DAEMON_POLICY_MAX_GRACE,
				 &policy->cancel_grace_period_secs, err) < 0)
		return -1;
	return 0;
}

/* An optional string field: *out NULL when absent, a copy otherwise. */
static int request_string(json_t *root, const char *key, char **out, struct daemon_error *err)
{
	json_t *value = json_object_get(root, key);

	*out = NULL;
	if (!value || json_is_null(value))
		return 0;
	if (!json_is_string(value))
		return daemon_error_set(err, DAEMON_ERR_INVALID_PARAMS, "%s must be a string", key);
	if (strlen(json_string_value(value)) != json_string_length(value))
		return daemon_error_set(err, DAEMON_ERR_INVALID_PARAMS,
					"%s must not contain NUL characters", key);
	*out = strdup(json_string_value(value));
	if (!*out)
		return daemon_error_set(err, DAEMON_ERR_INTERNAL_ERROR, "out of memory");
	return 0;
}

static json_t *request_load_object(const char *body, size_t len, enum daemon_error_code code,
				   struct daemon_error *err)
{
	json_error_t json_err;
	json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &json_err);

	if (!root) {
		daemon_error_set(err, code, "the body is not valid JSON: %s (line %d)",
				 json_err.text, json_err.line);
		return NULL;
	}
	if (!json_is_object(root)) {
		json_decref(root);
		daemon_error_set(err, code, "the body must be a JSON object");
		return NULL;
	}
	return root;
}

static int request_create_fields(json_t *root, struct daemon_create_request *out,
				 struct daemon_error *err)
{
	char *run_id = NULL;

	if (request_string(root, "spec", &out->spec_text, err) < 0 ||
	    request_string(root, "file", &out->file, err) < 0 ||
	    request_string(root, "input", &out->input, err) < 0 ||
	    request_string(root, "run_id", &run_id, err) < 0)
		return -1;
	if (!out->spec_text == !out->file) {
		free(run_id);
		return daemon_error_set(err, DAEMON_ERR_INVALID_SPEC,
					"give the spec as exactly one of \"spec\" (YAML or JSON text) and \"file\" (a path on the daemon's host)");
	}
	if (out->file && out->file[0] != '/') {
		free(run_id);
		return daemon_error_set(err, DAEMON_ERR_INVALID_SPEC,
					"file must be an absolute path (the daemon has its own working directory)");
	}
	if (run_id) {
		bool valid = daemon_name_valid(run_id, DAEMON_RUN_ID_MAX);

		if (valid)
			snprintf(out->run_id, sizeof(out->run_id), "%s", run_id);
		free(run_id);
		if (!valid)
			return daemon_error_set(err, DAEMON_ERR_INVALID_PARAMS,
						"run_id must be 1 to %d of A-Z a-z 0-9 . _ - (not starting with '.')",
						DAEMON_RUN_ID_MAX);
	}
	return request_parse_policy(root, &out->policy, err);
}

int daemon_request_parse_create(const char *body, size_t len, struct daemon_create_request *out,
				struct daemon_error *err)
{
	json_t *root;
	int rc;

	memset(out, 0, sizeof(*out));
	daemon_policy_default(&out->policy);
	root = request_load_object(body, len, DAEMON_ERR_INVALID_SPEC, err);
	if (!root)
		return -1;
	rc = request_create_fields(root, out, err);
	json_decref(root);
	if (rc < 0)
		daemon_create_request_free(out);
	return rc;
}

void daemon_create_request_free(struct daemon_create_request *req)
{
	free(req->spec_text);
	free(req->file);
	free(req->input);
	req->spec_text = req->file = req->input = NULL;
}

int daemon_request_parse_cancel(const char *body, size_t len, char **reason,
				struct daemon_error *err)
{
	json_t *root;
	int rc;

	*reason = NULL;
	if (len == 0)
		return 0;
	root = request_load_object(body, len, DAEMON_ERR_INVALID_PARAMS, err);
	if (!root)
		return -1;
	rc = request_string(root, "reason", reason, err);
	json_decref(root);
	return rc;
}

/* A query value that is a whole number (absent or empty: 0); name is the parameter's. */
static int request_parse_whole(const char *text, const char *name, uint64_t *out,
			       struct daemon_error *err)
{
	unsigned long long value;
	char *end;

	*out = 0;
	if (!text || !text[0])
		return 0;
	if (text[0] < '0' || text[0] > '9')
		return daemon_error_set(err, DAEMON_ERR_INVALID_PARAMS,
					"%s must be a whole number", name);
	errno = 0;
	value = strtoull(text, &end, REQUEST_DECIMAL);
	if (errno || *end)
		return daemon_error_set(err, DAEMON_ERR_INVALID_PARAMS,
					"%s must be a whole number", name);
	*out = value;
	return 0;
}

int daemon_request_parse_event_id(const char *text, uint64_t *out, struct daemon_error *err)
{
	return request_parse_whole(text, "from_event_id", out, err);
}

int daemon_request_parse_telemetry_query(const char *from_seq, const char *stage_name,
					 uint64_t *out, struct daemon_error *err)
{
	if (request_parse_whole(from_seq, "from_seq", out, err) < 0)
		return -1;
	if (stage_name && !daemon_name_valid(stage_name, DAEMON_NAME_MAX))
		return daemon_error_set(err, DAEMON_ERR_INVALID_PARAMS,
					"stage_name must be 1-%d characters of A-Z a-z 0-9 . _ -",
					DAEMON_NAME_MAX);
	return 0;
}

json_t *daemon_request_guest_sample(const json_t *guest)
{
	static const char *const counters[] = { "memory_used_bytes", "memory_total_bytes",
						"net_rx_bytes",	     "net_tx_bytes",
						"procs_running",     "open_fds" };
	json_t *cpu = json_object_get(guest, "cpu_percent");
	json_t *sample;

	if (!json_is_object(guest) || !json_is_number(cpu) || json_number_value(cpu) < 0.0 ||
	    json_number_value(cpu) > REQUEST_CPU_PERCENT_MAX)
		return NULL;
	sample = json_pack("{s:f}", "cpu_percent", json_number_value(cpu));
	for (size_t i = 0; sample && i < sizeof(counters) / sizeof(counters[0]); i++) {
		json_t *value = json_object_get(guest, counters[i]);

		if (!json_is_integer(value) || json_integer_value(value) < 0) {
			json_decref(sample);
			return NULL;
		}
		json_object_set_new(sample, counters[i], json_integer(json_integer_value(value)));
	}
	return sample;
}

int daemon_request_parse_state_filter(const char *text, enum daemon_state_filter *filter,
				      enum daemon_run_state *state, struct daemon_error *err)
{
	*filter = DAEMON_FILTER_ALL;
	if (!text || !text[0])
		return 0;
	if (strcmp(text, "active") == 0) {
		*filter = DAEMON_FILTER_ACTIVE;
		return 0;
	}
	if (strcmp(text, "terminal") == 0) {
		*filter = DAEMON_FILTER_TERMINAL;
		return 0;
	}
	if (daemon_run_state_parse(text, state) == 0) {
		*filter = DAEMON_FILTER_ONE_STATE;
		return 0;
	}
	return daemon_error_set(err, DAEMON_ERR_INVALID_PARAMS,
				"state takes active, terminal, pending, running, succeeded, failed or cancelled");
}

/* Splits path after "/v1/" on '/'; false when a segment is empty or too long. */
static bool request_split(const char *path, char segments[][REQUEST_SEGMENT_MAX], size_t *count)
{
	static const char prefix[] = "/v1/";
	const char *p;

	*count = 0;
	if (strncmp(path, prefix, sizeof(prefix) - 1) != 0)
		return false;
	p = path + sizeof(prefix) - 1;
	for (;;) {
		size_t len = strcspn(p, "/");

		if (len == 0 || len >= REQUEST_SEGMENT_MAX || *count == REQUEST_MAX_SEGMENTS)
			return false;
		memcpy(segments[*count], p, len);
		segments[*count][len] = '\0';
		(*count)++;
		if (p[len] == '\0')
			return true;
		p += len + 1;
	}
}

/* Copies a name that daemon_name_valid() already bounded by the destination's size. */
static void request_copy_name(char *dst, size_t size, const char *src)
{
	size_t len = strnlen(src, size - 1);

	memcpy(dst, src, len);
	dst[len] = '\0';
}

/* Matches segments 2.. of /v1/runs/{id}/...; the id is already checked. */
static enum daemon_route request_run_route(char segments[][REQUEST_SEGMENT_MAX], size_t count,
					   struct daemon_route_match *out)
{
	if (count == 2)
		return DAEMON_ROUTE_RUN;
	if (count == 3 && strcmp(segments[2], "events") == 0)
		return DAEMON_ROUTE_RUN_EVENTS;
	if (count == 4 && strcmp(segments[2], "events") == 0 && strcmp(segments[3], "stream") == 0)
		return DAEMON_ROUTE_RUN_EVENTS_STREAM;
	if (count == 3 && strcmp(segments[2], "stages") == 0)
		return DAEMON_ROUTE_RUN_STAGES;
	if (count == 3 && strcmp(segments[2], "cancel") == 0)
		return DAEMON_ROUTE_RUN_CANCEL;
	if (count == 3 && strcmp(segments[2], "stop") == 0)
		return DAEMON_ROUTE_RUN_STOP;
	if (count == 3 && strcmp(segments[2], "telemetry") == 0)
		return DAEMON_ROUTE_RUN_TELEMETRY;
	if (count < 5 || strcmp(segments[2], "stages") != 0 ||
	    !daemon_name_valid(segments[3], DAEMON_NAME_MAX))
		return DAEMON_ROUTE_NONE;
	request_copy_name(out->stage, sizeof(out->stage), segments[3]);
	if (count == 5 && strcmp(segments[4], "output-file") == 0)
		return DAEMON_ROUTE_RUN_OUTPUT_FILE;
	if (count == 6 && strcmp(segments[4], "artifacts") == 0 &&
	    daemon_name_valid(segments[5], DAEMON_NAME_MAX)) {
		request_copy_name(out->artifact, sizeof(out->artifact), segments[5]);
		return DAEMON_ROUTE_RUN_ARTIFACT;
	}
	return DAEMON_ROUTE_NONE;
}

enum daemon_route daemon_route_parse(const char *path, struct daemon_route_match *out)
{
	char segments[REQUEST_MAX_SEGMENTS][REQUEST_SEGMENT_MAX];
	size_t count;

	memset(out, 0, sizeof(*out));
	out->route = DAEMON_ROUTE_NONE;
	if (!request_split(path, segments, &count))
		return out->route;
	if (count == 1 && strcmp(segments[0], "health") == 0)
		out->route = DAEMON_ROUTE_HEALTH;
	else if (count == 1 && strcmp(segments[0], "runs") == 0)
		out->route = DAEMON_ROUTE_RUNS;
	else if (count >= 2 && strcmp(segments[0], "runs") == 0 &&
		 daemon_name_valid(segments[1], DAEMON_RUN_ID_MAX)) {
		request_copy_name(out->run_id, sizeof(out->run_id), segments[1]);
		out->route = request_run_route(segments, count, out);
	}
	return out->route;
}
