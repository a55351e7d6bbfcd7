/*
 * libFuzzer target for the reader of what an agent CLI prints in the guest (claude-code's
 * stream-json lines, src/runtime/stream_json.c): the guest controls every byte. The input is
 * fed whole and, separately, in chunks split at a point the first byte picks, and both runs
 * must agree on what they found; nothing may crash or leak. The chunked run has a listener,
 * whose lines must stay within their bound and hold no line break. What the parser keeps of
 * the tool calls must stay within its bounds.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/stream_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool fuzz_same_text(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static void fuzz_listener(void *opaque, const char *line, size_t len)
{
	(void)opaque;
	if (len > STREAM_JSON_EVENT_TEXT_MAX || memchr(line, '\n', len) || memchr(line, '\0', len))
		abort();
}

static bool fuzz_tool_calls_bounded(const struct stream_json_result *result)
{
	if (result->tool_call_count > STREAM_JSON_TOOL_CALLS_MAX)
		return false;
	for (size_t i = 0; i < result->tool_call_count; i++)
		if ((result->tool_calls[i].id &&
		     strlen(result->tool_calls[i].id) > STREAM_JSON_TOOL_ID_MAX) ||
		    (result->tool_calls[i].name &&
		     strlen(result->tool_calls[i].name) > STREAM_JSON_TOOL_NAME_MAX))
			return false;
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct stream_json_result whole, chunked;
	struct stream_json_parser parser;
	size_t split;

	if (size == 0)
		return 0;
	split = data[0] % size;
	if (stream_json_parse(data + 1, size - 1, &whole) != 0)
		return 0;
	stream_json_parser_init(&parser);
	stream_json_parser_listen(&parser, fuzz_listener, NULL);
	if (stream_json_parser_feed(&parser, data + 1, split) != 0 ||
	    stream_json_parser_feed(&parser, data + 1 + split, size - 1 - split) != 0 ||
	    stream_json_parser_finish(&parser, &chunked) != 0) {
		stream_json_parser_free(&parser);
		stream_json_result_free(&whole);
		return 0;
	}
	if (whole.num_turns != chunked.num_turns || whole.tool_call_count != chunked.tool_call_count ||
	    whole.input_tokens != chunked.input_tokens ||
	    whole.tool_calls_dropped != chunked.tool_calls_dropped ||
	    whole.has_result_event != chunked.has_result_event ||
	    !fuzz_same_text(whole.result_text, chunked.result_text) ||
	    !fuzz_tool_calls_bounded(&whole))
		abort();
	stream_json_parser_free(&parser);
	stream_json_result_free(&whole);
	stream_json_result_free(&chunked);
	return 0;
}
