"""Benchmark 3: per-call overhead of `delegate(mode="sync")` over running the fake CLI directly.

relay side: the in-memory SDK client against `build_server(settings)`, one `delegate` call in sync mode.
Direct side: `subprocess.run` of tests/fakes/claude with exactly the argv, env and cwd relay builds for
the same request (taken from the engine's own preparation step), stdin /dev/null, stdout to a file.
Calls are interleaved (relay, direct, relay, ...) after a warm-up; the per-call overhead is the paired
difference relay − direct. Target: median overhead ≤ 8 ms (p90 reported).

Run alone: .venv/bin/python benchmarks/bench_delegate_overhead.py [calls]
"""

from __future__ import annotations

import cProfile
import io
import pstats
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from _common import BenchEnv, Result, bench_env, main_for, median, ms, percentile

NAME = "delegate_overhead"
CALLS = 40
WARMUP = 5
TARGET_MS = 8.0
PROMPT = "benchmark: reply with the recorded answer"
CALL_TIMEOUT_S = 30.0


def direct_invocation(benv: BenchEnv) -> Any:
    """The Invocation relay would run for this request (argv, env, cwd), from the engine's preparation."""
    from relay.jobs.engine import Engine, JobRequest

    engine = Engine(benv.settings())
    # _prepare is the exact code path submit() uses to build the command line; reusing it keeps
    # the direct run identical to relay's.
    prepared = engine._prepare(JobRequest(agent="claude", prompt=PROMPT, cwd=str(benv.work)), "direct")  # pyright: ignore[reportPrivateUsage]
    return prepared.invocation


def run_direct(invocation: Any, out: Path, cpu: list[float] | None = None) -> float:
    """One direct run of the fake. No `timeout=` on the wait: with one, CPython polls the child with
    sleeps of up to 50 ms, which would add up to 50 ms to the baseline; a timer kills a hung run instead."""
    c0 = time.process_time()
    t0 = time.perf_counter()
    with out.open("wb") as fh:
        proc = subprocess.Popen(
            list(invocation.argv),
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.DEVNULL,
            env=dict(invocation.env),
            cwd=invocation.cwd,
        )
        watchdog = threading.Timer(CALL_TIMEOUT_S, proc.kill)
        watchdog.start()
        try:
            code = proc.wait()
        finally:
            watchdog.cancel()
    elapsed = time.perf_counter() - t0
    if cpu is not None:
        cpu.append(time.process_time() - c0)
    if code != 0:
        raise RuntimeError(f"the fake exited with {code}")
    return elapsed


async def run_relay(client: Client, cwd: str, cpu: list[float] | None = None) -> float:
    with anyio.fail_after(CALL_TIMEOUT_S):
        c0 = time.process_time()
        t0 = time.perf_counter()
        result = await client.call_tool("delegate", {"prompt": PROMPT, "mode": "sync", "cwd": cwd})
        elapsed = time.perf_counter() - t0
        if cpu is not None:
            cpu.append(time.process_time() - c0)
    sc = result.structured_content or {}
    if result.is_error or sc.get("status") != "completed":
        raise RuntimeError(f"delegate did not complete: {sc}")
    return elapsed


async def profile_calls(client: Client, cwd: str, calls: int = 10) -> str:
    """cProfile of a few delegate calls in this process (the server runs in-process), top by cumulative."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        await run_relay(client, cwd)
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(25)
    return buf.getvalue()


async def run(calls: int = CALLS) -> list[Result]:
    from relay.server.app import build_server

    with bench_env() as benv:
        invocation = direct_invocation(benv)
        out = benv.root / "direct-stdout"
        cwd = str(benv.work)
        relay_t: list[float] = []
        direct_t: list[float] = []
        # CPU time of this process (client + in-memory server + engine; not the fake) per call: it
        # does not depend on what else the machine runs, unlike wall time.
        relay_cpu: list[float] = []
        direct_cpu: list[float] = []
        async with Client(build_server(benv.settings())) as client:
            for _ in range(WARMUP):
                await run_relay(client, cwd)
                run_direct(invocation, out)
            for _ in range(calls):
                relay_t.append(await run_relay(client, cwd, relay_cpu))
                direct_t.append(run_direct(invocation, out, direct_cpu))
            profile = await profile_calls(client, cwd)
        direct_bytes = out.stat().st_size
    diffs = [r - d for r, d in zip(relay_t, direct_t, strict=True)]
    overhead = median(diffs)
    details: dict[str, Any] = {
        "calls_each": calls,
        "warmup_each": WARMUP,
        "argv": list(invocation.argv),
        "direct_stdout_bytes": direct_bytes,
        "relay_median_ms": ms(median(relay_t)),
        "relay_p90_ms": ms(percentile(relay_t, 90)),
        "direct_median_ms": ms(median(direct_t)),
        "direct_p90_ms": ms(percentile(direct_t, 90)),
        "overhead_median_ms": ms(overhead),
        "overhead_p90_ms": ms(percentile(diffs, 90)),
        "overhead_difference_of_medians_ms": ms(median(relay_t) - median(direct_t)),
        "relay_process_cpu_median_ms": ms(median(relay_cpu)),
        "direct_process_cpu_median_ms": ms(median(direct_cpu)),
        "relay_ms": [ms(t) for t in relay_t],
        "direct_ms": [ms(t) for t in direct_t],
        "profile_top_tottime_10_calls": profile,
    }
    return [
        Result(NAME, "delegate sync call (median)", ms(median(relay_t)), "ms", details=details),
        Result(NAME, "direct fake CLI run (median)", ms(median(direct_t)), "ms"),
        Result(
            NAME,
            "overhead per call (median of paired diffs)",
            ms(overhead),
            "ms",
            target=f"≤ {TARGET_MS:g} ms",
            passed=overhead * 1000 <= TARGET_MS,
        ),
        Result(NAME, "overhead per call (p90)", ms(percentile(diffs, 90)), "ms"),
        Result(
            NAME,
            "relay CPU per call in relay's process (median)",
            ms(median(relay_cpu) - median(direct_cpu)),
            "ms",
        ),
    ]


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else CALLS

    async def _go() -> list[Result]:
        return await run(n)

    sys.exit(main_for(NAME, _go))
