"""A 50 MB downstream tool result through relay's gateway: the reply's size, the time, and relay's peak memory.

Run: .venv/bin/python benchmarks/bench_gateway_large_result.py [CHARS] [CAP] [--transport stdio|http|json|websocket]

Starts `relay serve` (stdio, no front, fresh RELAY_HOME, toolsets core,gateway) with a downstream server
recorded as a global one: over stdio the misbehaving test server (tests/gateway/servers/unruly_server.py),
else the toy SDK server with a `big` tool (tests/gateway/servers/large_server.py) over Streamable HTTP
answering in SSE events (`http`), in JSON bodies (`json`), or over WebSocket (`websocket`). Warms it up
with a small call, then calls its `big` tool for CHARS characters (default 50,000,000) with the result
cap at CAP (default relay's, 1,000,000). Prints the reply's bytes, the seconds it took, relay's VmRSS
before and its peak (VmHWM) during the call (reset just before it where Linux allows), and how many
characters job_result pages back.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RELAY = REPO / ".venv" / "bin" / "relay"
UNRULY = REPO / "tests" / "gateway" / "servers" / "unruly_server.py"
LARGE = REPO / "tests" / "gateway" / "servers" / "large_server.py"
TRANSPORTS = ("stdio", "http", "json", "websocket")


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    transport = sys.argv[sys.argv.index("--transport") + 1] if "--transport" in sys.argv else "stdio"
    if transport in args:
        args.remove(transport)
    assert transport in TRANSPORTS, f"--transport is one of {', '.join(TRANSPORTS)}"
    with (
        tempfile.TemporaryDirectory() as home,
        tempfile.TemporaryDirectory() as work,
        downstream(transport, work) as url,
    ):
        return run(Path(home), Path(work), args, transport, url)


@contextlib.contextmanager
def downstream(transport: str, work: str) -> Iterator[str | None]:
    """The large server over HTTP or WebSocket in a process of its own (None for stdio: relay starts it)."""
    if transport == "stdio":
        yield None
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    proc = subprocess.Popen(
        [sys.executable, str(LARGE), transport, str(port)],
        env={**os.environ, "TOY_STATE_DIR": str(work)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            assert proc.poll() is None and time.monotonic() < deadline, "the large server did not start"
            time.sleep(0.05)
        yield f"{'ws' if transport == 'websocket' else 'http'}://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(20)


def run(home: Path, work: Path, args: list[str], transport: str, url: str | None) -> int:
    chars = int(args[0]) if args else 50_000_000
    cap = args[1] if len(args) > 1 else None
    sys.path.insert(0, str(REPO / "src"))
    from relay.gateway import ServerRegistry, make_config

    registry = ServerRegistry(home / "relay.db", home)
    if url is None:
        config = make_config(name="big", transport="stdio", command=sys.executable, args=[str(UNRULY)], scope="")
    else:
        kind = "websocket" if transport == "websocket" else "http"
        config = make_config(name="big", transport=kind, url=url, scope="")
    registry.put(config)
    registry.close()
    env = {**os.environ, "RELAY_HOME": str(home), "RELAY_STDIO_FRONT": "0", "RELAY_TOOLSETS": "core,gateway"}
    if cap is not None:
        env["RELAY_GATEWAY_RESULT_CAP_CHARS"] = cap
    proc = subprocess.Popen(
        [str(RELAY), "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=work,
    )
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    def call(msg_id: int | None, method: str, params: dict[str, Any] | None = None) -> tuple[dict[str, Any], int]:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, **({"params": params} if params else {})}
        if msg_id is not None:
            msg["id"] = msg_id
        stdin.write((json.dumps(msg) + "\n").encode())
        stdin.flush()
        while msg_id is not None:
            line = stdout.readline()
            reply = json.loads(line)
            if reply.get("id") == msg_id:
                return reply, len(line)
        return {}, 0

    def status(key: str) -> float:
        for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) / 1024
        return 0.0

    def big(msg_id: int, n: int) -> tuple[dict[str, Any], int]:
        args = {"server_name": "big", "tool_name": "big", "arguments": {"chars": n}}
        return call(msg_id, "tools/call", {"name": "call_tool", "arguments": args})

    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}
    call(1, "initialize", init)
    call(None, "notifications/initialized")
    big(2, 10)  # starts the server
    before = status("VmRSS")
    with contextlib.suppress(OSError):
        Path(f"/proc/{proc.pid}/clear_refs").write_text("5")  # VmHWM afresh: the call's own peak
    started = time.monotonic()
    reply, size = big(3, chars)
    if "--show" in sys.argv:
        print(json.dumps(reply)[:800])
    took = time.monotonic() - started
    peak = status("VmHWM")
    body = reply["result"]["structuredContent"]
    assert body.get("success"), json.dumps(body)[:500]
    rest = body.get("truncated")
    paged = 0
    if rest:
        offset, n = rest["next_offset"], 10
        while offset is not None:
            page, _ = call(
                n,
                "tools/call",
                {"name": "job_result", "arguments": {"job_id": rest["job_id"], "offset": offset, "limit": 200_000}},
            )
            content = page["result"]["structuredContent"]
            paged += len(content["text"])
            offset, n = content["next_offset"], n + 1
    print(
        f"{transport}, {chars:,} chars: reply {size:,} bytes in {took:.1f} s; relay RSS {before:.1f} MB before, peak {peak:.1f} MB "
        f"(+{peak - before:.1f} MB); kept to page: {bool(rest)}, paged back {paged:,} chars"
    )
    stdin.close()
    proc.wait(20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
