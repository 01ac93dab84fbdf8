"""relay's RSS before and after three 10 MB requests over stdio (issue: a 10 MB request must not leave
relay's memory up for good). Run: .venv/bin/python benchmarks/bench_large_request.py [--no-front] [--delegate | --ask]

Starts `relay serve` (stdio, fresh RELAY_HOME), answers initialize/tools/list, then sends three
`job_status` calls whose job_id is 10 MB; prints VmRSS before, after each answer, and 2 s after.
With --delegate the three calls are `delegate(mode="sync")` with a 10 MB prompt to the fake claude
(tests/fakes/claude), so the prompt is stored, audited and run as a job. With --ask they are
`ask(mode="sync")` calls with a 10 MB prompt to a mock Anthropic API on 127.0.0.1 (tests/api/mock_servers.py,
in this process) that answers 10 MB, so both are stored as a conversation thread's turns.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RELAY = REPO / ".venv" / "bin" / "relay"
FAKE_CLAUDE = REPO / "tests" / "fakes" / "claude"
REQUEST_BYTES = 10_000_000
SETTLE_S = 2.0


def main() -> int:
    with ExitStack() as stack:
        return run(stack)


def run(stack: ExitStack) -> int:
    delegate, ask = "--delegate" in sys.argv, "--ask" in sys.argv
    home, work = (Path(stack.enter_context(tempfile.TemporaryDirectory())) for _ in range(2))
    if delegate:
        (home / "config.toml").write_text(f'[agents.claude]\ncommand = "{FAKE_CLAUDE}"\n', encoding="utf-8")
    env = {**os.environ, "RELAY_HOME": str(home)}
    if ask:
        sys.path.insert(0, str(REPO))
        from tests.api.mock_servers import MockServer, Reply

        anthropic = stack.enter_context(MockServer("anthropic"))
        anthropic.script(Reply(text="warm"))  # the warm-up ask's answer, below
        anthropic.default = Reply(text="y" * REQUEST_BYTES)  # one word: streamed as one 10 MB delta
        env |= {"RELAY_ANTHROPIC_BASE_URL": anthropic.base_url, "ANTHROPIC_API_KEY": "sk-ant-bench-0123456789abcdef"}
        # A model relay does not list takes its provider's context window: room for a 10 MB prompt.
        (home / "config.toml").write_text("[providers.anthropic]\ncontext_window = 100000000\n", encoding="utf-8")
    if "--no-front" in sys.argv:
        env["RELAY_STDIO_FRONT"] = "0"
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

    def call(msg_id: int | None, method: str, params: dict[str, Any] | None = None) -> dict[str, Any] | None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        if msg_id is not None:
            msg["id"] = msg_id
        stdin.write((json.dumps(msg) + "\n").encode())
        stdin.flush()
        while msg_id is not None:
            reply = json.loads(stdout.readline())
            if reply.get("id") == msg_id:
                return reply
        return None

    def rss_mb() -> float:
        for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
        return 0.0

    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}
    call(1, "initialize", init)
    call(None, "notifications/initialized")
    call(2, "tools/list")
    call(3, "tools/call", {"name": "status", "arguments": {}})
    if ask:  # the vendor's SDK is imported on the first ask (tens of MB): not part of what is measured
        call(
            4, "tools/call", {"name": "ask", "arguments": {"prompt": "hi", "model": "anthropic:bench", "mode": "sync"}}
        )
    time.sleep(SETTLE_S)
    before = rss_mb()
    for i in range(3):
        if delegate:
            args = {"prompt": "hello " + "x" * REQUEST_BYTES, "mode": "sync", "cwd": str(work)}
            reply = call(10 + i, "tools/call", {"name": "delegate", "arguments": args})
            status = ((reply or {}).get("result") or {}).get("structuredContent", {}).get("status")
            if status != "completed":
                raise SystemExit(f"delegate did not complete: {json.dumps(reply)[:500]}")
        elif ask:
            args = {"prompt": "hello " + "x" * REQUEST_BYTES, "model": "anthropic:bench", "mode": "sync"}
            reply = call(10 + i, "tools/call", {"name": "ask", "arguments": args})
            status = ((reply or {}).get("result") or {}).get("structuredContent", {}).get("status")
            if status != "completed":
                raise SystemExit(f"ask did not complete: {json.dumps(reply)[:500]}")
        else:
            reply = call(10 + i, "tools/call", {"name": "job_status", "arguments": {"job_id": "x" * REQUEST_BYTES}})
        print(f"request {i + 1}: answer {len(json.dumps(reply)):,} bytes, RSS {rss_mb():.1f} MB")
    time.sleep(SETTLE_S)
    after = rss_mb()
    print(
        f"RSS before {before:.1f} MB, {SETTLE_S:.0f} s after three 10 MB requests {after:.1f} MB: +{after - before:.1f} MB"
    )
    stdin.close()
    proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
