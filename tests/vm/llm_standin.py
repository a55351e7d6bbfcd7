#!/usr/bin/env python3
"""Scripted stand-ins for the Anthropic Messages API and the OpenAI Responses API, for the
real-agent VM tests (tests/vm/vm_real_agents.c: claude-code and codex).

The real agent CLI in a VM talks to this instead of its vendor's API. It answers by the state
of the conversation, not by counting requests, because the CLIs also send side requests
(titles, summaries, model lists) whose number is their own business:

  * a request that offers the file-writing tool (claude-code's Write, codex's exec_command)
    and holds no tool result yet gets one call of it that writes --content to --write-path;
  * a request that holds a tool result gets the final text answer (--answer);
  * anything else gets a short text.

--api anthropic serves POST .../v1/messages (server-sent events when the request streams, as
claude-code's main loop does, else one JSON message) and .../count_tokens. --api openai serves
POST .../v1/responses as the Responses API's event stream (response.created,
response.output_item.done, response.completed), which codex reads. Usage figures are fixed so
the test can check them in the run report. Each request is appended to --log as one JSON line
(path, model, stream, the branch that answered, the key the client sent), so the test can show
and check what the agent asked.

Only the Python standard library; it listens on 127.0.0.1 and writes its port to --port-file.
"""
import argparse
import json
import os
import shlex
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOOL_CALL_ID = "call_voidbox_01"
TOOL_INPUT_TOKENS = 1200
TOOL_OUTPUT_TOKENS = 80
FINAL_INPUT_TOKENS = 1500
FINAL_OUTPUT_TOKENS = 40
SIDE_INPUT_TOKENS = 10
SIDE_OUTPUT_TOKENS = 2
SIDE_TEXT = "ok"
BODY_MAX = 16 * 1024 * 1024
FALLBACK_MODEL = "claude-sonnet-4-5"


def sse(event, data):
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


def usage_for(branch):
    if branch == "tool_use":
        return TOOL_INPUT_TOKENS, TOOL_OUTPUT_TOKENS
    if branch == "final":
        return FINAL_INPUT_TOKENS, FINAL_OUTPUT_TOKENS
    return SIDE_INPUT_TOKENS, SIDE_OUTPUT_TOKENS


class Anthropic:
    """Messages API: tool_use of Write, then text."""

    paths = ("/v1/messages",)

    def __init__(self, args):
        self.args = args

    def choose(self, body):
        for message in body.get("messages") or []:
            content = message.get("content")
            if isinstance(content, list) and any(
                    isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
                return "final"
        tools = body.get("tools") or []
        if any(isinstance(t, dict) and t.get("name") == "Write" for t in tools):
            return "tool_use"
        return "side"

    def message(self, body, branch, number):
        if branch == "tool_use":
            content = [{"type": "tool_use", "id": TOOL_CALL_ID, "name": "Write",
                        "input": {"file_path": self.args.write_path,
                                  "content": self.args.content}}]
            stop = "tool_use"
        else:
            text = self.args.answer if branch == "final" else SIDE_TEXT
            content = [{"type": "text", "text": text}]
            stop = "end_turn"
        input_tokens, output_tokens = usage_for(branch)
        return {"id": f"msg_voidbox_{number:04d}", "type": "message", "role": "assistant",
                "model": body.get("model", FALLBACK_MODEL), "content": content,
                "stop_reason": stop, "stop_sequence": None,
                "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                          "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}

    def stream(self, message):
        start = dict(message, content=[], stop_reason=None)
        start["usage"] = dict(message["usage"], output_tokens=1)
        out = [sse("message_start", {"type": "message_start", "message": start})]
        for index, block in enumerate(message["content"]):
            if block["type"] == "tool_use":
                opened = dict(block, input={})
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            else:
                opened = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": block["text"]}
            out.append(sse("content_block_start", {"type": "content_block_start",
                                                   "index": index, "content_block": opened}))
            out.append(sse("content_block_delta", {"type": "content_block_delta",
                                                   "index": index, "delta": delta}))
            out.append(sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        out.append(sse("message_delta", {"type": "message_delta",
                                         "delta": {"stop_reason": message["stop_reason"],
                                                   "stop_sequence": None},
                                         "usage": {"output_tokens":
                                                   message["usage"]["output_tokens"]}}))
        out.append(sse("message_stop", {"type": "message_stop"}))
        return "".join(out).encode()


class OpenAI:
    """Responses API: a function_call of exec_command that writes the file, then text."""

    paths = ("/v1/responses", "/responses")

    def __init__(self, args):
        self.args = args

    def choose(self, body):
        items = body.get("input") if isinstance(body.get("input"), list) else []
        if any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in items):
            return "final"
        tools = body.get("tools") or []
        if any(isinstance(t, dict) and t.get("name") == "exec_command" for t in tools):
            return "tool_use"
        return "side"

    def message(self, body, branch, number):
        if branch == "tool_use":
            command = "printf '%s' {} > {}".format(shlex.quote(self.args.content),
                                                   shlex.quote(self.args.write_path))
            item = {"type": "function_call", "id": f"fc_voidbox_{number:04d}",
                    "call_id": TOOL_CALL_ID, "name": "exec_command",
                    "arguments": json.dumps({"cmd": command, "login": False, "tty": False})}
        else:
            text = self.args.answer if branch == "final" else SIDE_TEXT
            item = {"type": "message", "id": f"msg_voidbox_{number:04d}", "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}]}
        input_tokens, output_tokens = usage_for(branch)
        usage = {"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": output_tokens,
                 "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": input_tokens + output_tokens}
        return {"id": f"resp_voidbox_{number:04d}", "object": "response", "status": "completed",
                "model": body.get("model", ""), "output": [item], "usage": usage}

    def stream(self, response):
        created = dict(response, status="in_progress", output=[], usage=None)
        out = [sse("response.created", {"type": "response.created", "response": created})]
        for index, item in enumerate(response["output"]):
            out.append(sse("response.output_item.added", {"type": "response.output_item.added",
                                                          "output_index": index, "item": item}))
            out.append(sse("response.output_item.done", {"type": "response.output_item.done",
                                                         "output_index": index, "item": item}))
        out.append(sse("response.completed", {"type": "response.completed",
                                              "response": response}))
        return "".join(out).encode()


def make_handler(api, log):
    counter = [0]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):
            sys.stderr.write("standin: " + (fmt % args) + "\n")

        def reply(self, status, content_type, payload):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def reply_json(self, status, obj):
            self.reply(status, "application/json", json.dumps(obj).encode())

        def record(self, entry):
            log.write(json.dumps(entry) + "\n")

        def not_scripted(self):
            self.reply_json(404, {"type": "error", "error": {"type": "not_found_error",
                                                             "message": "not scripted"}})

        def do_GET(self):
            self.record({"method": self.command, "path": self.path})
            self.not_scripted()

        do_HEAD = do_GET

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            if length < 0 or length > BODY_MAX:
                self.reply_json(413, {"type": "error", "error": {"type": "too_large"}})
                return
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self.reply_json(400, {"type": "error", "error": {"type": "invalid_request_error",
                                                                 "message": "not JSON"}})
                return
            path = self.path.split("?", 1)[0]
            key = self.headers.get("x-api-key") or self.headers.get("authorization")
            if path.endswith("/count_tokens"):
                self.record({"method": "POST", "path": self.path, "branch": "count"})
                self.reply_json(200, {"input_tokens": SIDE_INPUT_TOKENS})
                return
            if not path.endswith(api.paths):
                self.record({"method": "POST", "path": self.path, "branch": "none"})
                self.not_scripted()
                return
            branch = api.choose(body)
            counter[0] += 1
            message = api.message(body, branch, counter[0])
            self.record({"method": "POST", "path": self.path, "model": body.get("model"),
                         "stream": bool(body.get("stream")), "branch": branch, "api_key": key})
            if body.get("stream"):
                self.reply(200, "text/event-stream", api.stream(message))
            else:
                self.reply_json(200, message)

    return Handler


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api", choices=("anthropic", "openai"), default="anthropic")
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--write-path", required=True)
    parser.add_argument("--content", required=True)
    parser.add_argument("--answer", required=True)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    api = Anthropic(args) if args.api == "anthropic" else OpenAI(args)
    log = open(args.log, "a", buffering=1)
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(api, log))
    # written aside and renamed into place, so the test never reads half a number
    with open(args.port_file + ".tmp", "w") as out:
        out.write(str(server.server_address[1]))
    os.rename(args.port_file + ".tmp", args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
