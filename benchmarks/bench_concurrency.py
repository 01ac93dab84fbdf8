"""Benchmark 4: 20 concurrent 1-second jobs.

config.toml sets `[jobs] max_concurrent = 20` and `max_concurrent_per_agent = 20` so all 20 may run
at once. 20 `delegate(mode="async")` calls with the prompt `[[fake:sleep=1]]` are issued concurrently
through the in-memory SDK client, then one `job_wait(mode="all")`; the wall time runs from the first
submit to the answer saying all are done. Target: ≤ 1.1 s.

Every job runs benchmarks/fake_claude_sh (sleep 1 s, then the recorded stream-json run), so the
number measures relay's concurrency rather than 20 python start-ups fighting over 2 cores. The
benchmark also reports the python fake's `--version` start-up, one job run directly, and the floor
without relay: 20 fakes started directly at once (Popen) and waited for.

Run alone: .venv/bin/python benchmarks/bench_concurrency.py
On PostgreSQL (a throwaway cluster; results in concurrency_pg.json):
RELAY_BENCH_STORE=postgresql .venv/bin/python benchmarks/bench_concurrency.py
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from _common import FAKE_CLAUDE, BenchEnv, Result, bench_env, bench_store, main_for, median, ms, store_suffix

NAME = "concurrency" + store_suffix()
JOBS = 20
PROMPT = "[[fake:sleep=1]]"
# The jobs run a shell fake that sleeps 1 s and replays the recorded stream (see fake_claude_sh).
FAKE_SH = Path(__file__).resolve().with_name("fake_claude_sh")
TARGET_S = 1.1
CONFIG = f"[jobs]\nmax_concurrent = {JOBS}\nmax_concurrent_per_agent = {JOBS}\n"


def run_fakes_directly(benv: BenchEnv, argv: list[str], count: int) -> float:
    """Start `count` fakes at once (stdout to files), wait for all; seconds."""
    t0 = time.perf_counter()
    procs: list[subprocess.Popen[bytes]] = []
    files = []
    try:
        for i in range(count):
            fh = (benv.root / f"direct-{i}.out").open("wb")
            files.append(fh)
            procs.append(
                subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.DEVNULL, cwd=str(benv.work)
                )
            )
        watchdog = threading.Timer(30, lambda: [p.kill() for p in procs])
        watchdog.start()
        try:
            for p in procs:
                p.wait()
        finally:
            watchdog.cancel()
    finally:
        for fh in files:
            fh.close()
    return time.perf_counter() - t0


async def run() -> list[Result]:
    from relay.server.app import build_server

    with bench_store() as store_url, bench_env(CONFIG, command=FAKE_SH, store_url=store_url) as benv:
        settings = benv.settings()
        assert settings.max_concurrent >= JOBS and settings.max_concurrent_per_agent >= JOBS
        fake_argv = [str(FAKE_SH), "-p", PROMPT, "--output-format", "stream-json", "--verbose"]
        startup = [run_fakes_directly(benv, [str(FAKE_CLAUDE), "--version"], 1) for _ in range(5)]
        one_job = [run_fakes_directly(benv, fake_argv, 1) for _ in range(3)]
        floor = [run_fakes_directly(benv, fake_argv, JOBS) for _ in range(2)]
        async with Client(build_server(settings)) as client:
            # Warm-up: one job through relay (first spawn, database pages).
            warm = await client.call_tool("delegate", {"prompt": "warm-up", "mode": "sync", "cwd": str(benv.work)})
            assert not warm.is_error, warm.structured_content
            ids: list[str] = []
            submit_done: list[float] = []
            with anyio.fail_after(60):
                t0 = time.perf_counter()

                async def submit() -> None:
                    r = await client.call_tool("delegate", {"prompt": PROMPT, "mode": "async", "cwd": str(benv.work)})
                    sc = r.structured_content or {}
                    if r.is_error or "job_id" not in sc:
                        raise RuntimeError(f"delegate failed: {sc}")
                    ids.append(str(sc["job_id"]))
                    submit_done.append(time.perf_counter() - t0)

                async with anyio.create_task_group() as tg:
                    for _ in range(JOBS):
                        tg.start_soon(submit)
                waited = await client.call_tool("job_wait", {"job_ids": ids, "mode": "all", "timeout_s": 30})
                wall = time.perf_counter() - t0
            sc: dict[str, Any] = waited.structured_content or {}
            jobs: list[dict[str, Any]] = sc.get("jobs", [])
            statuses = sorted({str(j["status"]) for j in jobs})
            durations = [int(j["duration_ms"]) for j in jobs if j.get("duration_ms") is not None]
            all_done = bool(sc.get("done")) and statuses == ["completed"] and len(jobs) == JOBS
    details: dict[str, Any] = {
        "jobs": JOBS,
        "config": CONFIG.strip().splitlines(),
        "wall_ms": ms(wall),
        "all_completed": all_done,
        "statuses": statuses,
        "submits_returned_ms": [ms(t) for t in sorted(submit_done)],
        "job_duration_ms_min_median_max": [min(durations), median(durations), max(durations)] if durations else [],
        "fake_startup_version_ms_median": ms(median(startup)),
        "fake_one_sleep1_job_direct_ms_median": ms(median(one_job)),
        "floor_20_fakes_direct_parallel_ms": [ms(t) for t in floor],
    }
    return [
        Result(
            NAME,
            f"{JOBS} async 1 s jobs → job_wait(all)",
            round(wall, 3),
            "s",
            target=f"≤ {TARGET_S} s",
            passed=all_done and wall <= TARGET_S,
            details=details,
        ),
        Result(NAME, f"floor: {JOBS} fakes started directly at once", round(min(floor), 3), "s"),
        Result(NAME, "one fake sleep=1 job run directly", round(median(one_job), 3), "s"),
        Result(NAME, "fake start-up (--version)", ms(median(startup)), "ms"),
    ]


if __name__ == "__main__":
    sys.exit(main_for(NAME, run))
