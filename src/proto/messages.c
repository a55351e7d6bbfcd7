/*
 * JSON codecs for every control message body, on jansson.
 *
 * Each message is one pair of static functions, *_to_json and *_from_json, wrapped by
 * generated public encode/decode/free functions so the parse, cleanup and error-reporting
 * ladder exists exactly once. Field access goes through typed helpers that check the JSON
 * type and numeric range and know the field's default, so hostile JSON (wrong types, missing
 * fields, out-of-range integers, huge arrays) ends in -EPROTO with a reason and never in a
 * crash or an unchecked allocation. Bulk bytes are written as base64 strings; readers also
 * take upstream's arrays of integers 0..255. Before jansson sees a body, its values are
 * counted and a body over PROTO_JSON_VALUES_MAX is refused, so what a peer's JSON costs once
 * parsed stays within a small multiple of the limit rather than of the frame size.
 *
 * Reasons are formatted into a thread-local buffer: *why stays valid until the next decode
 * on the same thread.
 */
#include "proto/protocol.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CODEC_WHY_MAX 160
#define TELEMETRY_DEFAULT_INTERVAL_MS 1000u
#define STREAM_NAME_STDOUT "stdout"
#define STREAM_NAME_STDERR "stderr"
#define ENV_PAIR_SIZE 2
#define BYTE_MAX_VALUE 255
#define PROCESS_STATE_UNKNOWN '?'
#define UTF8_CONTINUATION_MASK 0xc0u
#define UTF8_CONTINUATION_BITS 0x80u

enum field_presence { FIELD_OPTIONAL, FIELD_REQUIRED };

static __thread char codec_why_buffer[CODEC_WHY_MAX];

static int codec_fail(const char **why, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int codec_fail(const char **why, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(codec_why_buffer, sizeof(codec_why_buffer), fmt, ap);
	va_end(ap);
	if (why)
		*why = codec_why_buffer;
	return -EPROTO;
}

/* Prefixes the current reason with the message name once a decoder has failed. */
static void codec_name_reason(const char *msg_name, const char **why)
{
	size_t prefix = strlen(msg_name) + 2, len;

	if (!why || *why != codec_why_buffer || prefix >= CODEC_WHY_MAX)
		return;
	len = strnlen(codec_why_buffer, CODEC_WHY_MAX - prefix - 1);
	memmove(codec_why_buffer + prefix, codec_why_buffer, len);
	codec_why_buffer[prefix + len] = '\0';
	memcpy(codec_why_buffer, msg_name, prefix - 2);
	memcpy(codec_why_buffer + prefix - 2, ": ", 2);
}

/* ---- reading fields ----------------------------------------------------------------------- */

/* A field that is absent or JSON null counts as not present (serde's Option). */
static json_t *field_get(json_t *obj, const char *key)
{
	json_t *value = json_object_get(obj, key);

	return json_is_null(value) ? NULL : value;
}

static int field_missing(const char *key, enum field_presence presence, const char **why)
{
	if (presence == FIELD_REQUIRED)
		return codec_fail(why, "missing required field '%s'", key);
	return 0;
}

static int field_string(json_t *obj, const char *key, enum field_presence presence,
			char **out, const char **why)
{
	json_t *value = field_get(obj, key);

	*out = NULL;
	if (!value)
		return field_missing(key, presence, why);
	if (!json_is_string(value))
		return codec_fail(why, "field '%s' must be a string", key);
	*out = strdup(json_string_value(value));
	return *out ? 0 : -ENOMEM;
}

static int field_uint(json_t *obj, const char *key, enum field_presence presence,
		      uint64_t max, uint64_t *out, bool *present, const char **why)
{
	json_t *value = field_get(obj, key);
	json_int_t number;

	if (present)
		*present = false;
	if (!value)
		return field_missing(key, presence, why);
	if (!json_is_integer(value))
		return codec_fail(why, "field '%s' must be an integer", key);
	number = json_integer_value(value);
	if (number < 0 || (uint64_t)number > max)
		return codec_fail(why, "field '%s' is out of range (0..%llu)", key,
				  (unsigned long long)max);
	*out = (uint64_t)number;
	if (present)
		*present = true;
	return 0;
}

static int field_u16(json_t *obj, const char *key, uint16_t *out, const char **why)
{
	uint64_t number;
	int rc = field_uint(obj, key, FIELD_REQUIRED, UINT16_MAX, &number, NULL, why);

	if (rc == 0)
		*out = (uint16_t)number;
	return rc;
}

static int field_u32(json_t *obj, const char *key, uint32_t *out, const char **why)
{
	uint64_t number;
	int rc = field_uint(obj, key, FIELD_REQUIRED, UINT32_MAX, &number, NULL, why);

	if (rc == 0)
		*out = (uint32_t)number;
	return rc;
}

static int field_u64(json_t *obj, const char *key, uint64_t *out, const char **why)
{
	return field_uint(obj, key, FIELD_REQUIRED, INT64_MAX, out, NULL, why);
}

static int field_i32(json_t *obj, const char *key, int32_t *out, const char **why)
{
	json_t *value = field_get(obj, key);
	json_int_t number;

	if (!value)
		return field_missing(key, FIELD_REQUIRED, why);
	if (!json_is_integer(value))
		return codec_fail(why, "field '%s' must be an integer", key);
	number = json_integer_value(value);
	if (number < INT32_MIN || number > INT32_MAX)
		return codec_fail(why, "field '%s' does not fit a 32-bit signed integer", key);
	*out = (int32_t)number;
	return 0;
}

static int field_double(json_t *obj, const char *key, double *out, const char **why)
{
	json_t *value = field_get(obj, key);

	if (!value)
		return field_missing(key, FIELD_REQUIRED, why);
	if (!json_is_number(value))
		return codec_fail(why, "field '%s' must be a number", key);
	*out = json_number_value(value);
	return 0;
}

/* Optional booleans keep the caller's default in *out when absent. */
static int field_bool(json_t *obj, const char *key, enum field_presence presence, bool *out,
		      const char **why)
{
	json_t *value = field_get(obj, key);

	if (!value)
		return field_missing(key, presence, why);
	if (!json_is_boolean(value))
		return codec_fail(why, "field '%s' must be true or false", key);
	*out = json_is_true(value);
	return 0;
}

static const char *const error_code_names[] = {
	[PROTO_ERROR_DENIED] = "denied",
	[PROTO_ERROR_NOT_FOUND] = "not_found",
	[PROTO_ERROR_INVALID] = "invalid",
	[PROTO_ERROR_TIMED_OUT] = "timed_out",
	[PROTO_ERROR_KILLED] = "killed",
	[PROTO_ERROR_BUSY] = "busy",
	[PROTO_ERROR_FAILED] = "failed",
	[PROTO_ERROR_UNKNOWN] = "unknown",
};

const char *proto_error_code_name(enum proto_error_code code)
{
	if (code <= PROTO_ERROR_NONE || code > PROTO_ERROR_UNKNOWN)
		return NULL;
	return error_code_names[code];
}

enum proto_error_code proto_error_code_from_errno(int err)
{
	switch (err < 0 ? -err : err) {
	case 0:
		return PROTO_ERROR_NONE;
	case EPERM:
	case EACCES:
	case EXDEV:
	case ELOOP:
		return PROTO_ERROR_DENIED;
	case ENOENT:
	case ENOTDIR:
		return PROTO_ERROR_NOT_FOUND;
	case EINVAL:
	case EISDIR:
	case ENAMETOOLONG:
	case EFBIG:
		return PROTO_ERROR_INVALID;
	case ETIMEDOUT:
		return PROTO_ERROR_TIMED_OUT;
	case EBUSY:
	case EAGAIN:
		return PROTO_ERROR_BUSY;
	default:
		return PROTO_ERROR_FAILED;
	}
}

/*
 * The "error" sentence and its "code". An absent or null code is PROTO_ERROR_NONE and a code
 * this side does not know is PROTO_ERROR_UNKNOWN, so a reply from an agent with fewer or more
 * codes still decodes; only a code that is not a string is malformed.
 */
static int field_error(json_t *obj, char **error, enum proto_error_code *code, const char **why)
{
	json_t *value = field_get(obj, "code");
	int rc = field_string(obj, "error", FIELD_OPTIONAL, error, why);

	*code = PROTO_ERROR_NONE;
	if (rc < 0 || !value)
		return rc;
	if (!json_is_string(value))
		return codec_fail(why, "field 'code' must be a string");
	*code = PROTO_ERROR_UNKNOWN;
	for (size_t i = PROTO_ERROR_NONE + 1; i < PROTO_ERROR_UNKNOWN; i++)
		if (strcmp(json_string_value(value), error_code_names[i]) == 0)
			*code = (enum proto_error_code)i;
	return 0;
}

static int bytes_from_int_array(json_t *array, const char *key, struct proto_bytes *out,
				const char **why)
{
	size_t count = json_array_size(array);
	size_t i;
	json_t *item;

	if (count > PROTO_MAX_PAYLOAD)
		return codec_fail(why, "field '%s' exceeds the 64 MiB limit", key);
	if (count == 0)
		return 0;
	out->data = malloc(count);
	if (!out->data)
		return -ENOMEM;
	json_array_foreach(array, i, item) {
		json_int_t number = json_is_integer(item) ? json_integer_value(item) : -1;

		if (number < 0 || number > BYTE_MAX_VALUE) {
			free(out->data);
			out->data = NULL;
			return codec_fail(why, "field '%s' item %zu is not an integer 0..255",
					  key, i);
		}
		out->data[i] = (uint8_t)number;
	}
	out->len = count;
	return 0;
}

static int field_bytes(json_t *obj, const char *key, enum field_presence presence,
		       struct proto_bytes *out, const char **why)
{
	json_t *value = field_get(obj, key);
	int rc;

	out->data = NULL;
	out->len = 0;
	if (!value)
		return field_missing(key, presence, why);
	if (json_is_array(value))
		return bytes_from_int_array(value, key, out, why);
	if (!json_is_string(value))
		return codec_fail(why, "field '%s' must be a base64 string or a byte array", key);
	rc = proto_base64_decode(json_string_value(value), json_string_length(value), out);
	if (rc == -EINVAL)
		return codec_fail(why, "field '%s' is not valid base64", key);
	if (rc == -EMSGSIZE)
		return codec_fail(why, "field '%s' exceeds the 64 MiB limit", key);
	return rc;
}

static void string_array_free(char **items, size_t count)
{
	for (size_t i = 0; i < count; i++)
		free(items[i]);
	free(items);
}

/* Absent means empty, as upstream's serde(default). */
static int field_string_array(json_t *obj, const char *key, char ***out, size_t *count,
			      const char **why)
{
	json_t *value = field_get(obj, key);
	json_t *item;
	size_t i, size;

	*out = NULL;
	*count = 0;
	if (!value)
		return 0;
	if (!json_is_array(value))
		return codec_fail(why, "field '%s' must be an array of strings", key);
	size = json_array_size(value);
	if (size == 0)
		return 0;
	*out = calloc(size, sizeof(**out));
	if (!*out)
		return -ENOMEM;
	json_array_foreach(value, i, item) {
		if (!json_is_string(item))
			return codec_fail(why, "field '%s' item %zu must be a string", key, i);
		(*out)[i] = strdup(json_string_value(item));
		if (!(*out)[i])
			return -ENOMEM;
		(*count)++;
	}
	return 0;
}

static void env_free(struct proto_env_var *env, size_t count)
{
	for (size_t i = 0; i < count; i++) {
		free(env[i].key);
		free(env[i].value);
	}
	free(env);
}

static int env_pair_from_json(json_t *pair, size_t index, struct proto_env_var *var,
			      const char **why)
{
	json_t *key = json_array_get(pair, 0);
	json_t *value = json_array_get(pair, 1);

	if (!json_is_array(pair) || json_array_size(pair) != ENV_PAIR_SIZE ||
	    !json_is_string(key) || !json_is_string(value))
		return codec_fail(why, "field 'env' item %zu must be a [key, value] string pair",
				  index);
	var->key = strdup(json_string_value(key));
	var->value = strdup(json_string_value(value));
	if (!var->key || !var->value)
		return -ENOMEM;
	return 0;
}

static int field_env(json_t *obj, struct proto_env_var **out, size_t *count, const char **why)
{
	json_t *value = field_get(obj, "env");
	json_t *pair;
	size_t i, size;
	int rc;

	*out = NULL;
	*count = 0;
	if (!value)
		return 0;
	if (!json_is_array(value))
		return codec_fail(why, "field 'env' must be an array of [key, value] pairs");
	size = json_array_size(value);
	if (size == 0)
		return 0;
	*out = calloc(size, sizeof(**out));
	if (!*out)
		return -ENOMEM;
	json_array_foreach(value, i, pair) {
		/* count first, so free() releases a half-filled pair */
		(*count)++;
		rc = env_pair_from_json(pair, i, &(*out)[i], why);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* ---- writing fields ----------------------------------------------------------------------- */

/*
 * Builders record the first failure in *err and keep going, so each *_to_json reads as a flat
 * list of fields; json_object_set_new releases the value even when it fails.
 */
static void put(json_t *obj, const char *key, json_t *value, int *err)
{
	if (!value) {
		if (!*err)
			*err = -EINVAL;
		return;
	}
	if (json_object_set_new(obj, key, value) < 0 && !*err)
		*err = -ENOMEM;
}

static json_t *json_from_string(const char *text)
{
	return text ? json_string(text) : NULL;
}

static json_t *json_from_optional_string(const char *text)
{
	return text ? json_string(text) : json_null();
}

static json_t *json_from_uint(uint64_t value)
{
	if (value > INT64_MAX)
		return NULL;
	return json_integer((json_int_t)value);
}

static json_t *json_from_bytes(const struct proto_bytes *bytes)
{
	char *text;
	json_t *value;

	if (bytes->len > PROTO_MAX_PAYLOAD || (bytes->len && !bytes->data))
		return NULL;
	text = proto_base64_encode(bytes->data, bytes->len);
	if (!text)
		return NULL;
	value = json_stringn_nocheck(text, strlen(text));
	free(text);
	return value;
}

static json_t *json_from_string_array(char *const *items, size_t count)
{
	json_t *array = json_array();

	if (!array)
		return NULL;
	for (size_t i = 0; i < count; i++) {
		if (json_array_append_new(array, json_from_string(items[i])) < 0) {
			json_decref(array);
			return NULL;
		}
	}
	return array;
}

static json_t *json_from_env(const struct proto_env_var *env, size_t count)
{
	json_t *array = json_array();

	if (!array)
		return NULL;
	for (size_t i = 0; i < count; i++) {
		json_t *pair = json_pack("[ss]", env[i].key ? env[i].key : "",
					 env[i].value ? env[i].value : "");

		if (!env[i].key || !env[i].value || json_array_append_new(array, pair) < 0) {
			json_decref(pair);
			json_decref(array);
			return NULL;
		}
	}
	return array;
}

/* "error" as a string or null, and "code" beside it when there is one. */
static void put_error(json_t *root, const char *error, enum proto_error_code code, int *err)
{
	const char *name = proto_error_code_name(code);

	put(root, "error", json_from_optional_string(error), err);
	if (name)
		put(root, "code", json_string(name), err);
}

/* ---- shared encode/decode ladders ----------------------------------------------------------- */

enum body_empty_policy { BODY_EMPTY_INVALID, BODY_EMPTY_IS_DEFAULTS };

/*
 * How many members jansson would build from body: one for the root and one per member of an
 * array or object, each of which follows a '[', '{' or ',' outside strings. jansson spends tens of bytes on each value, so a
 * body of small integers (the upstream byte-array form) costs twenty times its size once
 * parsed; counting first lets codec_parse refuse such a body before anything is built.
 */
static size_t codec_value_count(const uint8_t *body, size_t len)
{
	size_t count = 1;
	bool in_string = false, escaped = false;

	for (size_t i = 0; i < len; i++) {
		uint8_t c = body[i];

		if (in_string) {
			if (escaped)
				escaped = false;
			else if (c == '\\')
				escaped = true;
			else if (c == '"')
				in_string = false;
			continue;
		}
		if (c == '"')
			in_string = true;
		else if (c == '[' || c == '{' || c == ',')
			count++;
	}
	return count;
}

static int codec_parse(const uint8_t *body, size_t len, enum body_empty_policy empty,
		       json_t **root, const char **why)
{
	json_error_t error;

	if (len == 0 && empty == BODY_EMPTY_IS_DEFAULTS) {
		*root = json_object();
		return *root ? 0 : -ENOMEM;
	}
	if (!body || len == 0)
		return codec_fail(why, "empty body where a JSON object is required");
	if (codec_value_count(body, len) > PROTO_JSON_VALUES_MAX)
		return codec_fail(why, "the body holds more than %u JSON values, the limit; bulk "
				  "bytes must be base64 strings", PROTO_JSON_VALUES_MAX);
	*root = json_loadb((const char *)body, len, JSON_REJECT_DUPLICATES, &error);
	if (!*root)
		return codec_fail(why, "invalid JSON at byte %d: %s", error.position, error.text);
	if (!json_is_object(*root)) {
		json_decref(*root);
		*root = NULL;
		return codec_fail(why, "body is not a JSON object");
	}
	return 0;
}

static int codec_dump(json_t *root, int err, uint8_t **out, size_t *out_len)
{
	char *text;

	*out = NULL;
	*out_len = 0;
	if (!root)
		return -ENOMEM;
	if (err) {
		json_decref(root);
		return err;
	}
	text = json_dumps(root, JSON_COMPACT);
	json_decref(root);
	if (!text)
		return -ENOMEM;
	*out = (uint8_t *)text;
	*out_len = strlen(text);
	return 0;
}

#define PROTO_DEFINE_CODEC(name, wire_name, empty_policy)                                       \
	int proto_##name##_encode(const struct proto_##name *msg, uint8_t **out,                 \
				  size_t *out_len)                                               \
	{                                                                                        \
		int err = 0;                                                                     \
		json_t *root = json_object();                                                    \
		if (root)                                                                        \
			name##_to_json(msg, root, &err);                                          \
		return codec_dump(root, err, out, out_len);                                      \
	}                                                                                        \
	int proto_##name##_decode(const uint8_t *body, size_t len, struct proto_##name *out,     \
				  const char **why)                                              \
	{                                                                                        \
		json_t *root = NULL;                                                             \
		int rc;                                                                          \
		memset(out, 0, sizeof(*out));                                                    \
		rc = codec_parse(body, len, empty_policy, &root, why);                           \
		if (rc == 0) {                                                                   \
			rc = name##_from_json(root, out, why);                                   \
			json_decref(root);                                                       \
		}                                                                                \
		if (rc < 0) {                                                                    \
			codec_name_reason(wire_name, why);                                       \
			proto_##name##_free(out);                                                \
		}                                                                                \
		return rc;                                                                       \
	}

static void bytes_free(struct proto_bytes *bytes)
{
	free(bytes->data);
	bytes->data = NULL;
	bytes->len = 0;
}

/* ---- ExecRequest -------------------------------------------------------------------------- */

static void exec_request_to_json(const struct proto_exec_request *msg, json_t *root, int *err)
{
	put(root, "program", json_from_string(msg->program), err);
	put(root, "args", json_from_string_array(msg->args, msg->args_count), err);
	put(root, "stdin", json_from_bytes(&msg->stdin_data), err);
	put(root, "env", json_from_env(msg->env, msg->env_count), err);
	put(root, "working_dir", json_from_optional_string(msg->working_dir), err);
	put(root, "timeout_secs", msg->has_timeout ? json_from_uint(msg->timeout_secs) : json_null(),
	    err);
}

static int exec_request_from_json(json_t *root, struct proto_exec_request *out, const char **why)
{
	int rc;

	if ((rc = field_string(root, "program", FIELD_REQUIRED, &out->program, why)) ||
	    (rc = field_string_array(root, "args", &out->args, &out->args_count, why)) ||
	    (rc = field_bytes(root, "stdin", FIELD_OPTIONAL, &out->stdin_data, why)) ||
	    (rc = field_env(root, &out->env, &out->env_count, why)) ||
	    (rc = field_string(root, "working_dir", FIELD_OPTIONAL, &out->working_dir, why)))
		return rc;
	return field_uint(root, "timeout_secs", FIELD_OPTIONAL, INT64_MAX, &out->timeout_secs,
			  &out->has_timeout, why);
}

void proto_exec_request_free(struct proto_exec_request *msg)
{
	if (!msg)
		return;
	free(msg->program);
	string_array_free(msg->args, msg->args_count);
	bytes_free(&msg->stdin_data);
	env_free(msg->env, msg->env_count);
	free(msg->working_dir);
	memset(msg, 0, sizeof(*msg));
}

PROTO_DEFINE_CODEC(exec_request, "ExecRequest", BODY_EMPTY_INVALID)

/* ---- ExecResponse ------------------------------------------------------------------------- */

static void exec_response_to_json(const struct proto_exec_response *msg, json_t *root, int *err)
{
	put(root, "stdout", json_from_bytes(&msg->stdout_data), err);
	put(root, "stderr", json_from_bytes(&msg->stderr_data), err);
	put(root, "exit_code", json_integer(msg->exit_code), err);
	put_error(root, msg->error, msg->code, err);
	put(root, "duration_ms", msg->has_duration ? json_from_uint(msg->duration_ms) : json_null(),
	    err);
}

static int exec_response_from_json(json_t *root, struct proto_exec_response *out,
				   const char **why)
{
	int rc;

	if ((rc = field_bytes(root, "stdout", FIELD_REQUIRED, &out->stdout_data, why)) ||
	    (rc = field_bytes(root, "stderr", FIELD_REQUIRED, &out->stderr_data, why)) ||
	    (rc = field_i32(root, "exit_code", &out->exit_code, why)) ||
	    (rc = field_error(root, &out->error, &out->code, why)))
		return rc;
	return field_uint(root, "duration_ms", FIELD_OPTIONAL, INT64_MAX, &out->duration_ms,
			  &out->has_duration, why);
}

void proto_exec_response_free(struct proto_exec_response *msg)
{
	if (!msg)
		return;
	bytes_free(&msg->stdout_data);
	bytes_free(&msg->stderr_data);
	free(msg->error);
	memset(msg, 0, sizeof(*msg));
}

PROTO_DEFINE_CODEC(exec_response, "ExecResponse", BODY_EMPTY_INVALID)

/* ---- ExecOutputChunk ---------------------------------------------------------------------- */

static void exec_output_chunk_to_json(const struct proto_exec_output_chunk *msg, json_t *root,
				      int *err)
{
	const char *stream = msg->stream == PROTO_STREAM_STDERR ? STREAM_NAME_STDERR
								 : STREAM_NAME_STDOUT;

	put(root, "stream", json_string(stream), err);
	put(root, "data", json_from_bytes(&msg->data), err);
	put(root, "seq", json_from_uint(msg->seq), err);
}

static int exec_output_chunk_from_json(json_t *root, struct proto_exec_output_chunk *out,
				       const char **why)
{
	char *stream = NULL;
	int rc;

	rc = field_string(root, "stream", FIELD_REQUIRED, &stream, why);
	if (rc < 0)
		return rc;
	if (strcmp(stream, STREAM_NAME_STDOUT) == 0) {
		out->stream = PROTO_STREAM_STDOUT;
	} else if (strcmp(stream, STREAM_NAME_STDERR) == 0) {
		out->stream = PROTO_STREAM_STDERR;
	} else {
		free(stream);
		return codec_fail(why, "field 'stream' must be \"stdout\" or \"stderr\"");
	}
	free(stream);
	if ((rc = field_bytes(root, "data", FIELD_REQUIRED, &out->data, why)))
		return rc;
	return field_u64(root, "seq", &out->seq, why);
}

void proto_exec_output_chunk_free(struct proto_exec_output_chunk *msg)
{
	if (!msg)
		return;
	bytes_free(&msg->data);
	memset(msg, 0, sizeof(*msg));
}

PROTO_DEFINE_CODEC(exec_output_chunk, "ExecOutputChunk", BODY_EMPTY_INVALID)

/* ---- WriteFile ---------------------------------------------------------------------------- */

static void write_file_to_json(const struct proto_write_file *msg, json_t *root, int *err)
{
	put(root, "path", json_from_string(msg->path), err);
	put(root, "content", json_from_bytes(&msg->content), err);
	put(root, "create_parents", json_boolean(msg->create_parents), err);
}

static int write_file_from_json(json_t *root, struct proto_write_file *out, const char **why)
{
	int rc;

	out->create_parents = true;
	if ((rc = field_string(root, "path", FIELD_REQUIRED, &out->path, why)) ||
	    (rc = field_bytes(root, "content", FIELD_REQUIRED, &out->content, why)))
		return rc;
	return field_bool(root, "create_parents", FIELD_OPTIONAL, &out->create_parents, why);
}

void proto_write_file_free(struct proto_write_file *msg)
{
	if (!msg)
		return;
	free(msg->path);
	bytes_free(&msg->content);
	memset(msg, 0, sizeof(*msg));
}

PROTO_DEFINE_CODEC(write_file, "WriteFile", BODY_EMPTY_INVALID)

/* ---- WriteFileResponse / MkdirPResponse / PtyOpened --------------------------------------- */

static void status_response_to_json(const struct proto_status_response *msg, json_t *root,
				    int *err)
{
	put(root, "success", json_boolean(msg->success), err);
	put_error(root, msg->error, msg->code, err);
}

static int status_response_from_json(json_t *root, struct proto_status_response *out,
				     const char **why)
{
	int rc = field_bool(root, "success", FIELD_REQUIRED, &out->success, why);

	if (rc < 0)
		return rc;
	return field_error(root, &out->error, &out->code, why);
}

void proto_status_response_free(struct proto_status_response *msg)
{
	if (!msg)
		return;
	free(msg->error);
	memset(msg, 0, sizeof(*msg));
}

PROTO_DEFINE_CODEC(status_response, "StatusResponse", BODY_EMPTY_INVALID)

/* ---- MkdirP / ReadFile / FileStat --------------------------------------------------------- */

static void path_request_to_json(const struct proto_path_request *msg, json_t *root, int *err)
{
	put(root, "path", json_from_string(msg->path), err);
}

static int path_request_from_json(json_t *root, struct proto_path_request *out,
				  const char **why)
{
	return field_string(root, "path", FIELD_REQUIRED, &out->path, why);
}

void proto_path_request_free(struct proto_path_request *msg)
{
	if (!msg)
		return;
	free(msg->path);
	memset(msg, 0, sizeof(*msg));
}

PROTO_DEFINE_CODEC(path_request, "PathRequest", BODY_EMPTY_INVALID)

/* ---- ReadFileResponse --------------------------------------------------------------------- */

static void read_file_response_to_json(const struct proto_read_file_response *msg, json_t *root,
				       int *err)
{
	put(root, "success", json_boolean(msg->success), err);
	put(root, "content", json_from_bytes(&msg->content), err);
	put_error(root, msg->error, msg->code, err);
}

/* content is optional on read: a failed read carries only success=false and the error. */
static int read_file_response_from_json(json_t *root, struct proto_read_file_response *out,
					const char **why)
{
	int rc;

	if ((rc = field_bool(root, "success", FIELD_REQUIRED, &out->success, why)) ||
	    (rc = field_bytes(root, "content", FIELD_OPTIONAL, &out->content, why)))
		return rc;
	return field_error(root, &out->error, &out->code, why);
}

void proto_read_file_response_free(struct proto_read_file_response *msg)
{
	if (!msg)
		return;
	bytes_free(&msg->content);
	free(msg->error);
	memset(msg, 0, sizeof(*msg));
}

PROTO_DEFINE_CODEC(read_file_response, "ReadFileResponse", BODY_EMPTY_INVALID)

/* ---- FileStatResponse --------------------------------------------------------------------- */

static void file_stat_response_to_json(const struct proto_file_stat_response *msg, json_t *root,
				       int *err)
{
	put(root, "exists", json_boolean(msg->exists), err);
	put(root, "size", msg->has_size ? json_from_uint(msg->size) : json_null(), err);
	put_error(root, msg->error, msg->code, err);
}

static int file_stat_response_from_json(json_t *root, struct proto_file_stat_response *out,
					const char **why)
{
	int rc;

	if ((rc = field_bool(root, "exists", FIELD_REQUIRED, &out->exists, why)) ||
	    (rc = field_uint(root, "size", FIELD_OPTIONAL, INT64_MAX, &out->size, &out->has_size,
			     why)))
		return rc;
	return field_error(root, &out->error, &out->code, why);
}

void proto_file_stat_response_free(struct proto_file_stat_response *msg)
{
	if (!msg)
		return;
	free(msg->error);
	memset(msg, 0, sizeof(*msg));
}

PROTO_DEFINE_CODEC(file_stat_response, "FileStatResponse", BODY_EMPTY_INVALID)

/* ---- SubscribeTelemetry ------------------------------------------------------------------- */

static void subscribe_telemetry_to_json(const struct proto_subscribe_telemetry *msg,
					json_t *root, int *err)
{
	put(root, "interval_ms", json_from_uint(msg->interval_ms), err);
	put(root, "include_kernel_threads", json_boolean(msg->include_kernel_threads), err);
}

static int subscribe_telemetry_from_json(json_t *root, struct proto_subscribe_telemetry *out,
					 const char **why)
{
	bool present;
	int rc;

	rc = field_uint(root, "interval_ms", FIELD_OPTIONAL, INT64_MAX, &out->interval_ms,
			&present, why);
	if (rc < 0)
		return rc;
	if (!present)
		out->interval_ms = TELEMETRY_DEFAULT_INTERVAL_MS;
	return field_bool(root, "include_kernel_threads", FIELD_OPTIONAL,
			  &out->include_kernel_threads, why);
}

void proto_subscribe_telemetry_free(struct proto_subscribe_telemetry *msg)
{
	if (msg)
		memset(msg, 0, sizeof(*msg));
}

PROTO_DEFINE_CODEC(subscribe_telemetry, "SubscribeTelemetry", BODY_EMPTY_IS_DEFAULTS)

/* ---- TelemetryData ------------------------------------------------------------------------ */

static json_t *system_metrics_to_json(const struct proto_system_metrics *m, int *err)
{
	json_t *obj = json_object();

	if (!obj)
		return NULL;
	/* JSON has no NaN or infinity: a 0/0 sample is reported as 0 rather than lost */
	put(obj, "cpu_percent", json_real(isfinite(m->cpu_percent) ? m->cpu_percent : 0.0), err);
	put(obj, "memory_used_bytes", json_from_uint(m->memory_used_bytes), err);
	put(obj, "memory_total_bytes", json_from_uint(m->memory_total_bytes), err);
	put(obj, "net_rx_bytes", json_from_uint(m->net_rx_bytes), err);
	put(obj, "net_tx_bytes", json_from_uint(m->net_tx_bytes), err);
	put(obj, "procs_running", json_integer(m->procs_running), err);
	put(obj, "open_fds", json_integer(m->open_fds), err);
	return obj;
}

static json_t *process_metrics_to_json(const struct proto_process_metrics *p, int *err)
{
	json_t *obj = json_object();
	char state[2] = { p->state, '\0' };

	if (!obj)
		return NULL;
	put(obj, "pid", json_integer(p->pid), err);
	put(obj, "comm", json_from_string(p->comm), err);
	put(obj, "rss_bytes", json_from_uint(p->rss_bytes), err);
	put(obj, "cpu_jiffies", json_from_uint(p->cpu_jiffies), err);
	put(obj, "state", json_string(state), err);
	return obj;
}

static void telemetry_batch_to_json(const struct proto_telemetry_batch *msg, json_t *root,
				    int *err)
{
	json_t *processes = json_array();

	put(root, "seq", json_from_uint(msg->seq), err);
	put(root, "timestamp_ms", json_from_uint(msg->timestamp_ms), err);
	put(root, "system", msg->has_system ? system_metrics_to_json(&msg->system, err)
					    : json_null(), err);
	for (size_t i = 0; processes && i < msg->processes_count; i++)
		if (json_array_append_new(processes,
					  process_metrics_to_json(&msg->processes[i], err)) < 0 &&
		    !*err)
			*err = -ENOMEM;
	put(root, "processes", processes, err);
	put(root, "trace_context", json_from_optional_string(msg->trace_context), err);
}

static int system_metrics_from_json(json_t *obj, struct proto_system_metrics *out,
				    const char **why)
{
	int rc;

	if (!json_is_object(obj))
		return codec_fail(why, "field 'system' must be an object");
	if ((rc = field_double(obj, "cpu_percent", &out->cpu_percent, why)) ||
	    (rc = field_u64(obj, "memory_used_bytes", &out->memory_used_bytes, why)) ||
	    (rc = field_u64(obj, "memory_total_bytes", &out->memory_total_bytes, why)) ||
	    (rc = field_u64(obj, "net_rx_bytes", &out->net_rx_bytes, why)) ||
	    (rc = field_u64(obj, "net_tx_bytes", &out->net_tx_bytes, why)) ||
	    (rc = field_u32(obj, "procs_running", &out->procs_running, why)))
		return rc;
	return field_u32(obj, "open_fds", &out->open_fds, why);
}

/* A Rust char is one Unicode scalar; a non-ASCII state maps to '?'. */
static int process_state_from_json(json_t *obj, char *out, const char **why)
{
	json_t *value = field_get(obj, "state");
	const unsigned char *text;
	size_t len, chars = 0;

	if (!value)
		return field_missing("state", FIELD_REQUIRED, why);
	if (!json_is_string(value))
		return codec_fail(why, "field 'state' must be a one-character string");
	text = (const unsigned char *)json_string_value(value);
	len = json_string_length(value);
	for (size_t i = 0; i < len; i++)
		if ((text[i] & UTF8_CONTINUATION_MASK) != UTF8_CONTINUATION_BITS)
			chars++;
	if (chars != 1)
		return codec_fail(why, "field 'state' must be a one-character string");
	*out = len == 1 ? (char)text[0] : PROCESS_STATE_UNKNOWN;
	return 0;
}

static int process_metrics_from_json(json_t *obj, struct proto_process_metrics *out,
				     const char **why)
{
	int rc;

	if (!json_is_object(obj))
		return codec_fail(why, "field 'processes' items must be objects");
	if ((rc = field_u32(obj, "pid", &out->pid, why)) ||
	    (rc = field_string(obj, "comm", FIELD_REQUIRED, &out->comm, why)) ||
	    (rc = field_u64(obj, "rss_bytes", &out->rss_bytes, why)) ||
	    (rc = field_u64(obj, "cpu_jiffies", &out->cpu_jiffies, why)))
		return rc;
	return process_state_from_json(obj, &out->state, why);
}

static int processes_from_json(json_t *root, struct proto_telemetry_batch *out,
			       const char **why)
{
	json_t *array = field_get(root, "processes");
	json_t *item;
	size_t i;
	int rc;

	if (!array)
		return 0;
	if (!json_is_array(array))
		return codec_fail(why, "field 'processes' must be an array");
	if (json_array_size(array) == 0)
		return 0;
	out->processes = calloc(json_array_size(array), sizeof(*out->processes));
	if (!out->processes)
		return -ENOMEM;
	json_array_foreach(array, i, item) {
		out->processes_count++;
		rc = process_metrics_from_json(item, &out->processes[i], why);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int telemetry_batch_from_json(json_t *root, struct proto_telemetry_batch *out,
				     const char **why)
{
	json_t *system;
	int rc;

	if ((rc = field_u64(root, "seq", &out->seq, why)) ||
	    (rc = field_u64(root, "timestamp_ms", &out->timestamp_ms, why)))
		return rc;
	system = field_get(root, "system");
	if (system) {
		rc = system_metrics_from_json(system, &out->system, why);
		if (rc < 0)
			return rc;
		out->has_system = true;
	}
	if ((rc = processes_from_json(root, out, why)))
		return rc;
	return field_string(root, "trace_context", FIELD_OPTIONAL, &out->trace_context, why);
}

void proto_telemetry_batch_free(struct proto_telemetry_batch *msg)
{
	if (!msg)
		return;
	for (size_t i = 0; i < msg->processes_count; i++)
		free(msg->processes[i].comm);
	free(msg->processes);
	free(msg->trace_context);
	memset(msg, 0, sizeof(*msg));
}

PROTO_DEFINE_CODEC(telemetry_batch, "TelemetryBatch", BODY_EMPTY_INVALID)

/* ---- PtyOpen / PtyResize / PtyClosed ------------------------------------------------------ */

static void pty_open_to_json(const struct proto_pty_open *msg, json_t *root, int *err)
{
	put(root, "cols", json_integer(msg->cols), err);
	put(root, "rows", json_integer(msg->rows), err);
	put(root, "program", json_from_string(msg->program), err);
	put(root, "args", json_from_string_array(msg->args, msg->args_count), err);
	put(root, "env", json_from_env(msg->env, msg->env_count), err);
	put(root, "working_dir", json_from_optional_string(msg->working_dir), err);
	put(root, "interactive", json_boolean(msg->interactive), err);
}

static int pty_open_from_json(json_t *root, struct proto_pty_open *out, const char **why)
{
	int rc;

	if ((rc = field_u16(root, "cols", &out->cols, why)) ||
	    (rc = field_u16(root, "rows", &out->rows, why)) ||
	    (rc = field_string(root, "program", FIELD_REQUIRED, &out->program, why)) ||
	    (rc = field_string_array(root, "args", &out->args, &out->args_count, why)) ||
	    (rc = field_env(root, &out->env, &out->env_count, why)) ||
	    (rc = field_string(root, "working_dir", FIELD_OPTIONAL, &out->working_dir, why)))
		return rc;
	return field_bool(root, "interactive", FIELD_OPTIONAL, &out->interactive, why);
}

void proto_pty_open_free(struct proto_pty_open *msg)
{
	if (!msg)
		return;
	free(msg->program);
	string_array_free(msg->args, msg->args_count);
	env_free(msg->env, msg->env_count);
	free(msg->working_dir);
	memset(msg, 0, sizeof(*msg));
}

PROTO_DEFINE_CODEC(pty_open, "PtyOpen", BODY_EMPTY_INVALID)

static void pty_resize_to_json(const struct proto_pty_resize *msg, json_t *root, int *err)
{
	put(root, "cols", json_integer(msg->cols), err);
	put(root, "rows", json_integer(msg->rows), err);
}

static int pty_resize_from_json(json_t *root, struct proto_pty_resize *out, const char **why)
{
	int rc = field_u16(root, "cols", &out->cols, why);

	if (rc < 0)
		return rc;
	return field_u16(root, "rows", &out->rows, why);
}

void proto_pty_resize_free(struct proto_pty_resize *msg)
{
	if (msg)
		memset(msg, 0, sizeof(*msg));
}

PROTO_DEFINE_CODEC(pty_resize, "PtyResize", BODY_EMPTY_INVALID)

static void pty_closed_to_json(const struct proto_pty_closed *msg, json_t *root, int *err)
{
	put(root, "exit_code", json_integer(msg->exit_code), err);
}

static int pty_closed_from_json(json_t *root, struct proto_pty_closed *out, const char **why)
{
	return field_i32(root, "exit_code", &out->exit_code, why);
}

void proto_pty_closed_free(struct proto_pty_closed *msg)
{
	if (msg)
		memset(msg, 0, sizeof(*msg));
}

PROTO_DEFINE_CODEC(pty_closed, "PtyClosed", BODY_EMPTY_INVALID)

/* ---- SetPolicy ---------------------------------------------------------------------------- */

static void set_policy_to_json(const struct proto_set_policy *msg, json_t *root, int *err)
{
	put(root, "allow_all_commands", json_boolean(msg->allow_all_commands), err);
	put(root, "commands", json_from_string_array(msg->commands, msg->commands_count), err);
	put(root, "max_open_files", json_from_uint(msg->max_open_files), err);
	put(root, "max_processes", json_from_uint(msg->max_processes), err);
	put(root, "max_file_size", json_from_uint(msg->max_file_size), err);
}

/* Every field is required: a policy is the host's explicit decision, never a default. */
static int set_policy_from_json(json_t *root, struct proto_set_policy *out, const char **why)
{
	int rc;

	if ((rc = field_bool(root, "allow_all_commands", FIELD_REQUIRED, &out->allow_all_commands,
			     why)))
		return rc;
	if (!field_get(root, "commands"))
		return field_missing("commands", FIELD_REQUIRED, why);
	if ((rc = field_string_array(root, "commands", &out->commands, &out->commands_count,
				     why)) ||
	    (rc = field_u64(root, "max_open_files", &out->max_open_files, why)) ||
	    (rc = field_u64(root, "max_processes", &out->max_processes, why)))
		return rc;
	return field_u64(root, "max_file_size", &out->max_file_size, why);
}

void proto_set_policy_free(struct proto_set_policy *msg)
{
	if (!msg)
		return;
	string_array_free(msg->commands, msg->commands_count);
	memset(msg, 0, sizeof(*msg));
}

PROTO_DEFINE_CODEC(set_policy, "SetPolicy", BODY_EMPTY_INVALID)
