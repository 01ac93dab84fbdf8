"""A scripted model for the real CLIs used as MCP clients: it can call any tool (an MCP tool of relay's) by name.

The shared mock (mocks.py) scripts text and file writes; a client test needs the model to call
`mcp__relay__delegate` (Claude) or Codex's `tool_search` and then `delegate` in the `mcp__relay`
namespace. `brain(api, body)` decides each turn from the request; the wire formats come from mocks.py.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.e2e.mocks import (  # pyright: ignore[reportPrivateUsage]
    Reply,
    _sse,
    anthropic_stream,
    gemini_side_answer,
    gemini_stream,
    responses_stream,
)


@dataclass(frozen=True)
class ToolCall:
    """A model turn that calls `name` with `arguments` (Responses: in `namespace`; `kind` picks the item type)."""

    name: str
    arguments: dict[str, Any]
    namespace: str | None = None
    kind: str = "function_call"


Turn = ToolCall | str
Brain = Callable[[str, dict[str, Any]], Turn]


def anthropic_tool_use(call: ToolCall, model: str) -> Iterator[bytes]:
    message = {
        "id": f"msg_mock_{uuid.uuid4().hex[:16]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 10,
            "output_tokens": 1,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }
    yield _sse("message_start", {"type": "message_start", "message": message})
    block = {"type": "tool_use", "id": f"toolu_mock_{uuid.uuid4().hex[:16]}", "name": call.name, "input": {}}
    yield _sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block})
    delta = {"type": "input_json_delta", "partial_json": json.dumps(call.arguments)}
    yield _sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
    yield _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
    yield _sse(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 5},
        },
    )
    yield _sse("message_stop", {"type": "message_stop"})


def responses_tool_call(call: ToolCall, model: str) -> Iterator[bytes]:
    resp_id = f"resp_mock_{uuid.uuid4().hex[:16]}"
    seq = iter(range(1_000_000))

    def event(name: str, data: dict[str, Any]) -> bytes:
        return _sse(name, {"type": name, "sequence_number": next(seq), **data})

    base = {"id": resp_id, "object": "response", "created_at": 0, "model": model}
    yield event("response.created", {"response": {**base, "status": "in_progress", "output": []}})
    item: dict[str, Any] = {
        "id": f"fc_mock_{uuid.uuid4().hex[:16]}",
        "type": call.kind,
        "status": "completed",
        "call_id": f"call_mock_{uuid.uuid4().hex[:16]}",
    }
    if call.kind == "function_call":
        item.update(name=call.name, arguments=json.dumps(call.arguments))
        if call.namespace:
            item["namespace"] = call.namespace
    else:
        item.update(execution="client", arguments=call.arguments)
    yield event("response.output_item.added", {"output_index": 0, "item": item})
    yield event("response.output_item.done", {"output_index": 0, "item": item})
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }
    yield event("response.completed", {"response": {**base, "status": "completed", "output": [item], "usage": usage}})


def gemini_call(call: ToolCall) -> Iterator[bytes]:
    part = {"functionCall": {"name": call.name, "args": call.arguments}}
    candidate = {"content": {"role": "model", "parts": [part]}, "index": 0, "finishReason": "STOP"}
    usage = {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}
    yield _sse(None, {"candidates": [candidate], "modelVersion": "mock", "usageMetadata": usage})


class ClientModel:
    """A model API on 127.0.0.1 whose every turn `brain` decides; records each request body."""

    def __init__(self, brain: Brain) -> None:
        self.brain = brain
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> ClientModel:
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                self._reply_json(200, {"data": [], "models": []})

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b"{}"
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {}
                path = self.path.split("?")[0]
                api = "anthropic" if path.endswith("/messages") else "responses" if path.endswith("/responses") else ""
                if path.endswith(":streamGenerateContent"):
                    api = "gemini"
                elif path.endswith(":generateContent"):  # Gemini's side requests (routing, next speaker)
                    self._reply_json(200, gemini_side_answer(body))
                    return
                if not api:
                    self._reply_json(404, {"error": {"message": f"no route {path}"}})
                    return
                with model._lock:
                    model.requests.append((api, body))
                turn = model.brain(api, body)
                name = str(body.get("model") or "mock-model")
                if api == "gemini":
                    events = gemini_call(turn) if isinstance(turn, ToolCall) else gemini_stream(Reply(text=turn), turn)
                elif isinstance(turn, ToolCall):
                    events = anthropic_tool_use(turn, name) if api == "anthropic" else responses_tool_call(turn, name)
                else:
                    reply = Reply(text=turn)
                    events = (
                        anthropic_stream(reply, turn, name)
                        if api == "anthropic"
                        else responses_stream(reply, turn, name)
                    )
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.end_headers()
                for chunk in events:
                    self.wfile.write(chunk)
                    self.wfile.flush()
                self.close_connection = True

            def _reply_json(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._httpd is not None
        self._httpd.shutdown()
        self._httpd.server_close()
