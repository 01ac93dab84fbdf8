"""Mock model servers on 127.0.0.1: the Anthropic Messages API and OpenAI Chat Completions, both SSE.

Each test scripts the replies (text, usage, an HTTP error with headers, or a stream that hangs)
and reads back the requests the server received.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

Kind = Literal["anthropic", "openai"]


@dataclass
class Reply:
    """One scripted answer: a streamed text, or an HTTP error, or a stream that never ends."""

    text: str = "ok"
    usage: tuple[int, int, int] = (10, 5, 0)  # input, output, cached
    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {})
    error_message: str = "scripted error"
    hang: bool = False
    model: str | None = None


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class MockServer:
    """A scripted vendor API; use as a context manager (`with MockServer("openai") as server`)."""

    def __init__(self, kind: Kind) -> None:
        self.kind = kind
        self.replies: deque[Reply] = deque()
        self.default = Reply()
        self.requests: list[Recorded] = []
        self.streaming = threading.Event()  # a hanging reply has sent its first chunk
        self.disconnected = threading.Event()  # ... and then saw the client close the connection
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.extend(replies)

    def _next(self, body: Recorded) -> Reply:
        with self._lock:
            self.requests.append(body)
            return self.replies.popleft() if self.replies else self.default

    @property
    def port(self) -> int:
        assert self._httpd is not None
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        """The base_url the vendor's SDK expects."""
        root = f"http://127.0.0.1:{self.port}"
        return root if self.kind == "anthropic" else f"{root}/v1"

    def __enter__(self) -> MockServer:
        server = self

        class Handler(_Handler):
            mock = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        # A short poll interval lets shutdown() return at once at the end of each test.
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._httpd is not None
        self._httpd.shutdown()
        self._httpd.server_close()


def _sse_anthropic(reply: Reply, model: str) -> Iterator[bytes]:
    def event(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()

    inp, out, cached = reply.usage
    yield event(
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "msg_mock",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": inp, "output_tokens": 1, "cache_read_input_tokens": cached},
            },
        },
    )
    yield event(
        "content_block_start",
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    )
    for piece in _pieces(reply.text):
        yield event(
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}},
        )
    yield event("content_block_stop", {"type": "content_block_stop", "index": 0})
    yield event(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": out},
        },
    )
    yield event("message_stop", {"type": "message_stop"})


def _sse_openai(reply: Reply, model: str, include_usage: bool) -> Iterator[bytes]:
    def chunk(choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> bytes:
        data: dict[str, Any] = {"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1, "model": model}
        data["choices"] = choices
        if usage is not None:
            data["usage"] = usage
        return f"data: {json.dumps(data)}\n\n".encode()

    for i, piece in enumerate(_pieces(reply.text)):
        delta: dict[str, Any] = {"content": piece} | ({"role": "assistant"} if i == 0 else {})
        yield chunk([{"index": 0, "delta": delta, "finish_reason": None}])
    yield chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}])
    if include_usage:
        inp, out, cached = reply.usage
        usage = {
            "prompt_tokens": inp,
            "completion_tokens": out,
            "total_tokens": inp + out,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        yield chunk([], usage)
    yield b"data: [DONE]\n\n"


def _pieces(text: str) -> list[str]:
    words = text.split(" ")
    return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]


class _Handler(BaseHTTPRequestHandler):
    mock: MockServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        body: dict[str, Any] = json.loads(raw or b"{}")
        reply = self.mock._next(Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        if reply.status != 200:
            self._error(reply)
            return
        model = reply.model or str(body.get("model", "mock"))
        if self.mock.kind == "anthropic":
            chunks = list(_sse_anthropic(reply, model))
        else:
            include = bool((body.get("stream_options") or {}).get("include_usage"))
            chunks = list(_sse_openai(reply, model, include))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        if reply.hang:
            self._chunk(chunks[0] + (chunks[1] if len(chunks) > 1 else b""))
            self.wfile.flush()
            self.mock.streaming.set()
            self._wait_for_close()
            return
        for data in chunks:
            self._chunk(data)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")

    def _wait_for_close(self) -> None:
        # The client sends nothing more on this connection; recv returns b"" when it closes it.
        try:
            while self.connection.recv(1024):
                pass
        except OSError:
            pass
        self.mock.disconnected.set()
        self.close_connection = True

    def _error(self, reply: Reply) -> None:
        if self.mock.kind == "anthropic":
            kinds = {
                401: "authentication_error",
                403: "permission_error",
                404: "not_found_error",
                429: "rate_limit_error",
            }
            payload: dict[str, Any] = {
                "type": "error",
                "error": {"type": kinds.get(reply.status, "api_error"), "message": reply.error_message},
            }
        else:
            payload = {"error": {"message": reply.error_message, "type": "invalid_request_error", "code": None}}
        data = json.dumps(payload).encode()
        self.send_response(reply.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for key, value in reply.headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()


@contextmanager
def mock_servers() -> Iterator[tuple[MockServer, MockServer]]:
    with MockServer("anthropic") as anthropic, MockServer("openai") as openai:
        yield anthropic, openai
