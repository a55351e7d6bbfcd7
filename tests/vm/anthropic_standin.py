#!/usr/bin/env python3
"""A scripted stand-in for the Anthropic Messages API, for tests/vm/vm_claude.c.

The real claude-code in a VM talks to this instead of api.anthropic.com. It answers by the
state of the conversation, not by counting requests, because claude-code also sends small
side requests (titles, summaries) whose number is its own business:

  * a request that offers the Write tool and holds no tool_result yet gets one `tool_use` of
    Write (file_path and content from the command line);
  * a request that holds a tool_result gets the final text answer;
  * anything else (side requests) gets a short text.

Every answer streams as server-sent events when the request asks for a stream (as
claude-code's main loop does), else it is one JSON message; usage figures are fixed so the test
can check them in the run report. Each request is appended to the log file as one JSON line
(path, model, stream, which branch answered), so the test can show what the agent asked.

Only the Python standard library; it listens on 127.0.0.1 and writes its port to --port-file.
"""
import argparse
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOOL_USE_ID = "toolu_voidbox_01"
TOOL_INPUT_TOKENS = 1200
TOOL_OUTPUT_TOKENS = 80
FINAL_INPUT_TOKENS = 1500
FINAL_OUTPUT_TOKENS = 40
SIDE_INPUT_TOKENS = 10
SIDE_OUTPUT_TOKENS = 2
SIDE_TEXT = "ok"
BODY_MAX = 16 * 1024 * 1024


def has_tool_result(messages):
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    return True
    return False


def offers_write(tools):
    return any(isinstance(t, dict) and t.get("name") == "Write" for t in tools or [])


def sse(event, data):
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


class Script:
    def __init__(self, args):
        self.args = args
        self.log = open(args.log, "a", buffering=1) if args.log else None

    def choose(self, body):
        messages = body.get("messages") or []
        if has_tool_result(messages):
            return "final"
        if offers_write(body.get("tools")):
            return "tool_use"
        return "side"

    def blocks(self, branch):
        if branch == "tool_use":
            tool_input = {"file_path": self.args.write_path, "content": self.args.content}
            return ([{"type": "tool_use", "id": TOOL_USE_ID, "name": "Write",
                      "input": tool_input}], "tool_use", TOOL_INPUT_TOKENS, TOOL_OUTPUT_TOKENS)
        if branch == "final":
            return ([{"type": "text", "text": self.args.answer}], "end_turn",
                    FINAL_INPUT_TOKENS, FINAL_OUTPUT_TOKENS)
        return ([{"type": "text", "text": SIDE_TEXT}], "end_turn", SIDE_INPUT_TOKENS,
                SIDE_OUTPUT_TOKENS)

    def message(self, body, branch, message_id):
        content, stop, input_tokens, output_tokens = self.blocks(branch)
        return {"id": message_id, "type": "message", "role": "assistant",
                "model": body.get("model", "claude-sonnet-4-5"), "content": content,
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

    def record(self, entry):
        if self.log:
            self.log.write(json.dumps(entry) + "\n")


def make_handler(script):
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

        def do_GET(self):
            script.record({"method": "GET", "path": self.path})
            self.reply_json(404, {"type": "error", "error": {"type": "not_found_error",
                                                             "message": "not scripted"}})

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
            if path.endswith("/count_tokens"):
                script.record({"method": "POST", "path": self.path, "branch": "count"})
                self.reply_json(200, {"input_tokens": SIDE_INPUT_TOKENS})
                return
            if not path.endswith("/v1/messages"):
                self.do_GET()
                return
            branch = script.choose(body)
            counter[0] += 1
            message = script.message(body, branch, f"msg_voidbox_{counter[0]:04d}")
            script.record({"method": "POST", "path": self.path, "model": body.get("model"),
                           "stream": bool(body.get("stream")), "branch": branch,
                           "api_key": self.headers.get("x-api-key")})
            if body.get("stream"):
                self.reply(200, "text/event-stream", script.stream(message))
            else:
                self.reply_json(200, message)

    return Handler


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--write-path", required=True)
    parser.add_argument("--content", required=True)
    parser.add_argument("--answer", required=True)
    parser.add_argument("--log")
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(Script(args)))
    with open(args.port_file + ".tmp", "w") as out:
        out.write(str(server.server_address[1]))
    # renamed into place so the test never reads half a number
    os.rename(args.port_file + ".tmp", args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
