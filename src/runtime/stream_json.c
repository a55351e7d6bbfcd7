/*
 * Incremental stream-json parsing: bytes are split into lines here, and each complete line is
 * one event handled by type (system, assistant, user, result). Unknown types are ignored, as
 * claude-code adds event types over time and a run report must not break on them. The
 * listener's lines are formatted here from the same parsed event, after the numbers are taken.
 * Kept tool calls are found by id through a jansson object used as a hash table (its hash is
 * seeded at random, so a guest cannot choose ids that collide); its values are indexes into
 * result.tool_calls, which stay valid as the array grows.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "runtime/stream_json.h"

#define STREAM_JSON_LINE_MAX (64u << 20)
#define STREAM_JSON_LINE_INITIAL 4096u
#define STREAM_JSON_TOOLS_INITIAL 8u

void stream_json_parser_init(struct stream_json_parser *parser)
{
	memset(parser, 0, sizeof(*parser));
}

void stream_json_parser_listen(struct stream_json_parser *parser, stream_json_event_fn on_event,
			       void *opaque)
{
	parser->on_event = on_event;
	parser->event_opaque = opaque;
}

static void stream_json_tell(struct stream_json_parser *parser, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Formats one listener line, cut to its maximum, with line breaks as spaces. */
static void stream_json_tell(struct stream_json_parser *parser, const char *fmt, ...)
{
	char line[STREAM_JSON_EVENT_TEXT_MAX + 1];
	va_list ap;
	int len;

	if (!parser->on_event)
		return;
	va_start(ap, fmt);
	len = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (len < 0)
		return;
	if ((size_t)len > STREAM_JSON_EVENT_TEXT_MAX)
		len = STREAM_JSON_EVENT_TEXT_MAX;
	for (int i = 0; i < len; i++)
		if (line[i] == '\n' || line[i] == '\r' || line[i] == '\0')
			line[i] = ' ';
	parser->on_event(parser->event_opaque, line, (size_t)len);
}

static const char *stream_json_text(json_t *value)
{
	const char *text = json_string_value(value);

	return text ? text : "";
}

static int stream_json_set_string(char **field, json_t *value)
{
	const char *text = json_string_value(value);
	char *copy;

	if (!text)
		return 0;
	copy = strdup(text);
	if (!copy)
		return -ENOMEM;
	free(*field);
	*field = copy;
	return 0;
}

static uint64_t stream_json_uint(json_t *value)
{
	json_int_t number = json_integer_value(value);

	return number > 0 ? (uint64_t)number : 0;
}

/* The kept call with id, through the index; NULL when none was kept. */
static struct stream_json_tool_call *stream_json_find_tool(struct stream_json_parser *parser,
							   const char *id)
{
	json_t *index = json_object_get(parser->tool_index, id);

	if (!json_is_integer(index))
		return NULL;
	return &parser->result.tool_calls[json_integer_value(index)];
}

/* A call is kept while there is room, and only when its id is short enough to match whole. */
static bool stream_json_keeps_tool(const struct stream_json_result *result, const char *id)
{
	return result->tool_call_count < STREAM_JSON_TOOL_CALLS_MAX &&
	       (!id || strlen(id) <= STREAM_JSON_TOOL_ID_MAX);
}

static int stream_json_grow_tools(struct stream_json_parser *parser)
{
	struct stream_json_result *result = &parser->result;
	size_t capacity = parser->tool_call_capacity ? parser->tool_call_capacity * 2 :
						       STREAM_JSON_TOOLS_INITIAL;
	struct stream_json_tool_call *grown;

	if (result->tool_call_count < parser->tool_call_capacity)
		return 0;
	if (capacity > STREAM_JSON_TOOL_CALLS_MAX)
		capacity = STREAM_JSON_TOOL_CALLS_MAX;
	grown = realloc(result->tool_calls, capacity * sizeof(*grown));
	if (!grown)
		return -ENOMEM;
	result->tool_calls = grown;
	parser->tool_call_capacity = capacity;
	return 0;
}

/* Indexes the kept call at index under id; a repeated id stays with its first call. */
static int stream_json_index_tool(struct stream_json_parser *parser, const char *id,
				  size_t index)
{
	if (!parser->tool_index) {
		parser->tool_index = json_object();
		if (!parser->tool_index)
			return -ENOMEM;
	}
	if (json_object_get(parser->tool_index, id))
		return 0;
	return json_object_set_new(parser->tool_index, id, json_integer((json_int_t)index)) < 0 ?
		       -ENOMEM : 0;
}

static int stream_json_add_tool(struct stream_json_parser *parser, json_t *block)
{
	struct stream_json_result *result = &parser->result;
	const char *id = json_string_value(json_object_get(block, "id"));
	const char *name = json_string_value(json_object_get(block, "name"));
	struct stream_json_tool_call *call;

	if (!stream_json_keeps_tool(result, id)) {
		result->tool_calls_dropped++;
		return 0;
	}
	if (stream_json_grow_tools(parser) < 0)
		return -ENOMEM;
	call = &result->tool_calls[result->tool_call_count];
	memset(call, 0, sizeof(*call));
	result->tool_call_count++;
	if (id && !(call->id = strdup(id)))
		return -ENOMEM;
	if (name && !(call->name = strndup(name, STREAM_JSON_TOOL_NAME_MAX)))
		return -ENOMEM;
	return id ? stream_json_index_tool(parser, id, result->tool_call_count - 1) : 0;
}

static int stream_json_on_system(struct stream_json_parser *parser, json_t *event)
{
	if (stream_json_set_string(&parser->result.session_id, json_object_get(event, "session_id")))
		return -ENOMEM;
	stream_json_tell(parser, "[system] %s model %s", stream_json_text(json_object_get(event, "subtype")),
			 stream_json_text(json_object_get(event, "model")));
	return stream_json_set_string(&parser->result.model, json_object_get(event, "model"));
}

static int stream_json_on_assistant(struct stream_json_parser *parser, json_t *event)
{
	json_t *message = json_object_get(event, "message");
	json_t *usage = json_object_get(message, "usage");
	json_t *block;
	size_t i;

	parser->assistant_input_tokens += stream_json_uint(json_object_get(usage, "input_tokens"));
	parser->assistant_output_tokens +=
		stream_json_uint(json_object_get(usage, "output_tokens"));
	if (!parser->result.model &&
	    stream_json_set_string(&parser->result.model, json_object_get(message, "model")) < 0)
		return -ENOMEM;
	json_array_foreach(json_object_get(message, "content"), i, block) {
		const char *type = json_string_value(json_object_get(block, "type"));

		if (type && strcmp(type, "tool_use") == 0) {
			if (stream_json_add_tool(parser, block) < 0)
				return -ENOMEM;
			stream_json_tell(parser, "[tool_use] %s",
					 stream_json_text(json_object_get(block, "name")));
		} else if (type && strcmp(type, "text") == 0) {
			stream_json_tell(parser, "[assistant] %s",
					 stream_json_text(json_object_get(block, "text")));
		}
	}
	return 0;
}

static void stream_json_on_user(struct stream_json_parser *parser, json_t *event)
{
	json_t *block;
	size_t i;

	json_array_foreach(json_object_get(json_object_get(event, "message"), "content"), i, block) {
		const char *type = json_string_value(json_object_get(block, "type"));
		const char *id = json_string_value(json_object_get(block, "tool_use_id"));
		struct stream_json_tool_call *call;
		bool is_error;

		if (!type || strcmp(type, "tool_result") != 0 || !id)
			continue;
		call = stream_json_find_tool(parser, id);
		is_error = json_is_true(json_object_get(block, "is_error"));
		if (call) {
			call->has_result = true;
			call->result_is_error = is_error;
			stream_json_tell(parser, "[tool_result] %s %s", call->name ? call->name : id,
					 is_error ? "error" : "ok");
		} else if (parser->result.tool_calls_dropped) {
			/* maybe the result of a call that was not kept: progress still shows it */
			stream_json_tell(parser, "[tool_result] %s %s", id, is_error ? "error" : "ok");
		}
	}
}

static int stream_json_on_result(struct stream_json_parser *parser, json_t *event)
{
	struct stream_json_result *result = &parser->result;
	json_t *usage = json_object_get(event, "usage");

	result->has_result_event = true;
	result->is_error = json_is_true(json_object_get(event, "is_error"));
	result->num_turns = (uint32_t)stream_json_uint(json_object_get(event, "num_turns"));
	result->duration_ms = stream_json_uint(json_object_get(event, "duration_ms"));
	result->duration_api_ms = stream_json_uint(json_object_get(event, "duration_api_ms"));
	result->cost_usd = json_number_value(json_object_get(event, "total_cost_usd"));
	if (result->cost_usd < 0)
		result->cost_usd = 0;
	if (json_is_object(usage)) {
		result->input_tokens = stream_json_uint(json_object_get(usage, "input_tokens"));
		result->output_tokens = stream_json_uint(json_object_get(usage, "output_tokens"));
	}
	if (stream_json_set_string(&result->session_id, json_object_get(event, "session_id")) < 0)
		return -ENOMEM;
	stream_json_tell(parser, "[result] %s: %s", result->is_error ? "error" : "success",
			 stream_json_text(json_object_get(event, "result")));
	return stream_json_set_string(&result->result_text, json_object_get(event, "result"));
}

static int stream_json_handle_line(struct stream_json_parser *parser, const char *line,
				   size_t len)
{
	json_t *event;
	const char *type;
	int rc = 0;

	while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' '))
		len--;
	if (len == 0)
		return 0;
	event = json_loadb(line, len, JSON_REJECT_DUPLICATES, NULL);
	type = json_string_value(json_object_get(event, "type"));
	if (!type) {
		parser->result.skipped_lines++;
		json_decref(event);
		return 0;
	}
	if (strcmp(type, "system") == 0)
		rc = stream_json_on_system(parser, event);
	else if (strcmp(type, "assistant") == 0)
		rc = stream_json_on_assistant(parser, event);
	else if (strcmp(type, "user") == 0)
		stream_json_on_user(parser, event);
	else if (strcmp(type, "result") == 0)
		rc = stream_json_on_result(parser, event);
	json_decref(event);
	return rc;
}

static int stream_json_append(struct stream_json_parser *parser, const char *data, size_t len)
{
	if (parser->line_len + len > STREAM_JSON_LINE_MAX)
		return -E2BIG;
	if (parser->line_len + len > parser->line_capacity) {
		size_t capacity = parser->line_capacity ? parser->line_capacity :
							  STREAM_JSON_LINE_INITIAL;
		char *grown;

		while (capacity < parser->line_len + len)
			capacity *= 2;
		grown = realloc(parser->line, capacity);
		if (!grown)
			return -ENOMEM;
		parser->line = grown;
		parser->line_capacity = capacity;
	}
	memcpy(parser->line + parser->line_len, data, len);
	parser->line_len += len;
	return 0;
}

int stream_json_parser_feed(struct stream_json_parser *parser, const void *data, size_t len)
{
	const char *cursor = data;
	const char *end = cursor + len;
	int rc;

	while (cursor < end) {
		const char *newline = memchr(cursor, '\n', (size_t)(end - cursor));

		if (!newline)
			return stream_json_append(parser, cursor, (size_t)(end - cursor));
		if (parser->line_len == 0) {
			rc = stream_json_handle_line(parser, cursor, (size_t)(newline - cursor));
		} else {
			rc = stream_json_append(parser, cursor, (size_t)(newline - cursor));
			if (rc == 0)
				rc = stream_json_handle_line(parser, parser->line, parser->line_len);
			parser->line_len = 0;
		}
		if (rc < 0)
			return rc;
		cursor = newline + 1;
	}
	return 0;
}

int stream_json_parser_finish(struct stream_json_parser *parser, struct stream_json_result *out)
{
	struct stream_json_result *result = &parser->result;
	int rc = 0;

	if (parser->line_len) {
		rc = stream_json_handle_line(parser, parser->line, parser->line_len);
		parser->line_len = 0;
	}
	if (rc < 0)
		return rc;
	if (!result->input_tokens && !result->output_tokens) {
		result->input_tokens = parser->assistant_input_tokens;
		result->output_tokens = parser->assistant_output_tokens;
	}
	*out = *result;
	memset(result, 0, sizeof(*result));
	parser->tool_call_capacity = 0;
	json_decref(parser->tool_index);
	parser->tool_index = NULL;
	return 0;
}

void stream_json_result_free(struct stream_json_result *result)
{
	for (size_t i = 0; i < result->tool_call_count; i++) {
		free(result->tool_calls[i].id);
		free(result->tool_calls[i].name);
	}
	free(result->tool_calls);
	free(result->session_id);
	free(result->model);
	free(result->result_text);
	memset(result, 0, sizeof(*result));
}

void stream_json_parser_free(struct stream_json_parser *parser)
{
	stream_json_result_free(&parser->result);
	json_decref(parser->tool_index);
	free(parser->line);
	memset(parser, 0, sizeof(*parser));
}

int stream_json_parse(const void *data, size_t len, struct stream_json_result *out)
{
	struct stream_json_parser parser;
	int rc;

	stream_json_parser_init(&parser);
	rc = stream_json_parser_feed(&parser, data, len);
	if (rc == 0)
		rc = stream_json_parser_finish(&parser, out);
	stream_json_parser_free(&parser);
	return rc;
}
