"""A test-only Streamable HTTP face over `relay serve` on stdio, so the conformance suite (HTTP only) reaches it.

Each POSTed JSON-RPC message goes to relay's stdin as one line, unchanged but for its id (a
private one, so concurrent HTTP requests cannot collide), and relay's answer comes back with the
caller's id: as JSON, or as an SSE stream for `subscriptions/listen` (the acknowledgement and
every notification relay tags with that subscription, until relay ends it or the caller hangs
up, which becomes `notifications/cancelled`) and for a request with a progress token. Error codes
become the HTTP statuses the 2026-07-28 revision names. One stdio connection serves one era, chosen
by its first request (the SDK's dual-era loop), so the bridge opens it as a 2026-07-28 client does,
with an enveloped `server/discover`; the suite's requests, enveloped or not, come after it. The bridge judges nothing itself: what the
suite checks about HTTP framing (statuses, headers, Origin) is the bridge's, not relay's, and the
tests do not score it on stdio.
"""

from __future__ import annotations

import itertools
import json
import queue
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
ANSWER_TIMEOUT_S = 60
OPENING = {
    "jsonrpc": "2.0",
    "method": "server/discover",
    "params": {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "relay-stdio-bridge", "version": "0"},
        }
    },
}
# JSON-RPC error codes -> the HTTP status the 2026-07-28 transport gives them.
HTTP_STATUS = {-32601: 404, -32600: 400, -32602: 400, -32700: 400, -32020: 400, -32021: 400, -32022: 400}


class _Relay:
    """`relay serve` on stdio: lines in, answers and notifications routed by (private) id."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            encoding="utf-8",
            start_new_session=True,
        )
        self._ids = itertools.count(1_000_000)
        self._lock = threading.Lock()
        self._waiting: dict[int, queue.Queue[dict[str, Any]]] = {}
        self._progress: dict[object, int] = {}
        threading.Thread(target=self._read, daemon=True).start()

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        with self._lock:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()

    def request(self, message: dict[str, Any]) -> tuple[int, queue.Queue[dict[str, Any]]]:
        private = next(self._ids)
        inbox: queue.Queue[dict[str, Any]] = queue.Queue()
        token = ((message.get("params") or {}).get("_meta") or {}).get("progressToken")
        with self._lock:
            self._waiting[private] = inbox
            if token is not None:
                self._progress[token] = private
        self.send({**message, "id": private})
        return private, inbox

    def forget(self, private: int) -> None:
        with self._lock:
            self._waiting.pop(private, None)
            self._progress = {t: p for t, p in self._progress.items() if p != private}

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            params = message.get("params") or {}
            if "id" in message and "method" not in message:
                to = message["id"]
            elif message.get("method") == "notifications/progress":
                to = self._progress.get(params.get("progressToken"))
            else:
                to = (params.get("_meta") or {}).get(SUBSCRIPTION_ID)
            with self._lock:
                inbox = self._waiting.get(to) if isinstance(to, int) else None
            if inbox is not None:
                inbox.put(message)

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def _handler(relay: _Relay) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self._plain(405, b"")

        do_DELETE = do_GET

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                message = json.loads(body)
            except ValueError:
                message = None
            if not isinstance(message, dict):
                error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}
                self._json(400, error)
                return
            if "method" not in message or "id" not in message:
                relay.send(message)
                self._plain(202, b"")
                return
            private, inbox = relay.request(message)
            try:
                streamed = message["method"] == "subscriptions/listen" or "progressToken" in (
                    (message.get("params") or {}).get("_meta") or {}
                )
                if streamed:
                    self._stream(message, private, inbox)
                else:
                    answer = inbox.get(timeout=ANSWER_TIMEOUT_S)
                    code = (answer.get("error") or {}).get("code")
                    status = HTTP_STATUS.get(code, 200) if isinstance(code, int) else 200
                    self._json(status, {**answer, "id": message["id"]})
            finally:
                relay.forget(private)

        def _stream(self, message: dict[str, Any], private: int, inbox: queue.Queue[dict[str, Any]]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            try:
                while True:
                    try:
                        out = inbox.get(timeout=0.5)
                    except queue.Empty:
                        self.wfile.write(b": keep-alive\n\n")
                        self.wfile.flush()
                        continue
                    final = "method" not in out
                    if final:
                        out = {**out, "id": message["id"]}
                    elif SUBSCRIPTION_ID in ((out.get("params") or {}).get("_meta") or {}):
                        params = out["params"]
                        out = {
                            **out,
                            "params": {**params, "_meta": {**params["_meta"], SUBSCRIPTION_ID: message["id"]}},
                        }
                    self.wfile.write(b"event: message\ndata: " + json.dumps(out).encode() + b"\n\n")
                    self.wfile.flush()
                    if final:
                        return
            except OSError:
                cancelled = {"requestId": private, "reason": "the HTTP caller hung up"}
                relay.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancelled})

        def _json(self, status: int, answer: dict[str, Any]) -> None:
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _plain(self, status: int, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@contextmanager
def bridged(argv: list[str], env: dict[str, str]) -> Iterator[str]:
    """Start `argv` (an MCP server on stdio) behind the bridge on 127.0.0.1, yield its URL, stop both."""
    relay = _Relay(argv, env)
    _, opened = relay.request(OPENING)
    answer = opened.get(timeout=ANSWER_TIMEOUT_S)
    assert "result" in answer, f"relay did not open the 2026-07-28 era on stdio: {answer}"
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(relay))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/mcp"
    finally:
        httpd.shutdown()
        httpd.server_close()
        relay.stop()
