"""Benchmark 1: cold start of `relay serve` (stdio) until `tools/list` is answered, vs. a bare MCPServer.

Both servers are spawned the same way, through the SDK client over stdio, alternating, and timed from
just before the spawn to the `tools/list` answer. One discarded warm-up run each first (page cache,
relay's database creation). Target: relay's median within 15% of the bare server's median.

Also records `python -X importtime` of both start-up paths and lists what relay imports beyond the SDK.

Run alone: .venv/bin/python benchmarks/bench_cold_start.py [runs]
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from _common import (
    BARE_SERVER,
    PYTHON,
    RELAY_BIN,
    BenchEnv,
    Result,
    bench_env,
    descendants,
    kill_descendants,
    main_for,
    median,
    ms,
    percentile,
)

NAME = "cold_start"
RUNS = 11
TARGET_RATIO = 1.15
CALL_TIMEOUT_S = 30.0

RELAY_IMPORTS = "import relay.cli.main; import relay.server.run; import relay.server.app"
BARE_IMPORTS = "from mcp.server import MCPServer"


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process so far (clock-tick resolution)."""
    with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def time_to_tools_list(params: StdioServerParameters) -> tuple[float, int, float]:
    """Seconds from spawning the server to the `tools/list` answer; the number of tools; and the CPU
    seconds the server process used to get there (insensitive to other load on the machine)."""
    with anyio.fail_after(CALL_TIMEOUT_S):
        t0 = time.perf_counter()
        async with Client(params, read_timeout_seconds=CALL_TIMEOUT_S) as client:
            tools = await client.list_tools()
            elapsed = time.perf_counter() - t0
            children = [p for p in descendants(os.getpid()) if _ppid(p) == os.getpid()]
            cpu = sum(cpu_seconds(p) for p in children)
    return elapsed, len(tools.tools), cpu


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return -1


def importtime(code: str, env: dict[str, str], cwd: str) -> dict[str, tuple[int, int]]:
    """module -> (self µs, cumulative µs) from `python -X importtime -c code`."""
    proc = subprocess.run(
        [str(PYTHON), "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
        check=True,
    )
    out: dict[str, tuple[int, int]] = {}
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line)
        if m:
            out[m.group(4)] = (int(m.group(1)), int(m.group(2)))
    return out


def import_analysis(benv: BenchEnv, rounds: int = 3) -> dict[str, Any]:
    """What relay's start-up imports beyond the bare SDK server, fastest of `rounds` runs per module."""
    env = benv.env
    relay_runs = [importtime(RELAY_IMPORTS, env, str(benv.work)) for _ in range(rounds)]
    bare_runs = [importtime(BARE_IMPORTS, env, str(benv.work)) for _ in range(rounds)]

    def best(runs: list[dict[str, tuple[int, int]]]) -> dict[str, tuple[int, int]]:
        mods: dict[str, tuple[int, int]] = {}
        for run in runs:
            for mod, (self_us, cum_us) in run.items():
                prev = mods.get(mod)
                mods[mod] = (min(prev[0], self_us), min(prev[1], cum_us)) if prev else (self_us, cum_us)
        return mods

    relay, bare = best(relay_runs), best(bare_runs)
    extra = {m: v for m, v in relay.items() if m not in bare}
    by_package: dict[str, int] = defaultdict(int)
    for mod, (self_us, _) in extra.items():
        by_package[mod.split(".")[0]] += self_us
    top_packages = sorted(by_package.items(), key=lambda kv: -kv[1])[:12]
    relay_modules = sorted(((m, cum) for m, (_, cum) in relay.items() if m.startswith("relay")), key=lambda kv: -kv[1])[
        :12
    ]
    extra_top = sorted(((m, cum) for m, (_, cum) in extra.items()), key=lambda kv: -kv[1])[:15]
    return {
        "relay_total_self_ms": round(sum(s for s, _ in relay.values()) / 1000, 1),
        "bare_total_self_ms": round(sum(s for s, _ in bare.values()) / 1000, 1),
        "extra_modules": len(extra),
        "extra_self_ms": round(sum(s for s, _ in extra.values()) / 1000, 1),
        "extra_by_top_package_ms": {k: round(v / 1000, 1) for k, v in top_packages},
        "extra_top_cumulative_ms": {k: round(v / 1000, 1) for k, v in extra_top},
        "relay_modules_cumulative_ms": {k: round(v / 1000, 1) for k, v in relay_modules},
    }


async def run(runs: int = RUNS) -> list[Result]:
    with bench_env() as benv:
        relay = StdioServerParameters(command=str(RELAY_BIN), args=["serve"], env=benv.env, cwd=str(benv.work))
        bare = StdioServerParameters(command=str(PYTHON), args=[str(BARE_SERVER)], env=benv.env, cwd=str(benv.work))
        times: dict[str, list[float]] = {"relay": [], "bare": []}
        cpu: dict[str, list[float]] = {"relay": [], "bare": []}
        tools: dict[str, int] = {}
        try:
            for params in (relay, bare):  # warm-up, discarded
                await time_to_tools_list(params)
            for i in range(runs):
                order = [("relay", relay), ("bare", bare)] if i % 2 == 0 else [("bare", bare), ("relay", relay)]
                for name, params in order:
                    elapsed, count, used = await time_to_tools_list(params)
                    times[name].append(elapsed)
                    cpu[name].append(used)
                    tools[name] = count
        finally:
            leaked = kill_descendants()
        analysis = import_analysis(benv)
    relay_med, bare_med = median(times["relay"]), median(times["bare"])
    ratio = relay_med / bare_med
    details: dict[str, Any] = {
        "runs_each": runs,
        "relay_ms": [ms(t) for t in times["relay"]],
        "bare_ms": [ms(t) for t in times["bare"]],
        "relay_median_ms": ms(relay_med),
        "bare_median_ms": ms(bare_med),
        "relay_p90_ms": ms(percentile(times["relay"], 90)),
        "bare_p90_ms": ms(percentile(times["bare"], 90)),
        "relay_min_ms": ms(min(times["relay"])),
        "bare_min_ms": ms(min(times["bare"])),
        "ratio": round(ratio, 3),
        "relay_cpu_ms": [ms(t) for t in cpu["relay"]],
        "bare_cpu_ms": [ms(t) for t in cpu["bare"]],
        "tools": tools,
        "leaked_processes_killed": leaked,
        "imports": analysis,
    }
    return [
        Result(NAME, "relay serve → tools/list (median)", ms(relay_med), "ms", details=details),
        Result(NAME, "bare MCPServer → tools/list (median)", ms(bare_med), "ms"),
        Result(NAME, "server CPU to tools/list: relay (median)", ms(median(cpu["relay"])), "ms"),
        Result(NAME, "server CPU to tools/list: bare (median)", ms(median(cpu["bare"])), "ms"),
        Result(
            NAME,
            "relay / bare",
            round(ratio, 3),
            "x",
            target=f"≤ {TARGET_RATIO:.2f}x",
            passed=ratio <= TARGET_RATIO,
        ),
    ]


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else RUNS

    async def _go() -> list[Result]:
        return await run(n)

    sys.exit(main_for(NAME, _go))
