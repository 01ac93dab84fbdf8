"""Mock model servers on 127.0.0.1 for the real agent CLIs: Anthropic, OpenAI (Responses, Chat) and Gemini.

One `MockModelServer` answers all four wire formats, each on its own path, so a test starts one
server and points whichever CLI it drives at it. The test scripts the model turns (`Reply`: a
text, a tool call that writes a file, an HTTP error with the vendor's error JSON, a stream that
hangs or trickles) and afterwards reads back every request the CLI sent (`Recorded`).

The shapes follow the "Mock requirements" of each CLI in the project's agent-CLI reference notes
(reference/agent-clis.md).
"""

from __future__ import annotations

import json
import select
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import urlsplit

Api = Literal["anthropic", "responses", "chat", "gemini", "gemini-side", "other"]

# The vendor's name for an HTTP status in its error JSON.
_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    529: "overloaded_error",
}
# The APIs whose requests are model turns (the rest are probes and side requests).
MODEL_APIS: tuple[Api, ...] = ("anthropic", "responses", "chat", "gemini")
# The longest a held model turn waits for `release` (below the CLIs' own request timeouts).
HOLD_LIMIT_S = 60.0
_OPENAI_ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 429: "rate_limit_error"}
_OPENAI_ERROR_CODES = {401: "invalid_api_key", 429: "rate_limit_exceeded"}
_GOOGLE_STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


@dataclass(frozen=True)
class WriteFile:
    """A tool call asking the agent to write `content` to the absolute `path` with its own write tool."""

    path: str
    content: str


@dataclass(frozen=True)
class Reply:
    """One scripted model turn.

    By default a streamed text answer. `write` makes it a tool call instead, and so does `read`
    (Anthropic only: Claude's Read tool, which its Write tool wants before it replaces a file that
    exists); `status` other than
    200 makes it an HTTP error carrying `error` in the vendor's error JSON; `hang` sends the
    response headers and then nothing until the client goes away; `delay_s` waits between the
    `chunks` pieces the text is streamed in. `echo_tool_result` appends the tool output found in
    the request ("... tool output was: <output>"), so a refusal the CLI only reports to the
    model becomes visible in the answer. `escalate` (Codex only) asks for the write to run outside
    Codex's sandbox (`sandbox_permissions: "require_escalated"`), which Codex asks approval for.
    """

    text: str = "hello from the mock"
    write: WriteFile | None = None
    read: str | None = None
    status: int = 200
    error: str = "scripted upstream failure"
    hang: bool = False
    delay_s: float = 0.0
    chunks: int = 1
    input_tokens: int = 31
    output_tokens: int = 7
    echo_tool_result: bool = False
    escalate: bool = False


@dataclass
class Recorded:
    """A request the server received."""

    api: Api
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float = field(default_factory=time.monotonic)

    @property
    def text(self) -> str:
        """The body as JSON text, to look for markers of earlier turns in."""
        return json.dumps(self.body, ensure_ascii=False)


class MockModelServer:
    """A scripted model API on a free 127.0.0.1 port; use as a context manager."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        # Replies for one API's turns only, taken before the shared queue (two CLIs at once).
        self.replies_for: dict[Api, deque[Reply]] = {}
        self.default = Reply()
        self.requests: list[Recorded] = []
        # Set when a model turn's response has started (headers sent): the CLI is in a turn.
        self.streaming = threading.Event()
        # Set when a hanging response saw its client close the connection.
        self.disconnected = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        # Notified whenever a request is recorded.
        self._arrived = threading.Condition(self._lock)
        # While cleared, model turns are recorded but wait here before taking their reply.
        self._gate = threading.Event()
        self._gate.set()
        self._httpd: ThreadingHTTPServer | None = None

    # scripting -------------------------------------------------------------------------------

    def script(self, *replies: Reply) -> None:
        """Queue replies for the next model turns; when they run out, `default` answers."""
        with self._lock:
            self.replies.extend(replies)

    def script_for(self, api: Api, *replies: Reply) -> None:
        """Queue replies for the next model turns of one API (taken before the shared queue)."""
        with self._lock:
            self.replies_for.setdefault(api, deque()).extend(replies)

    def hold(self) -> None:
        """From now on a model turn waits (at most HOLD_LIMIT_S) for `release` before it takes its reply."""
        self._gate.clear()

    def release(self) -> None:
        """Let the held model turns take their replies."""
        self._gate.set()

    def wait_turns(self, api: Api, count: int, timeout: float) -> bool:
        """Whether `count` model turns of `api` arrived within `timeout` seconds."""
        with self._arrived:
            return self._arrived.wait_for(lambda: len(self._turns(api)) >= count, timeout)

    def always(self, reply: Reply) -> None:
        """Answer every model turn (including the CLI's retries) with `reply`."""
        with self._lock:
            self.replies.clear()
            self.default = reply

    def turns(self, api: Api | None = None) -> list[Recorded]:
        """The model-turn requests received so far (no probes or side requests), oldest first."""
        with self._lock:
            return self._turns(api)

    def _turns(self, api: Api | None) -> list[Recorded]:
        return [r for r in self.requests if r.api in MODEL_APIS and (api is None or r.api == api)]

    def wait_streaming(self, timeout: float) -> bool:
        return self.streaming.wait(timeout)

    # lifecycle -------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        assert self._httpd is not None, "the mock server is not running"
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> MockModelServer:
        server = self

        class Handler(_Handler):
            mock = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        httpd = self._httpd
        # A short poll interval keeps the shutdown at the end of every test quick.
        threading.Thread(target=lambda: httpd.serve_forever(0.05), name="mock-model-server", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()  # ends hanging and trickling responses
        self._gate.set()
        assert self._httpd is not None
        self._httpd.shutdown()
        self._httpd.server_close()

    def _record(self, rec: Recorded) -> Reply | None:
        with self._arrived:
            self.requests.append(rec)
            self._arrived.notify_all()
        if rec.api not in MODEL_APIS:
            return None
        self._gate.wait(HOLD_LIMIT_S)
        with self._lock:
            own = self.replies_for.get(rec.api)
            if own:
                return own.popleft()
            return self.replies.popleft() if self.replies else self.default


# wire formats ------------------------------------------------------------------------------


def _pieces(text: str, n: int) -> list[str]:
    if n <= 1 or len(text) <= 1:
        return [text]
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _sse(event: str | None, data: Any) -> bytes:
    head = f"event: {event}\n" if event else ""
    payload = data if isinstance(data, str) else json.dumps(data)
    return f"{head}data: {payload}\n\n".encode()


def tool_output(api: str, body: dict[str, Any]) -> str | None:
    """The output of the last tool call, as the CLI sends it back to the model (Responses: any `*_output` item)."""
    found: str | None = None
    if api == "anthropic":
        for message in body.get("messages", []):
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    inner = block.get("content")
                    if isinstance(inner, list):
                        inner = "".join(str(c.get("text", "")) for c in inner if isinstance(c, dict))
                    found = str(inner)
    elif api == "responses":
        for item in body.get("input", []):
            if isinstance(item, dict) and str(item.get("type", "")).endswith("_output"):
                output = item.get("output", item.get("tools"))
                found = output if isinstance(output, str) else json.dumps(output)
    elif api == "chat":
        for message in body.get("messages", []):
            if message.get("role") == "tool":
                found = str(message.get("content"))
    elif api == "gemini":
        for content in body.get("contents", []):
            for part in content.get("parts", []):
                if isinstance(part, dict) and "functionResponse" in part:
                    found = json.dumps(part["functionResponse"].get("response"))
    return found


def _answer_text(reply: Reply, api: Api, body: dict[str, Any]) -> str:
    if reply.echo_tool_result:
        return f"{reply.text} tool output was: {tool_output(api, body)}"
    return reply.text


def anthropic_stream(reply: Reply, text: str, model: str) -> Iterator[bytes]:
    """Anthropic Messages SSE: message_start, one content block (text or tool_use), message_delta, stop."""
    yield _sse(
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": f"msg_mock_{uuid.uuid4().hex[:16]}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": reply.input_tokens,
                    "output_tokens": 1,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0,
                },
            },
        },
    )
    if reply.write is not None or reply.read is not None:
        name, args = (
            ("Write", json.dumps({"file_path": reply.write.path, "content": reply.write.content}))
            if reply.write is not None
            else ("Read", json.dumps({"file_path": reply.read}))
        )
        block = {"type": "tool_use", "id": f"toolu_mock_{uuid.uuid4().hex[:16]}", "name": name, "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in _pieces(args, reply.chunks)]
        stop = "tool_use"
    else:
        block = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": p} for p in _pieces(text, reply.chunks)]
        stop = "end_turn"
    yield _sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block})
    for delta in deltas:
        yield _sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
    yield _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
    yield _sse(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": reply.output_tokens},
        },
    )
    yield _sse("message_stop", {"type": "message_stop"})


def responses_stream(reply: Reply, text: str, model: str) -> Iterator[bytes]:
    """OpenAI Responses SSE, the full Codex event sequence (created ... completed)."""
    resp_id = f"resp_mock_{uuid.uuid4().hex[:16]}"
    seq = iter(range(1_000_000))

    def event(name: str, data: dict[str, Any]) -> bytes:
        return _sse(name, {"type": name, "sequence_number": next(seq), **data})

    base = {"id": resp_id, "object": "response", "created_at": int(time.time()), "model": model}
    yield event("response.created", {"response": {**base, "status": "in_progress", "output": []}})
    yield event("response.in_progress", {"response": {**base, "status": "in_progress", "output": []}})
    if reply.write is not None:
        # Codex's shell tool: the command runs in the sandbox the job's permission chose.
        cmd = f"printf '%s' {_shell_quote(reply.write.content)} > {_shell_quote(reply.write.path)}"
        escalation = {"sandbox_permissions": "require_escalated", "justification": "write the file"}
        arguments = json.dumps({"cmd": cmd, **(escalation if reply.escalate else {})})
        item: dict[str, Any] = {
            "id": f"fc_mock_{uuid.uuid4().hex[:16]}",
            "type": "function_call",
            "status": "in_progress",
            "call_id": f"call_mock_{uuid.uuid4().hex[:16]}",
            "name": "exec_command",
            "arguments": "",
        }
        yield event("response.output_item.added", {"output_index": 0, "item": item})
        for piece in _pieces(arguments, reply.chunks):
            yield event(
                "response.function_call_arguments.delta", {"item_id": item["id"], "output_index": 0, "delta": piece}
            )
        yield event(
            "response.function_call_arguments.done",
            {"item_id": item["id"], "output_index": 0, "arguments": arguments},
        )
        done = {**item, "status": "completed", "arguments": arguments}
    else:
        item = {
            "id": f"msg_mock_{uuid.uuid4().hex[:16]}",
            "type": "message",
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        }
        part = {"type": "output_text", "text": "", "annotations": []}
        where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
        yield event("response.output_item.added", {"output_index": 0, "item": item})
        yield event("response.content_part.added", {**where, "part": part})
        for piece in _pieces(text, reply.chunks):
            yield event("response.output_text.delta", {**where, "delta": piece, "logprobs": []})
        yield event("response.output_text.done", {**where, "text": text, "logprobs": []})
        yield event("response.content_part.done", {**where, "part": {**part, "text": text}})
        done = {**item, "status": "completed", "content": [{**part, "text": text}]}
    yield event("response.output_item.done", {"output_index": 0, "item": done})
    usage = {
        "input_tokens": reply.input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": reply.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": reply.input_tokens + reply.output_tokens,
    }
    yield event("response.completed", {"response": {**base, "status": "completed", "output": [done], "usage": usage}})


def chat_stream(reply: Reply, text: str, model: str) -> Iterator[bytes]:
    """OpenAI Chat Completions SSE: role delta, content or tool-call deltas, finish, usage chunk, [DONE]."""
    chunk_id = f"chatcmpl-mock{uuid.uuid4().hex[:10]}"

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        data = {"id": chunk_id, "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
        return _sse(None, {**data, "choices": choices, **extra})

    yield chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
    if reply.write is not None:
        args = json.dumps({"path": reply.write.path, "file_text": reply.write.content})
        call = {
            "index": 0,
            "id": f"call_mock_{uuid.uuid4().hex[:8]}",
            "type": "function",
            "function": {"name": "create", "arguments": ""},
        }
        yield chunk([{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}])
        for piece in _pieces(args, reply.chunks):
            delta = {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
            yield chunk([{"index": 0, "delta": delta, "finish_reason": None}])
        finish = "tool_calls"
    else:
        for piece in _pieces(text, reply.chunks):
            yield chunk([{"index": 0, "delta": {"content": piece}, "finish_reason": None}])
        finish = "stop"
    yield chunk([{"index": 0, "delta": {}, "finish_reason": finish}])
    usage = {
        "prompt_tokens": reply.input_tokens,
        "completion_tokens": reply.output_tokens,
        "total_tokens": reply.input_tokens + reply.output_tokens,
    }
    yield chunk([], usage=usage)
    yield _sse(None, "[DONE]")


def gemini_stream(reply: Reply, text: str) -> Iterator[bytes]:
    """Gemini streamGenerateContent?alt=sse: `data:` chunks; the last carries finishReason and usage."""
    if reply.write is not None:
        call = {"name": "write_file", "args": {"file_path": reply.write.path, "content": reply.write.content}}
        parts_list = [[{"functionCall": call}]]
    else:
        parts_list = [[{"text": p}] for p in _pieces(text, reply.chunks)]
    for i, parts in enumerate(parts_list):
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        data: dict[str, Any] = {"candidates": [candidate], "modelVersion": "mock"}
        if i == len(parts_list) - 1:
            candidate["finishReason"] = "STOP"
            data["usageMetadata"] = {
                "promptTokenCount": reply.input_tokens,
                "candidatesTokenCount": reply.output_tokens,
                "totalTokenCount": reply.input_tokens + reply.output_tokens,
            }
        yield _sse(None, data)


def schema_instance(schema: Any) -> Any:
    """A small value that satisfies a JSON schema (for Gemini's schema-shaped side requests)."""
    if not isinstance(schema, dict):
        return "mock"
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    kind = str(kind).lower() if kind else ("object" if "properties" in schema else "string")
    if kind == "object":
        props = schema.get("properties") or {}
        return {name: schema_instance(sub) for name, sub in props.items()}
    if kind == "array":
        return [schema_instance(schema.get("items"))] if schema.get("minItems") else []
    if kind == "integer":
        return int(max(schema.get("minimum", 1), min(schema.get("maximum", 50), 50)))
    if kind == "number":
        return float(max(schema.get("minimum", 1), min(schema.get("maximum", 50), 50)))
    if kind == "boolean":
        return False
    return "mock title"


def gemini_side_answer(body: dict[str, Any]) -> dict[str, Any]:
    """A `:generateContent` answer: JSON text shaped like the request's response schema."""
    config = body.get("generationConfig") or {}
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    text = json.dumps(schema_instance(schema)) if schema else "mock title"
    return {
        "candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 5, "totalTokenCount": 10},
    }


def error_body(api: Api, status: int, message: str) -> dict[str, Any]:
    """The vendor's error JSON for an HTTP status."""
    if api == "anthropic":
        return {"type": "error", "error": {"type": _ANTHROPIC_ERROR_TYPES.get(status, "api_error"), "message": message}}
    if api in ("gemini", "gemini-side"):
        return {"error": {"code": status, "message": message, "status": _GOOGLE_STATUSES.get(status, "UNKNOWN")}}
    kind = _OPENAI_ERROR_TYPES.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": _OPENAI_ERROR_CODES.get(status)}}


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def _route(method: str, path: str) -> Api:
    if method != "POST":
        return "other"
    if path == "/v1/messages":
        return "anthropic"
    if path == "/v1/responses":
        return "responses"
    if path == "/v1/chat/completions":
        return "chat"
    if path.startswith("/v1beta/models/") and path.endswith(":streamGenerateContent"):
        return "gemini"
    if path.startswith("/v1beta/models/") and path.endswith(":generateContent"):
        return "gemini-side"
    return "other"


class _Handler(BaseHTTPRequestHandler):
    mock: MockModelServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:
        # Claude Code probes connectivity with `HEAD /`.
        self._record("other", {})
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self._record("other", {})
        self._json(404, {"error": {"message": f"mock: no route for GET {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: dict[str, Any] = json.loads(raw) if raw else {}
        except ValueError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        api = _route("POST", urlsplit(self.path).path)
        reply = self._record(api, body)
        if api == "gemini-side":
            self._json(200, gemini_side_answer(body))
            return
        if reply is None:
            self._json(404, {"error": {"message": f"mock: no route for POST {self.path}", "type": "not_found"}})
            return
        if reply.status != 200:
            headers = {"retry-after": "0"} if reply.status == 429 else {}
            self._json(reply.status, error_body(api, reply.status, reply.error), headers)
            return
        text = _answer_text(reply, api, body)
        model = str(body.get("model") or "mock-model")
        if api == "anthropic":
            events = anthropic_stream(reply, text, model)
        elif api == "responses":
            events = responses_stream(reply, text, model)
        elif api == "chat":
            events = chat_stream(reply, text, model)
        else:
            events = gemini_stream(reply, text)
        self._stream(reply, list(events))

    def _record(self, api: Api, body: dict[str, Any]) -> Reply | None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        return self.mock._record(Recorded(api, self.command, self.path, headers, body))

    def _json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _stream(self, reply: Reply, events: list[bytes]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        self.mock.streaming.set()
        try:
            if reply.hang:
                self._hold_until_closed()
                return
            for i, data in enumerate(events):
                if i and reply.delay_s and self.mock._stop.wait(reply.delay_s):
                    return
                self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _hold_until_closed(self) -> None:
        """Send nothing more; return when the client closes the connection or the server stops."""
        self.close_connection = True
        while not self.mock._stop.is_set():
            readable, _, _ = select.select([self.connection], [], [], 0.1)
            if readable:
                try:
                    if not self.connection.recv(1024):
                        break
                except OSError:
                    break
        else:
            return
        self.mock.disconnected.set()
