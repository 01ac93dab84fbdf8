"""Benchmark: job lookups and lists at 100k stored jobs.

A store of 100,000 jobs (realistic request/result JSON, statuses and agents mixed, 1 job per
second of creation time) is built directly in SQLite (setup, not measured), then timed through
the engine's query API, as the MCP tools and the CLI call it:
  - a full id (the primary key), a unique 8-character id prefix, an unknown id (JOB_NOT_FOUND);
  - `job_list` with limit=500: newest first, no filter; with status=completed; the third page by cursor.
Target: p99 ≤ 10 ms for the id-prefix lookup and for `job_list limit=500`.

Run alone: .venv/bin/python benchmarks/bench_store.py
"""

from __future__ import annotations

import contextlib
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import Result, bench_env, main_for, median, ms, percentile

NAME = "store"
JOBS = 100_000
RUNS = 300
TARGET_MS = 10.0
SEED = 20261123


def fill(db_path: Path) -> list[str]:
    """Insert JOBS jobs in one transaction; returns their ids."""
    import sqlite3

    rng = random.Random(SEED)
    ids = [f"{rng.getrandbits(64):016x}" for _ in range(JOBS)]
    start = time.time() - JOBS
    statuses = ["completed"] * 7 + ["failed", "cancelled", "timed_out"]
    rows: list[tuple[Any, ...]] = []
    for i, job_id in enumerate(ids):
        request = {"agent": "claude", "prompt": f"refactor module {i} " + "x" * 200, "cwd": "/work/project"}
        result = {"usage": {"input": 1200, "output": 300, "cached": 0}, "cost_usd": 0.0123, "files_changed": []}
        rows.append(
            (
                job_id,
                rng.choice(["claude", "codex", "gemini"]),
                "cli",
                rng.choice(statuses),
                json.dumps(request),
                "sonnet",
                "/work/project",
                start + i,
                start + i + 1,
                start + i + 30,
                json.dumps(result),
            )
        )
    db = sqlite3.connect(db_path)
    with db:
        db.executemany(
            "INSERT INTO jobs (id, agent, kind, status, request, model, cwd, created_at, started_at, finished_at,"
            " result) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            rows,
        )
    db.execute("ANALYZE")
    db.close()
    return ids


def timed(fn: Callable[[], Any]) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of RUNS calls (CPU time leaves out waits for a core on a loaded machine)."""
    for _ in range(10):
        fn()
    wall: list[float] = []
    cpu: list[float] = []
    for _ in range(RUNS):
        t0, c0 = time.perf_counter(), time.thread_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
    return wall, cpu


def stats(wall: list[float], cpu: list[float]) -> dict[str, float]:
    return {
        "median_ms": ms(median(wall)),
        "p99_ms": ms(percentile(wall, 99)),
        "cpu_median_ms": ms(median(cpu)),
        "cpu_p99_ms": ms(percentile(cpu, 99)),
        "runs": len(wall),
    }


async def run() -> list[Result]:
    from relay.errors import RelayError
    from relay.jobs.engine import Engine, job_cursor
    from relay.store import Store

    with bench_env() as env:
        settings = env.settings()
        Store(settings.db_path).close()  # the schema, with every migration
        t0 = time.perf_counter()
        ids = fill(settings.db_path)
        fill_s = time.perf_counter() - t0
        engine = Engine(settings)
        rng = random.Random(SEED + 1)
        picks = [rng.choice(ids) for _ in range(RUNS + 10)]
        it = iter(picks * 2)

        def by_id() -> None:
            engine.get(next(it))

        def by_prefix() -> None:
            engine.get(next(it)[:8])

        def unknown() -> None:
            with contextlib.suppress(RelayError):
                engine.get("ffffffff0000aaaa")

        def list_500() -> None:
            assert len(engine.list(limit=500)) == 500

        def list_completed() -> None:
            assert len(engine.list(statuses=("completed",), limit=500)) == 500

        page2 = engine.list(limit=500)
        cursor = job_cursor(engine.list(limit=500, cursor=job_cursor(page2[-1]))[-1])

        def list_page3() -> None:
            assert len(engine.list(limit=500, cursor=cursor)) == 500

        measured = {
            "id lookup": timed(by_id),
            "id-prefix lookup (8 chars)": timed(by_prefix),
            "unknown id (JOB_NOT_FOUND)": timed(unknown),
            "job_list limit=500": timed(list_500),
            "job_list status=completed limit=500": timed(list_completed),
            "job_list limit=500, third page by cursor": timed(list_page3),
        }
    targeted = ("id-prefix lookup (8 chars)", "unknown id (JOB_NOT_FOUND)", "job_list limit=500")
    results: list[Result] = []
    for metric, (samples, cpu) in measured.items():
        p99 = ms(percentile(samples, 99))
        if metric in targeted:
            results.append(
                Result(
                    NAME,
                    f"{metric} at 100k jobs, p99",
                    p99,
                    "ms",
                    target=f"≤ {TARGET_MS:g} ms",
                    passed=p99 <= TARGET_MS,
                    details=stats(samples, cpu),
                )
            )
        else:
            results.append(Result(NAME, f"{metric} at 100k jobs, p99", p99, "ms", details=stats(samples, cpu)))
    results.append(Result(NAME, "building the 100k-job store (setup)", round(fill_s * 1000), "ms"))
    return results


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main_for(NAME, run))
