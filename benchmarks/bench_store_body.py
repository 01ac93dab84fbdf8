"""Benchmark: what the one store body over two dialects costs on SQLite's hot path (issue 38).

A job's store calls as the engine makes them on SQLite: insert_job, mark_running, add_events (5),
get_job twice, finish_job; then get_job alone. CPU time of this thread (time.thread_time: a loaded
machine's waits for a core left out), median of ROUNDS rounds of JOBS jobs, with the store_call metric
and with it switched off (what the metric itself costs). Run it on two checkouts to compare them:

Run alone: .venv/bin/python benchmarks/bench_store_body.py
Another tree: cd OTHER && PYTHONPATH=OTHER/src /path/to/.venv/bin/python /path/to/bench_store_body.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import Result, main_for, median

NAME = "store_body"
JOBS = 1000
ROUNDS = 5
READS = 20_000


def _rounds(store: Any, start: int) -> tuple[list[float], float]:
    from relay.events import Event

    events = [Event("text", {"t": "x"})] * 5

    def one(i: int) -> None:
        job_id = f"job{i:07d}"
        store.insert_job(job_id, "claude", "cli", {"prompt": "p"}, None, "/w")
        store.mark_running(
            job_id,
            pid=1,
            pid_start_ticks=1,
            boot_id="b",
            owner_pid=1,
            owner_start_ticks=1,
            deadline_at=None,
            idle_timeout_s=None,
        )
        store.add_events(job_id, 0, events)
        store.get_job(job_id)
        store.get_job(job_id)
        store.finish_job(job_id, "completed", exit_code=0, result={"a": 1}, error=None, session_id=None, model=None)

    for i in range(start, start + 200):  # warm-up
        one(i)
    lives: list[float] = []
    for r in range(ROUNDS):
        t0 = time.thread_time()
        first = start + 200 + r * JOBS
        for i in range(first, first + JOBS):
            one(i)
        lives.append((time.thread_time() - t0) / JOBS)
    t0 = time.thread_time()
    for _ in range(READS):
        store.get_job(f"job{start:07d}")
    return lives, (time.thread_time() - t0) / READS


async def run() -> list[Result]:
    from relay.store import open_store

    home = Path(tempfile.mkdtemp(prefix="relay-bench-body-"))
    store = open_store(home / "relay.db", home=home)
    lives, read = _rounds(store, 0)
    dialect = sys.modules.get("relay.store.dialect")
    results = [
        Result(NAME, "a job's 7 store calls on SQLite, CPU (median)", round(median(lives) * 1e6, 1), "us"),
        Result(NAME, "get_job on SQLite, CPU", round(read * 1e6, 2), "us"),
    ]
    if dialect is not None:  # the one body: the same again with the store_call metric off
        dialect.store_call = lambda *_: None  # pyright: ignore[reportAttributeAccessIssue]
        lives, read = _rounds(store, 10_000_000)
        results += [
            Result(
                NAME, "a job's 7 store calls, store_call metric off, CPU (median)", round(median(lives) * 1e6, 1), "us"
            ),
            Result(NAME, "get_job, store_call metric off, CPU", round(read * 1e6, 2), "us"),
        ]
    store.close()
    return results


if __name__ == "__main__":
    sys.exit(main_for(NAME, run))
