"""Benchmark: spawn → `initialize` + `tools/list` answered, as Claude Code and Codex start a stdio server.

Three servers, spawned the same way and alternated in one run: `relay serve` with its stdio
front answering from the snapshot of the previous start; `relay serve` with the front off
(RELAY_STDIO_FRONT=0: the SDK server answers); and the thinnest SDK server (one tool). Timed
from just before the spawn to the `tools/list` answer, over raw JSON-RPC lines with the
2025-11-25 handshake (what the CLIs send). One discarded warm-up each first (it also records
relay's snapshot). Targets: relay ≤ 150 ms median and at least 4× faster than the bare server.

Run alone: .venv/bin/python benchmarks/bench_stdio_front.py [runs]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from _common import (
    BARE_SERVER,
    PYTHON,
    RELAY_BIN,
    Result,
    bench_env,
    kill_descendants,
    main_for,
    median,
    ms,
    percentile,
)

NAME = "stdio_front"
RUNS = 21
TARGET_MS = 150.0
TARGET_SPEEDUP = 4.0
CALL_TIMEOUT_S = 30.0

INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
}


def time_to_tools_list(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, int]:
    """Seconds from spawn to the tools/list answer, and how many tools it listed."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(json.dumps(INIT).encode() + b"\n")
        proc.stdin.flush()
        json.loads(proc.stdout.readline())
        proc.stdin.write(
            b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n{"jsonrpc":"2.0","id":1,"method":"tools/list"}\n'
        )
        proc.stdin.flush()
        while (reply := json.loads(proc.stdout.readline())).get("id") != 1:
            pass
        elapsed = time.perf_counter() - t0
    finally:
        proc.stdin.close()
        try:
            proc.wait(CALL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return elapsed, len(reply["result"]["tools"])


async def run(runs: int = RUNS) -> list[Result]:
    with bench_env() as benv:
        cwd = str(benv.work)
        servers: dict[str, tuple[list[str], dict[str, str]]] = {
            "relay": ([str(RELAY_BIN), "serve"], benv.env),
            "relay_no_front": ([str(RELAY_BIN), "serve"], {**benv.env, "RELAY_STDIO_FRONT": "0"}),
            "bare": ([str(PYTHON), str(BARE_SERVER)], benv.env),
        }
        times: dict[str, list[float]] = {name: [] for name in servers}
        tools: dict[str, int] = {}
        try:
            for argv, env in servers.values():  # warm-up, discarded (relay's records its snapshot)
                time_to_tools_list(argv, env, cwd)
            names = list(servers)
            for i in range(runs):
                for name in names[i % 3 :] + names[: i % 3]:
                    argv, env = servers[name]
                    elapsed, count = time_to_tools_list(argv, env, cwd)
                    times[name].append(elapsed)
                    tools[name] = count
        finally:
            leaked = kill_descendants()
    med = {name: median(values) for name, values in times.items()}
    speedup = med["bare"] / med["relay"]
    details: dict[str, Any] = {
        "runs_each": runs,
        **{f"{name}_ms": [ms(t) for t in values] for name, values in times.items()},
        **{f"{name}_p90_ms": ms(percentile(values, 90)) for name, values in times.items()},
        "tools": tools,
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "leaked_processes_killed": leaked,
    }
    return [
        Result(
            NAME,
            "relay serve (front, warm snapshot) → tools/list (median)",
            ms(med["relay"]),
            "ms",
            target=f"≤ {TARGET_MS:.0f} ms",
            passed=ms(med["relay"]) <= TARGET_MS,
            details=details,
        ),
        Result(NAME, "relay serve, front off → tools/list (median)", ms(med["relay_no_front"]), "ms"),
        Result(NAME, "bare MCPServer → tools/list (median)", ms(med["bare"]), "ms"),
        Result(
            NAME,
            "bare / relay",
            round(speedup, 2),
            "x",
            target=f"≥ {TARGET_SPEEDUP:.0f}x",
            passed=speedup >= TARGET_SPEEDUP,
        ),
    ]


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else RUNS

    async def _go() -> list[Result]:
        return await run(n)

    sys.exit(main_for(NAME, _go))
