"""A 50 MB downstream tool result through relay's gateway: the reply's size, the time, and relay's peak memory.

Run: .venv/bin/python benchmarks/bench_gateway_large_result.py [CHARS] [CAP]

Starts `relay serve` (stdio, no front, fresh RELAY_HOME, toolsets core,gateway) with the misbehaving test
server (tests/gateway/servers/unruly_server.py) recorded as a global downstream server, warms it up with a
small call, then calls its `big` tool for CHARS characters (default 50,000,000) with the result cap at CAP
(default relay's, 1,000,000). Prints the reply's bytes, the seconds it took, relay's VmRSS before and its
peak (VmHWM) during the call, and how many characters job_result pages back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RELAY = REPO / ".venv" / "bin" / "relay"
UNRULY = REPO / "tests" / "gateway" / "servers" / "unruly_server.py"


def main() -> int:
    with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as work:
        return run(Path(home), Path(work))


def run(home: Path, work: Path) -> int:
    chars = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000_000
    cap = sys.argv[2] if len(sys.argv) > 2 else None
    sys.path.insert(0, str(REPO / "src"))
    from relay.gateway import ServerRegistry, make_config

    registry = ServerRegistry(home / "relay.db", home)
    registry.put(make_config(name="unruly", transport="stdio", command=sys.executable, args=[str(UNRULY)], scope=""))
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
        args = {"server_name": "unruly", "tool_name": "big", "arguments": {"chars": n}}
        return call(msg_id, "tools/call", {"name": "call_tool", "arguments": args})

    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}
    call(1, "initialize", init)
    call(None, "notifications/initialized")
    big(2, 10)  # starts the server
    before = status("VmRSS")
    started = time.monotonic()
    reply, size = big(3, chars)
    if "--show" in sys.argv:
        print(json.dumps(reply)[:800])
    took = time.monotonic() - started
    peak = status("VmHWM")
    body = reply["result"]["structuredContent"]
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
        f"{chars:,} chars: reply {size:,} bytes in {took:.1f} s; relay RSS {before:.1f} MB before, peak {peak:.1f} MB "
        f"(+{peak - before:.1f} MB); kept to page: {bool(rest)}, paged back {paged:,} chars"
    )
    stdin.close()
    proc.wait(20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
