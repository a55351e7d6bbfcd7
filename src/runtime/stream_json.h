/*
 * claude-code's stream-json output (one JSON event per line) parsed into the numbers a run
 * report needs: result text, is_error, turns, tool calls, tokens, cost, durations.
 *
 * The parser is incremental because exec output arrives in chunks that split lines anywhere;
 * feed every chunk as it comes and call finish once at the end. Lines that are not JSON objects
 * (a stray log line) are counted and skipped, never fatal: the `result` event decides the
 * outcome, and its absence is reported as such.
 *
 * A listener (stream_json_parser_listen) hears each event as its line completes, as one short
 * line of text -- `[system] model M`, `[assistant] TEXT`, `[tool_use] NAME`, `[tool_result] NAME
 * ok|error` (the id for a call that was not kept), `[result] success|error: TEXT` -- so a
 * run's progress can be shown while the agent still works. The text is cut at STREAM_JSON_EVENT_TEXT_MAX bytes and holds no newline.
 *
 * The guest writes every byte, so what the parser keeps is bounded whatever it streams: the
 * first STREAM_JSON_TOOL_CALLS_MAX tool calls are kept (names cut at STREAM_JSON_TOOL_NAME_MAX
 * bytes); later ones, and any whose id is longer than STREAM_JSON_TOOL_ID_MAX bytes (it could
 * not be matched whole), are counted in tool_calls_dropped and still reach the listener. A
 * tool_result finds its call through a hash index on the id, not a scan of the kept calls.
 */
#ifndef VOIDBOX_RUNTIME_STREAM_JSON_H
#define VOIDBOX_RUNTIME_STREAM_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STREAM_JSON_EVENT_TEXT_MAX 512
/* Tool calls kept per parse; the rest are counted only. */
#define STREAM_JSON_TOOL_CALLS_MAX 4096u
/* A kept call's id is at most this long (a longer one is not kept); its name is cut to this. */
#define STREAM_JSON_TOOL_ID_MAX 128u
#define STREAM_JSON_TOOL_NAME_MAX 128u

struct json_t;

struct stream_json_tool_call {
	char *id;
	char *name;
	bool has_result;
	bool result_is_error;
};

struct stream_json_result {
	char *session_id;
	char *model;
	char *result_text;	/* the result event's `result`; NULL when none arrived */
	bool has_result_event;
	bool is_error;
	uint32_t num_turns;
	uint64_t input_tokens;	/* the result's usage, else the sum over assistant events */
	uint64_t output_tokens;
	double cost_usd;
	uint64_t duration_ms;
	uint64_t duration_api_ms;
	struct stream_json_tool_call *tool_calls; /* the kept calls, in order */
	size_t tool_call_count;
	size_t tool_calls_dropped; /* calls seen but not kept; the run made count + dropped */
	size_t skipped_lines;	/* lines that were not JSON objects */
};

/* Called once per event the parser recognised; line is not NUL-terminated. */
typedef void (*stream_json_event_fn)(void *opaque, const char *line, size_t len);

struct stream_json_parser {
	struct stream_json_result result;
	char *line;		/* the unfinished line carried between chunks */
	size_t line_len;
	size_t line_capacity;
	uint64_t assistant_input_tokens;
	uint64_t assistant_output_tokens;
	size_t tool_call_capacity;
	struct json_t *tool_index; /* kept call's id -> its index in result.tool_calls */
	stream_json_event_fn on_event; /* NULL: no listener */
	void *event_opaque;
};

void stream_json_parser_init(struct stream_json_parser *parser);
/* Sets the listener that hears every event as it is parsed. */
void stream_json_parser_listen(struct stream_json_parser *parser, stream_json_event_fn on_event,
			       void *opaque);
/* Consumes bytes; returns 0 or -ENOMEM (-E2BIG for a single line over 64 MiB). */
int stream_json_parser_feed(struct stream_json_parser *parser, const void *data, size_t len);
/*
 * Parses any unterminated last line and moves the result into *out (the parser is then empty
 * and may be reused after init). Returns 0 or -ENOMEM.
 */
int stream_json_parser_finish(struct stream_json_parser *parser, struct stream_json_result *out);
void stream_json_parser_free(struct stream_json_parser *parser);

/* One-shot: parses a whole buffer. */
int stream_json_parse(const void *data, size_t len, struct stream_json_result *out);
void stream_json_result_free(struct stream_json_result *result);

#endif
