/*
 * libFuzzer target for the reader of what codex prints in the guest (`codex exec --json`
 * event lines, src/runtime/codex_json.c): the guest controls every byte. Whatever the input,
 * the parse must succeed or fail cleanly, its counts must be consistent (every tool call has a
 * name, a result implies a turn event), and nothing may crash or leak.
 */
#include <stdint.h>
#include <stdlib.h>

#include "runtime/codex_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct stream_json_result result;

	if (codex_json_parse(data, size, &result) != 0)
		return 0;
	for (size_t i = 0; i < result.tool_call_count; i++)
		if (!result.tool_calls[i].name)
			abort();
	if (result.num_turns && !result.has_result_event)
		abort();
	stream_json_result_free(&result);
	return 0;
}
