"""Raw JSON-RPC against a real `relay serve`, as a misbehaving client sends it: over stdio and Streamable HTTP.

Both clients keep every answer they get by id, and everything that was not a JSON-RPC message, so a
test can say "exactly one answer for this id, none for that notification, nothing else on stdout".
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx2 as httpx
import psutil

from tests.reliability.conftest import RELAY, free_port, relay_env

PROTOCOL = "2025-06-18"
INIT: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": "init",
    "method": "initialize",
    "params": {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "wire", "version": "1"}},
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
START_TIMEOUT_S = 120  # relay's first answer, on a loaded 2-core machine
ANSWER_TIMEOUT_S = 30


def line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def id_key(value: Any) -> str:
    """Answers are filed under their id as JSON text ("1" and 1 are different ids)."""
    return json.dumps(value, sort_keys=True)


class Answers:
    """Every message relay wrote, filed by id; what was not a JSON-RPC message is kept apart."""

    def __init__(self) -> None:
        self.by_id: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.other: list[dict[str, Any]] = []  # notifications and requests from relay
        self.garbage: list[bytes] = []
        self._arrived = threading.Condition()

    def take(self, raw: bytes) -> None:
        try:
            msg = json.loads(raw)
        except ValueError:
            msg = None
        with self._arrived:
            if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
                self.garbage.append(raw[:500])
            elif "result" in msg or "error" in msg:
                self.by_id[id_key(msg.get("id"))].append(msg)  # pyright: ignore[reportUnknownArgumentType]
            else:
                self.other.append(msg)  # pyright: ignore[reportUnknownArgumentType]
            self._arrived.notify_all()

    def wait(self, request_id: Any, timeout: float = ANSWER_TIMEOUT_S) -> dict[str, Any]:
        """The first answer to `request_id`, waiting for it (bounded)."""
        key = id_key(request_id)
        with self._arrived:
            if not self._arrived.wait_for(lambda: self.by_id.get(key), timeout):
                raise TimeoutError(f"no answer for id {request_id!r} within {timeout} s")
            return self.by_id[key][0]

    def wait_count(self, key: str, count: int, timeout: float = ANSWER_TIMEOUT_S) -> None:
        """Wait (bounded) until `count` answers carry the id whose `id_key` is `key`."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self.by_id.get(key, [])) >= count, timeout):
                raise TimeoutError(f"{len(self.by_id.get(key, []))} answers for id {key}, not {count}, in {timeout} s")

    def count(self, request_id: Any) -> int:
        return self.count_key(id_key(request_id))

    def count_key(self, key: str) -> int:
        with self._arrived:
            return len(self.by_id.get(key, []))


class StdioRelay:
    """`relay serve` over stdio; a thread files every stdout line in `answers`."""

    def __init__(self, home: Path, cwd: Path, *args: str, **env: str) -> None:
        self.proc = subprocess.Popen(
            [RELAY, "serve", *args],
            env=relay_env(home, **env),
            cwd=str(cwd),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.answers = Answers()
        self.stderr = bytearray()
        self._lock = threading.Lock()
        self._out = threading.Thread(target=self._read_out, daemon=True)
        self._out.start()
        threading.Thread(target=self._read_err, daemon=True).start()
        self.send(line(INIT))
        self.answers.wait("init", START_TIMEOUT_S)
        self.send(line(INITIALIZED))

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.answers.take(raw)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self.stderr += raw[:2000]

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        with self._lock:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss(self) -> int:
        """relay's resident memory (bytes)."""
        return psutil.Process(self.proc.pid).memory_info().rss

    def close(self) -> int:
        """Close stdin (a clean end for relay) and return its exit status."""
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.close()
        try:
            status = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            status = self.proc.wait(10)
        self._out.join(30)  # everything relay wrote is filed before anyone looks
        return status


class HttpRelay:
    """`relay serve --http` on a free loopback port, with one initialized MCP session."""

    def __init__(self, home: Path, cwd: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc = subprocess.Popen(
            [RELAY, "serve", "--http", "--port", str(self.port)],
            env=relay_env(home),
            cwd=str(cwd),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.client = httpx.Client(timeout=ANSWER_TIMEOUT_S)
        self._stopped = threading.Event()
        self.headers = dict(HEADERS)
        self._connect()
        status, answers = self.post(line(INIT))
        assert status == 200 and answers[0]["id"] == "init", (status, answers)
        self.headers["mcp-protocol-version"] = PROTOCOL
        self.post(line(INITIALIZED))

    def _connect(self) -> None:
        """Wait (bounded) until relay listens: a connection attempt every 50 ms."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"relay serve --http exited with {self.proc.returncode}") from None
                self._stopped.wait(0.05)
        raise TimeoutError("relay serve --http did not listen")

    def post(self, body: bytes) -> tuple[int, list[dict[str, Any]]]:
        """POST one body; (status, the JSON-RPC messages of the answer, from JSON or from the SSE stream)."""
        response = self.client.post(self.url, content=body, headers=self.headers)
        session = response.headers.get("mcp-session-id")
        if session and "mcp-session-id" not in self.headers:
            self.headers["mcp-session-id"] = session
        kind = response.headers.get("content-type", "")
        text = response.text
        if kind.startswith("text/event-stream"):
            # Split on "\n" only: an answer may carry U+0085 or U+2028 unescaped, which str.splitlines splits on.
            events = [d.rstrip("\r") for d in text.split("\n")]
            return response.status_code, [json.loads(d[5:]) for d in events if d.startswith("data:")]
        if kind.startswith("application/json") and text.strip():
            return response.status_code, [json.loads(text)]
        return response.status_code, []

    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss(self) -> int:
        return psutil.Process(self.proc.pid).memory_info().rss

    def close(self) -> None:
        self.client.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
