"""Benchmark 3: per-call overhead of `delegate(mode="sync")`, beside the thinnest SDK server doing the same.

Three sides, measured in one run, calls interleaved (relay, bare, direct, relay, ...) after a warm-up:

- relay: the in-memory SDK client against `build_server(settings)`, one `delegate` call in sync mode.
- bare: the in-memory SDK client against an `MCPServer` with one tool that spawns the same fake with
  the same argv/env/cwd (stdout to a file, `anyio.open_process`, wait), and returns the result text
  of the fake's last line. This is what an MCP server that only spawns the CLI costs.
- direct: `subprocess.Popen` of tests/fakes/claude with exactly the argv, env and cwd relay builds for
  the same request (taken from the engine's own preparation step), stdin /dev/null, stdout to a file.

Overhead = median of the per-round differences (relay − direct, bare − direct). Target: relay's
overhead ≤ 1.2 × the bare server's (p90s reported). The machine's load average is recorded around
the run: wall times swing with it.

Run alone: .venv/bin/python benchmarks/bench_delegate_overhead.py [calls]
On PostgreSQL (a throwaway cluster; results in delegate_overhead_pg.json):
RELAY_BENCH_STORE=postgresql .venv/bin/python benchmarks/bench_delegate_overhead.py
"""

from __future__ import annotations

import cProfile
import io
import json
import pstats
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.server import MCPServer

from _common import (
    FAKE_CLAUDE,
    BenchEnv,
    Result,
    bench_env,
    bench_store,
    main_for,
    median,
    ms,
    percentile,
    store_suffix,
)

NAME = "delegate_overhead" + store_suffix()
CALLS = 40
WARMUP = 5
# relay's per-call overhead against the bare SDK server's, measured in the same run.
TARGET_RATIO = 1.2
PROMPT = "benchmark: reply with the recorded answer"
CALL_TIMEOUT_S = 30.0
RECORDING = Path(__file__).resolve().parents[1] / "tests" / "fakes" / "recordings" / "claude_stream_text.ndjson"


def direct_invocation(benv: BenchEnv) -> Any:
    """The Invocation relay would run for this request (argv, env, cwd), from the engine's preparation."""
    from relay.jobs.engine import Engine, JobRequest

    engine = Engine(benv.settings())
    # the door (admit) is the exact code path submit() uses to build the command line; reusing it keeps
    # the direct run identical to relay's.
    admitted = engine._door.admit(JobRequest(agent="claude", prompt=PROMPT, cwd=str(benv.work)), "direct")  # pyright: ignore[reportPrivateUsage]
    prepared = admitted.prepared
    return prepared.invocation


def bare_server(invocation: Any, out: Path) -> MCPServer[Any]:
    """The thinnest SDK server that runs the fake: spawn, wait, read the result line."""
    server: MCPServer[Any] = MCPServer("bare")

    @server.tool(description="Run the fake agent and return its answer.")
    async def run(prompt: str) -> str:  # pyright: ignore[reportUnusedFunction]
        del prompt  # the argv already carries it
        with out.open("wb") as fh:
            async with await anyio.open_process(
                list(invocation.argv),
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.DEVNULL,
                cwd=invocation.cwd,
                env=dict(invocation.env),
            ) as proc:
                await proc.wait()
        last = out.read_bytes().rstrip().rsplit(b"\n", 1)[-1]
        return str(json.loads(last).get("result", ""))

    return server


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


async def run_relay(
    client: Client, cwd: str, cpu: list[float] | None = None, loop_cpu: list[float] | None = None
) -> float:
    with anyio.fail_after(CALL_TIMEOUT_S):
        c0, l0 = time.process_time(), time.thread_time()
        t0 = time.perf_counter()
        result = await client.call_tool("delegate", {"prompt": PROMPT, "mode": "sync", "cwd": cwd})
        elapsed = time.perf_counter() - t0
        if cpu is not None:
            cpu.append(time.process_time() - c0)
        if loop_cpu is not None:
            loop_cpu.append(time.thread_time() - l0)
    sc = result.structured_content or {}
    if result.is_error or sc.get("status") != "completed":
        raise RuntimeError(f"delegate did not complete: {sc}")
    return elapsed


async def run_bare(client: Client, cpu: list[float] | None = None, loop_cpu: list[float] | None = None) -> float:
    with anyio.fail_after(CALL_TIMEOUT_S):
        c0, l0 = time.process_time(), time.thread_time()
        t0 = time.perf_counter()
        result = await client.call_tool("run", {"prompt": PROMPT})
        elapsed = time.perf_counter() - t0
        if cpu is not None:
            cpu.append(time.process_time() - c0)
        if loop_cpu is not None:
            loop_cpu.append(time.thread_time() - l0)
    if result.is_error:
        raise RuntimeError(f"the bare server failed: {result.content}")
    return elapsed


async def profile_calls(client: Client, cwd: str, calls: int = 10) -> str:
    """cProfile of a few delegate calls in this process (the server runs in-process), top by own time."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        await run_relay(client, cwd)
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(25)
    return buf.getvalue()


def write_cat_fake(path: Path) -> Path:
    """A start-up-free fake `claude` (a shell that cats the recorded stream): ~2 ms to run instead of
    the python fake's ~30–200 ms, so the noise of a python start-up on a loaded machine does not
    swamp a few milliseconds of overhead."""
    path.write_text(f'#!/bin/sh\nexec cat "{RECORDING}"\n', encoding="utf-8")
    path.chmod(0o755)
    return path


async def measure(benv: BenchEnv, calls: int) -> dict[str, Any]:
    """Interleaved rounds of relay, the bare server and a direct run of the fake configured in benv."""
    from relay.server.app import build_server

    invocation = direct_invocation(benv)
    out = benv.root / "direct-stdout"
    bare_out = benv.root / "bare-stdout"
    cwd = str(benv.work)
    relay_t: list[float] = []
    bare_t: list[float] = []
    direct_t: list[float] = []
    # CPU time of this process (client + in-memory server; not the fake) per call: it does not
    # depend on what else the machine runs, unlike wall time.
    relay_cpu: list[float] = []
    bare_cpu: list[float] = []
    direct_cpu: list[float] = []
    # The same on the event loop's thread alone (client and server both run there): the rest of the process's CPU is
    # its other threads' (relay's job folders made ahead in a worker thread: a file's creation costs the kernel from
    # ~15 us to ~0.7 ms on a busy shared disk, and each job's folder holds 7 files).
    relay_loop_cpu: list[float] = []
    bare_loop_cpu: list[float] = []
    async with Client(build_server(benv.settings())) as client, Client(bare_server(invocation, bare_out)) as bare:
        for _ in range(WARMUP):
            await run_relay(client, cwd)
            await run_bare(bare)
            run_direct(invocation, out)
        for i in range(calls):
            # Alternate which server goes first; the direct run comes last in every round.
            if i % 2 == 0:
                relay_t.append(await run_relay(client, cwd, relay_cpu, relay_loop_cpu))
                bare_t.append(await run_bare(bare, bare_cpu, bare_loop_cpu))
            else:
                bare_t.append(await run_bare(bare, bare_cpu, bare_loop_cpu))
                relay_t.append(await run_relay(client, cwd, relay_cpu, relay_loop_cpu))
            direct_t.append(run_direct(invocation, out, direct_cpu))
        profile = await profile_calls(client, cwd)
    relay_over = [r - d for r, d in zip(relay_t, direct_t, strict=True)]
    bare_over = [b - d for b, d in zip(bare_t, direct_t, strict=True)]
    relay_med, bare_med = median(relay_over), median(bare_over)
    # A bare overhead at or below zero (noise) would make the ratio meaningless: floor it at 0.1 ms.
    ratio = relay_med / max(bare_med, 0.0001)
    return {
        "calls_each": calls,
        "warmup_each": WARMUP,
        "argv": list(invocation.argv),
        "direct_stdout_bytes": out.stat().st_size,
        "relay_median_ms": ms(median(relay_t)),
        "relay_p90_ms": ms(percentile(relay_t, 90)),
        "bare_median_ms": ms(median(bare_t)),
        "bare_p90_ms": ms(percentile(bare_t, 90)),
        "direct_median_ms": ms(median(direct_t)),
        "direct_p90_ms": ms(percentile(direct_t, 90)),
        "relay_overhead_median_ms": ms(relay_med),
        "relay_overhead_p90_ms": ms(percentile(relay_over, 90)),
        # On a loaded machine the lower quartile shows the cost that is always paid, beneath the
        # scheduler's noise (each extra process or thread hop on the way waits for a CPU).
        "relay_overhead_p25_ms": ms(percentile(relay_over, 25)),
        "bare_overhead_p25_ms": ms(percentile(bare_over, 25)),
        "bare_overhead_median_ms": ms(bare_med),
        "bare_overhead_p90_ms": ms(percentile(bare_over, 90)),
        "overhead_ratio": round(ratio, 2),
        "relay_process_cpu_median_ms": ms(median(relay_cpu)),
        "bare_process_cpu_median_ms": ms(median(bare_cpu)),
        "direct_process_cpu_median_ms": ms(median(direct_cpu)),
        "relay_loop_thread_cpu_median_ms": ms(median(relay_loop_cpu)),
        "bare_loop_thread_cpu_median_ms": ms(median(bare_loop_cpu)),
        "relay_ms": [ms(t) for t in relay_t],
        "bare_ms": [ms(t) for t in bare_t],
        "direct_ms": [ms(t) for t in direct_t],
        "profile_top_tottime_10_calls": profile,
    }


def results_for(label: str, d: dict[str, Any], *, target: bool) -> list[Result]:
    ratio = float(d["overhead_ratio"])
    return [
        Result(NAME, f"{label}: delegate sync call (median)", d["relay_median_ms"], "ms", details=d),
        Result(NAME, f"{label}: bare SDK server call (median)", d["bare_median_ms"], "ms"),
        Result(NAME, f"{label}: direct run (median)", d["direct_median_ms"], "ms"),
        Result(NAME, f"{label}: relay overhead (median of paired diffs)", d["relay_overhead_median_ms"], "ms"),
        Result(NAME, f"{label}: bare server overhead (median of paired diffs)", d["bare_overhead_median_ms"], "ms"),
        Result(NAME, f"{label}: relay overhead (p25)", d["relay_overhead_p25_ms"], "ms"),
        Result(NAME, f"{label}: bare server overhead (p25)", d["bare_overhead_p25_ms"], "ms"),
        Result(
            NAME,
            f"{label}: relay overhead / bare overhead",
            ratio,
            "x",
            target=f"≤ {TARGET_RATIO:g}x" if target else "",
            passed=ratio <= TARGET_RATIO if target else None,
        ),
        Result(
            NAME,
            f"{label}: server-process CPU per call, relay − bare (median)",
            round(d["relay_process_cpu_median_ms"] - d["bare_process_cpu_median_ms"], 2),
            "ms",
        ),
        Result(
            NAME,
            f"{label}: event loop thread's CPU per call, relay − bare (median)",
            round(d["relay_loop_thread_cpu_median_ms"] - d["bare_loop_thread_cpu_median_ms"], 2),
            "ms",
        ),
    ]


async def run(calls: int = CALLS) -> list[Result]:
    with bench_store() as store_url:
        with bench_env(store_url=store_url) as benv:
            python_fake = await measure(benv, calls)
        with bench_env(store_url=store_url) as benv:
            cat_fake = write_cat_fake(benv.root / "fake_claude_cat")
            text = (benv.home / "config.toml").read_text(encoding="utf-8")
            (benv.home / "config.toml").write_text(text.replace(str(FAKE_CLAUDE), str(cat_fake)), encoding="utf-8")
            sh_fake = await measure(benv, calls)
    # The python fake is the yardstick; the shell fake measures the same thing with less noise.
    return results_for("python fake", python_fake, target=True) + results_for("shell fake", sh_fake, target=True)


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else CALLS

    async def _go() -> list[Result]:
        return await run(n)

    sys.exit(main_for(NAME, _go))
