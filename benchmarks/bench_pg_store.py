"""Benchmark: the job store on PostgreSQL beside SQLite, and how fast a NOTIFY wakes a waiter.

A throwaway PostgreSQL cluster (tests/postgres.py: initdb + pg_ctl on 127.0.0.1, fsync off like the
tests) and a SQLite file in a temporary home. Measured on each backend, RUNS times each:
  - one job's life as the engine writes it: insert_job, mark_running, add_events (a batch of 20),
    finish_job; and get_job of a known id;
  - the wake: a waiter subscribed to a job on its own connection (PgChanges), the job finished by
    another thread through the store; the time from the finish_job call to the waiter running.
    Target: p99 ≤ 50 ms (the issue's "a front's job_wait wakes within 50 ms of a job's end").
  - a 256 MB output appended in 1 MiB pieces and paged back 4 MiB at a time: MB/s each way, and the
    process's peak RSS growth (VmHWM after minus VmRSS before). Target: growth ≤ 30 MB.
  - the claim under contention, as bench_one_queue.py measures it on SQLite: STORM_PROCS processes each
    claim one job at a time from a queue of STORM_JOBS on the PostgreSQL store and finish it at once;
    every claim() timed. Target: p99 ≤ 20 ms, every job claimed once.

Run alone: .venv/bin/python benchmarks/bench_pg_store.py
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from _common import Result, kib, main_for, median, ms, percentile, pg_cluster, proc_status

NAME = "pg_store"
STORM_JOBS = 2000
STORM_PROCS = 4
TARGET_CLAIM_MS = 20.0
RUNS = 300
WAKES = 200
TARGET_WAKE_MS = 50.0
OUTPUT_MB = 256
PAGE_BYTES = 4 << 20
TARGET_GROWTH_MB = 30


def stats(samples: list[float]) -> dict[str, float]:
    return {"median_ms": ms(median(samples)), "p99_ms": ms(percentile(samples, 99)), "runs": len(samples)}


def job_life(store: Any, prefix: str) -> dict[str, list[float]]:
    """Wall seconds of each store call of RUNS jobs' lives, by call."""
    from relay.events import Event

    events = [Event("message", {"text": "x" * 200}) for _ in range(20)]
    calls: dict[str, Callable[[str], Any]] = {
        "insert_job": lambda j: store.insert_job(j, "claude", "cli", {"prompt": "p" * 500}, None, "/w"),
        "mark_running": lambda j: store.mark_running(
            j,
            pid=1,
            pid_start_ticks=2,
            boot_id="b",
            owner_pid=3,
            owner_start_ticks=4,
            deadline_at=None,
            idle_timeout_s=None,
        ),
        "add_events (20)": lambda j: store.add_events(j, 0, events),
        "finish_job": lambda j: store.finish_job(
            j, "completed", exit_code=0, result={"usage": {}}, error=None, session_id="s", model="m"
        ),
        "get_job": lambda j: store.get_job(j),
    }
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for i in range(RUNS):
        job_id = f"{prefix}{i:06d}"
        for name, call in calls.items():
            t0 = time.perf_counter()
            call(job_id)
            samples[name].append(time.perf_counter() - t0)
    return samples


async def wakes(store: Any) -> list[float]:
    """Seconds from a finish_job call in another thread to the subscribed waiter running, WAKES times."""
    latencies: list[float] = []
    async with store.changes() as changes:
        await changes.ready(30)
        for i in range(WAKES):
            job_id = f"wake{i:06d}"
            store.insert_job(job_id, "claude", "cli", {"prompt": "p"}, None, "/w")
            with changes.subscribe(job_id) as sub:
                started: list[float] = []

                def finish(job: str = job_id, mark: list[float] = started) -> None:
                    mark.append(time.perf_counter())
                    store.finish_job(
                        job, "completed", exit_code=0, result=None, error=None, session_id=None, model=None
                    )

                thread = threading.Thread(target=finish)
                thread.start()
                with anyio.fail_after(10):
                    await sub.wait(10)
                woke = time.perf_counter()
                thread.join(10)
                latencies.append(woke - started[0])
    return latencies


def output_round_trip(store: Any) -> dict[str, float]:
    """MB/s appending and paging back OUTPUT_MB, and the peak RSS growth meanwhile."""
    store.insert_job("big", "claude", "cli", {"prompt": "p"}, None, "/w")
    piece = bytes(range(256)) * 4096
    before = _rss_kib()
    _reset_peak()
    t0 = time.perf_counter()
    for _ in range(OUTPUT_MB):
        store.append_output("big", "stdout", piece)
    write_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    offset, total = 0, 1
    while offset < total:
        page, total = store.read_output_page("big", "stdout", offset, PAGE_BYTES)
        offset += len(page)
    read_s = time.perf_counter() - t0
    growth_mb = (_peak_kib() - before) / 1024
    return {"write_mb_s": OUTPUT_MB / write_s, "read_mb_s": OUTPUT_MB / read_s, "growth_mb": growth_mb}


def _rss_kib() -> int:
    return kib(_status()["VmRSS"])


def _peak_kib() -> int:
    return kib(_status()["VmHWM"])


def _status() -> dict[str, str]:
    import os

    return proc_status(os.getpid())


def _reset_peak() -> None:
    """Reset VmHWM to the current RSS (Linux: writing 5 to /proc/self/clear_refs)."""
    Path("/proc/self/clear_refs").write_text("5")


def racing_claimer(url: str, home: str, n: int, out: Any) -> None:
    """One racing claimer (of either store: `url` a PostgreSQL URL or a SQLite file): claim one job, finish it, again, until the queue is empty; its timings and wins."""
    from relay.audit import open_audit
    from relay.store import WorkerInfo, open_store

    store = open_store(url, home=Path(home), audit=open_audit(Path(home), views=False))
    me = WorkerInfo(f"storm/{n}", f"s{n}", "here", n, None, "b", None, (), 1, 60.0)
    store.register_worker(me)
    timings: list[float] = []
    won: list[str] = []
    while True:
        t0 = time.perf_counter()
        got = store.claim(me, free=1, max_total=10_000, per_agent=lambda _: 10_000)
        timings.append(time.perf_counter() - t0)
        if not got:
            break
        job_id, _, epoch = got[0]
        won.append(job_id)
        store.finish_job(
            job_id, "completed", exit_code=0, result={}, error=None, session_id=None, model=None, epoch=epoch
        )
    store.close()
    out.put((timings, won))


def claim_storm(store: Any, url: str, home: Path) -> list[Result]:
    import multiprocessing
    from collections import Counter

    for i in range(STORM_JOBS):
        store.insert_job(f"storm{i:08d}", "claude", "cli", {"prompt": "x"}, None, None)
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=racing_claimer, args=(url, str(home), n, out)) for n in range(STORM_PROCS)]
    for p in procs:
        p.start()
    parts = [out.get() for _ in procs]
    for p in procs:
        p.join()
    timings = [t for ts, _ in parts for t in ts]
    won = Counter(j for _, w in parts for j in w)
    p99 = ms(percentile(timings, 99))
    once = sum(won.values()) == STORM_JOBS and len(won) == STORM_JOBS
    return [
        Result(
            NAME,
            f"postgresql: claim latency p99, {STORM_PROCS} processes racing",
            p99,
            "ms",
            target=f"≤ {TARGET_CLAIM_MS:g} ms, every job claimed once",
            passed=once and p99 <= TARGET_CLAIM_MS,
            details=stats(timings) | {"claims": sum(won.values()), "max_ms": ms(max(timings))},
        )
    ]


async def run() -> list[Result]:
    from relay.audit import open_audit
    from relay.store import open_store

    results: list[Result] = []
    with pg_cluster() as cluster, tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        pg_url = cluster.new_database()
        stores = {
            "sqlite": open_store(home / "relay.db", home=home, audit=open_audit(home, views=False)),
            "postgresql": open_store(pg_url, home=home, audit=open_audit(home, views=False)),
        }
        for backend, store in stores.items():
            for call, samples in job_life(store, backend[:2]).items():
                results.append(
                    Result(NAME, f"{backend}: {call}, p99", ms(percentile(samples, 99)), "ms", details=stats(samples))
                )
        woke = await wakes(stores["postgresql"])
        p99 = ms(percentile(woke, 99))
        results.append(
            Result(
                NAME,
                "postgresql: finish_job in one thread -> subscribed waiter wakes, p99",
                p99,
                "ms",
                target=f"≤ {TARGET_WAKE_MS:g} ms",
                passed=p99 <= TARGET_WAKE_MS,
                details=stats(woke),
            )
        )
        results += await anyio.to_thread.run_sync(claim_storm, stores["postgresql"], pg_url, home)
        for backend, store in stores.items():
            out = output_round_trip(store)
            growth = round(out["growth_mb"], 1)
            results.append(Result(NAME, f"{backend}: {OUTPUT_MB} MB output appended", out["write_mb_s"], "MB/s"))
            results.append(Result(NAME, f"{backend}: {OUTPUT_MB} MB output paged back", out["read_mb_s"], "MB/s"))
            results.append(
                Result(
                    NAME,
                    f"{backend}: peak RSS growth moving {OUTPUT_MB} MB of output",
                    growth,
                    "MB",
                    target=f"≤ {TARGET_GROWTH_MB} MB",
                    passed=growth <= TARGET_GROWTH_MB,
                )
            )
            store.close()
    return results


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main_for(NAME, run))
