"""The stdio front: `initialize` and `tools/list` answered in milliseconds while the MCP server is still loading.

Clients that do not wait for their servers (headless Claude Code, Codex without `required`) ask
their model about a second after launch; relay's full server needs the MCP SDK, whose import
alone costs about a second of CPU. So `relay serve` (stdio) starts this front first, with the
standard library only: a thread reads the client's lines, answers `initialize` and `tools/list`
from a snapshot of what the full server answered last time (kept in RELAY_HOME/cache, keyed on
relay's version, the exposed toolsets and the configuration), and passes every other line, in
order, through a pipe to the full server, which joins when its imports are done. The server is
sent the client's `initialize` (under a private id; an answer that differs replaces the
snapshot's for the next start) so it knows the client,
and then a private `tools/list`: if its answer differs from the snapshot, the snapshot is
replaced and the client gets `notifications/tools/list_changed`. With no snapshot yet (first
run, new version or configuration) the front forwards everything and records the answers.
Every line that is not a JSON-RPC message is answered at once (stdio_wire).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import traceback
from pathlib import Path
from typing import IO, Any

from relay import __version__
from relay.osfiles import private_dup, write_all
from relay.server.stdio_wire import encode, parse_line

PRIVATE = "relay-front-"
INIT_ID = PRIVATE + "initialize"
TOOLS_ID = PRIVATE + "tools"
SNAPSHOT_FILE = "stdio-front.json"
# Settings that change what initialize or tools/list answer.
KEY_ENV = ("RELAY_TOOLSETS", "RELAY_PROFILE", "RELAY_CONFIG", "ANTHROPIC_MODEL", "ANTHROPIC_MODELS")
DISABLE_ENV = "RELAY_STDIO_FRONT"
DEFAULT_SWITCH_INTERVAL_S = sys.getswitchinterval()
STARTUP_SWITCH_INTERVAL_S = 0.0005  # "0" turns the front off (relay serves stdio directly)


def relay_home(environ: dict[str, str]) -> Path:
    if environ.get("RELAY_HOME"):
        return Path(environ["RELAY_HOME"]).expanduser()
    import platformdirs  # only when RELAY_HOME is unset; small

    return Path(platformdirs.user_data_dir("relay", appauthor=False))


def snapshot_key(environ: dict[str, str], home: Path, toolsets: str | None, profile: str | None) -> str:
    """Version, flags, the environment that shapes the tool list, and config.toml's bytes."""
    digest = hashlib.sha256(f"{__version__}\0{toolsets}\0{profile}\0{sys.executable}".encode())
    for name in KEY_ENV:
        digest.update(f"\0{name}={environ.get(name, '')}".encode())
    config = Path(environ["RELAY_CONFIG"]) if environ.get("RELAY_CONFIG") else home / "config.toml"
    try:
        digest.update(config.read_bytes())
    except OSError:
        digest.update(b"\0no-config")
    return digest.hexdigest()[:32]


class Snapshot:
    """The cached answers: {"key", "initialize": {protocolVersion: result}, "tools": result}."""

    def __init__(self, path: Path, key: str) -> None:
        self.path = path
        self.key = key
        self.initialize: dict[str, Any] = {}
        self.tools: dict[str, Any] | None = None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if not isinstance(data, dict):
            return
        stored: dict[str, Any] = data  # pyright: ignore[reportUnknownVariableType]
        if stored.get("key") == key and isinstance(stored.get("initialize"), dict):
            self.initialize = stored["initialize"]
            tools = stored.get("tools")
            self.tools = tools if isinstance(tools, dict) else None  # pyright: ignore[reportUnknownVariableType]

    def save(self) -> None:
        data = {"key": self.key, "initialize": self.initialize, "tools": self.tools}
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(data), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError:
            tmp.unlink(missing_ok=True)  # a cache that cannot be written only costs the next start its head start


class _ServerOut:
    """What the full server writes: private answers are consumed here, the rest goes to the client."""

    def __init__(self, front: Front) -> None:
        self.front = front

    def write(self, data: bytes) -> int:
        self.front.from_server(data)
        return len(data)

    def flush(self) -> None:
        return


class Front:
    """The front's state; `reader`/`writer` are what the full server's stdio transport reads and writes."""

    def __init__(self, wire_in: IO[bytes], wire_out: IO[bytes], snapshot: Snapshot) -> None:
        self.wire_in = wire_in
        self.wire_out = wire_out
        self.snapshot = snapshot
        self._out_lock = threading.Lock()
        self._pipe_lock = threading.Lock()
        read_fd, self._pipe_w = os.pipe()
        self.reader: IO[bytes] = os.fdopen(read_fd, "rb")
        self.writer = _ServerOut(self)
        self.ready = False  # the full server has answered the private initialize
        self.answered_initialize = False
        self.client_protocol: str | None = None
        # ids of the client's initialize / tools/list forwarded while no snapshot existed: record their answers
        self._capture: dict[str, str] = {}
        self._server_spoke = False
        self.failure: str | None = None  # why the reader thread died, if it did

    # the client side ------------------------------------------------------------------------

    def to_client(self, data: bytes) -> None:
        with self._out_lock:
            self.wire_out.write(data)
            self.wire_out.flush()

    def to_server(self, data: bytes) -> None:
        with self._pipe_lock:
            write_all(self._pipe_w, data)

    def read_client(self) -> None:
        """The reader thread: answer what can be answered now, forward the rest in order.

        Nothing a client sends raises here (stdio_wire answers every line); if the thread dies
        anyway, it says why on stderr and keeps the reason in `failure`, so relay exits non-zero.
        """
        try:
            while True:
                line = self.wire_in.readline()
                if not line:
                    break
                self._take(line)
                # Not kept while the next line is awaited: a 10 MB line (and its parse, in _take) would stay for good.
                del line
        except BaseException as exc:
            self.failure = f"{type(exc).__name__}: {exc}"[:500]
            sys.stderr.write("relay: the stdio reader stopped:\n" + "".join(traceback.format_exception(exc)))
            sys.stderr.flush()
        finally:
            os.close(self._pipe_w)  # EOF for the full server

    def _take(self, line: bytes) -> None:
        obj, reply = parse_line(line)
        if reply is not None:
            self.to_client(encode(reply))
        elif obj is not None:
            self._route(obj, line if line.endswith(b"\n") else line + b"\n")

    def _route(self, msg: dict[str, Any], line: bytes) -> None:
        method, request_id = msg.get("method"), msg.get("id")
        if self.ready or request_id is None:
            self.to_server(line)
            if method == "notifications/initialized" and self.answered_initialize:
                self._verify_tools()
            return
        if method == "initialize" and not self.answered_initialize:
            params: dict[str, Any] = msg.get("params") or {}
            version = params.get("protocolVersion")
            cached = self.snapshot.initialize.get(str(version)) if isinstance(version, str) else None
            if cached is not None:
                self.answered_initialize = True
                self.client_protocol = version
                self.to_client(encode({"jsonrpc": "2.0", "id": request_id, "result": cached}))
                self.to_server(encode({**msg, "id": INIT_ID}))
                return
            if isinstance(version, str):
                self._capture[json.dumps(request_id)] = "initialize:" + version
        elif method == "tools/list" and self.answered_initialize and self.snapshot.tools is not None:
            page: dict[str, Any] = msg.get("params") or {}
            if not page.get("cursor"):
                self.to_client(encode({"jsonrpc": "2.0", "id": request_id, "result": self.snapshot.tools}))
                return
        elif method == "tools/list" and self.snapshot.tools is None:
            self._capture[json.dumps(request_id)] = "tools"
        self.to_server(line)

    def _verify_tools(self) -> None:
        self.to_server(encode({"jsonrpc": "2.0", "id": TOOLS_ID, "method": "tools/list", "params": {}}))

    # the server side ------------------------------------------------------------------------

    def from_server(self, data: bytes) -> None:
        if not self._server_spoke:  # the SDK is loaded: back to the default GIL switch interval
            self._server_spoke = True
            sys.setswitchinterval(DEFAULT_SWITCH_INTERVAL_S)
        if data.startswith(b'{"jsonrpc":"2.0","id":"' + PRIVATE.encode()):
            self._private_answer(json.loads(data))
            return
        if self._capture and data.startswith(b'{"jsonrpc":"2.0","id":'):
            self._record(data)
        self.to_client(data)

    def _private_answer(self, msg: dict[str, Any]) -> None:
        if msg.get("id") == INIT_ID:
            self.ready = True
            # The client got the snapshot's answer; if the server's differs (new instructions or
            # capabilities under the same version), the next start answers with the new one.
            answer = msg.get("result")
            version = self.client_protocol
            if isinstance(answer, dict) and version and answer != self.snapshot.initialize.get(version):
                self.snapshot.initialize[version] = answer
                self.snapshot.save()
            return
        result = msg.get("result")
        if msg.get("id") == TOOLS_ID and isinstance(result, dict) and result != self.snapshot.tools:
            self.snapshot.tools = result
            self.snapshot.save()
            self.to_client(encode({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}))

    def _record(self, data: bytes) -> None:
        msg = json.loads(data)
        what = self._capture.pop(json.dumps(msg.get("id")), None)
        result = msg.get("result")
        if what is None or not isinstance(result, dict):
            return
        if what == "tools":
            self.snapshot.tools = result
        else:
            self.snapshot.initialize[what.split(":", 1)[1]] = result
        self.snapshot.save()


def _claim_std_fds() -> tuple[IO[bytes], IO[bytes]]:
    """Take the wire off fd 0/1 (fd 0 reads /dev/null, fd 1 goes to stderr), as the SDK's stdio transport does."""
    sys.stdout.flush()
    wire_in = private_dup(0)
    wire_out = private_dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return os.fdopen(wire_in, "rb", closefd=False), os.fdopen(wire_out, "wb", closefd=False)


def start_front(toolsets: str | None, profile: str | None) -> Front | None:
    """Start answering stdin now (a daemon thread); None when turned off with RELAY_STDIO_FRONT=0."""
    environ = dict(os.environ)
    if environ.get(DISABLE_ENV) == "0":
        return None
    home = relay_home(environ)
    snapshot = Snapshot(home / "cache" / SNAPSHOT_FILE, snapshot_key(environ, home, toolsets, profile))
    wire_in, wire_out = _claim_std_fds()
    front = Front(wire_in, wire_out, snapshot)
    # While the main thread imports the SDK it holds the GIL; a short switch interval lets the
    # front's thread answer within a fraction of a millisecond (back to the default once ready).
    sys.setswitchinterval(STARTUP_SWITCH_INTERVAL_S)
    threading.Thread(target=front.read_client, name="relay-stdio-front", daemon=True).start()
    return front
