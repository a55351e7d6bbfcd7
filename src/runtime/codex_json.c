/*
 * codex's JSON event lines (see codex_json.h), one pass over the buffer: each line is parsed on
 * its own with jansson, dispatched on its "type", and folded into the result. The per-line
 * functions only read what they need and tolerate anything else in the object.
 */
#include "runtime/codex_json.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#define CODEX_TOOL_CALLS_INITIAL 8

/* Item types that are the agent acting (a command, a patch, a tool), counted as tool calls. */
static const char *const codex_tool_item_types[] = { "command_execution", "file_change",
						     "mcp_tool_call", "web_search" };

#define CODEX_TOOL_ITEM_TYPE_COUNT \
	(sizeof(codex_tool_item_types) / sizeof(codex_tool_item_types[0]))

struct codex_reader {
	struct stream_json_result *out;
	size_t tool_call_capacity;
};

static uint64_t codex_add_tokens(uint64_t sum, json_t *value)
{
	json_int_t count = json_is_integer(value) ? json_integer_value(value) : 0;

	if (count <= 0)
		return sum;
	return (uint64_t)count > UINT64_MAX - sum ? UINT64_MAX : sum + (uint64_t)count;
}

static int codex_set_text(char **slot, json_t *value)
{
	char *copy;

	if (!json_is_string(value))
		return 0;
	copy = strdup(json_string_value(value));
	if (!copy)
		return -ENOMEM;
	free(*slot);
	*slot = copy;
	return 0;
}

static bool codex_is_tool_item(const char *type)
{
	for (size_t i = 0; type && i < CODEX_TOOL_ITEM_TYPE_COUNT; i++)
		if (strcmp(type, codex_tool_item_types[i]) == 0)
			return true;
	return false;
}

static int codex_add_tool_call(struct codex_reader *reader, json_t *item, const char *type)
{
	struct stream_json_result *out = reader->out;
	struct stream_json_tool_call *call;
	json_t *exit_code = json_object_get(item, "exit_code");
	const char *status = json_string_value(json_object_get(item, "status"));

	if (out->tool_call_count >= STREAM_JSON_TOOL_CALLS_MAX) {
		out->tool_calls_dropped++;
		return 0;
	}
	if (out->tool_call_count == reader->tool_call_capacity) {
		size_t capacity = reader->tool_call_capacity ? reader->tool_call_capacity * 2 :
							       CODEX_TOOL_CALLS_INITIAL;
		struct stream_json_tool_call *grown;

		if (capacity > STREAM_JSON_TOOL_CALLS_MAX)
			capacity = STREAM_JSON_TOOL_CALLS_MAX;
		grown = realloc(out->tool_calls, capacity * sizeof(*grown));

		if (!grown)
			return -ENOMEM;
		out->tool_calls = grown;
		reader->tool_call_capacity = capacity;
	}
	call = &out->tool_calls[out->tool_call_count];
	memset(call, 0, sizeof(*call));
	call->name = strdup(type);
	if (json_is_string(json_object_get(item, "id")))
		call->id = strndup(json_string_value(json_object_get(item, "id")),
				   STREAM_JSON_TOOL_ID_MAX);
	if (!call->name) {
		free(call->id);
		return -ENOMEM;
	}
	call->has_result = true;
	call->result_is_error = (json_is_integer(exit_code) && json_integer_value(exit_code) != 0) ||
				(status && strcmp(status, "failed") == 0);
	out->tool_call_count++;
	return 0;
}

static int codex_item_completed(struct codex_reader *reader, json_t *event)
{
	json_t *item = json_object_get(event, "item");
	const char *type = json_string_value(json_object_get(item, "type"));

	if (!type)
		return 0;
	if (strcmp(type, "agent_message") == 0)
		return codex_set_text(&reader->out->result_text, json_object_get(item, "text"));
	if (codex_is_tool_item(type))
		return codex_add_tool_call(reader, item, type);
	return 0;
}

static int codex_event(struct codex_reader *reader, json_t *event)
{
	struct stream_json_result *out = reader->out;
	const char *type = json_string_value(json_object_get(event, "type"));
	json_t *usage = json_object_get(event, "usage");

	if (!type)
		return 0;
	if (strcmp(type, "thread.started") == 0)
		return codex_set_text(&out->session_id, json_object_get(event, "thread_id"));
	if (strcmp(type, "item.completed") == 0)
		return codex_item_completed(reader, event);
	if (strcmp(type, "turn.completed") == 0) {
		out->input_tokens = codex_add_tokens(out->input_tokens,
						     json_object_get(usage, "input_tokens"));
		out->output_tokens = codex_add_tokens(out->output_tokens,
						      json_object_get(usage, "output_tokens"));
		if (out->num_turns < UINT32_MAX)
			out->num_turns++;
		out->has_result_event = true;
		return 0;
	}
	if (strcmp(type, "turn.failed") == 0) {
		out->has_result_event = true;
		out->is_error = true;
		return codex_set_text(&out->result_text,
				      json_object_get(json_object_get(event, "error"), "message"));
	}
	return 0;
}

int codex_json_parse(const void *data, size_t len, struct stream_json_result *out)
{
	struct codex_reader reader = { .out = out };
	const char *cursor = data, *end = cursor + len;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	while (cursor < end && rc == 0) {
		const char *newline = memchr(cursor, '\n', (size_t)(end - cursor));
		size_t line_len = (size_t)((newline ? newline : end) - cursor);
		json_t *event = NULL;

		if (line_len)
			event = json_loadb(cursor, line_len, JSON_REJECT_DUPLICATES, NULL);
		if (json_is_object(event))
			rc = codex_event(&reader, event);
		else if (line_len)
			out->skipped_lines++;
		json_decref(event);
		cursor += line_len + (newline ? 1 : 0);
	}
	if (rc < 0)
		stream_json_result_free(out);
	return rc;
}
