/*
 * What `codex exec --json` prints in the guest (one JSON event per line: thread.started,
 * turn.started, item.started / item.completed, turn.completed with usage, turn.failed, error)
 * read into the same numbers a claude-code run gives (struct stream_json_result), so the run
 * report treats both CLIs alike.
 *
 * The guest controls every byte: lines that are not JSON objects are counted and skipped,
 * unknown events are ignored, token counts that are not non-negative integers count as zero and
 * sums saturate. As for claude-code, the first STREAM_JSON_TOOL_CALLS_MAX tool calls are
 * kept (ids cut at STREAM_JSON_TOOL_ID_MAX bytes) and the rest counted in tool_calls_dropped.
 * The outcome is decided by the turn events: a turn.completed is a result, a turn.failed an
 * error result whose text is its message; the result text is the last agent_message item.
 * codex reports no cost, so cost_usd stays 0.
 */
#ifndef VOIDBOX_RUNTIME_CODEX_JSON_H
#define VOIDBOX_RUNTIME_CODEX_JSON_H

#include <stddef.h>

#include "runtime/stream_json.h"

/* Parses a whole buffer into *out (free with stream_json_result_free). 0 or -ENOMEM. */
int codex_json_parse(const void *data, size_t len, struct stream_json_result *out);

#endif
