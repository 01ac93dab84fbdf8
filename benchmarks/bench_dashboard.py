"""Benchmark: the web dashboard with 100,000 jobs stored — first paint, filtered queries, SSE latency.

1. The jobs page's first paint in headless Chromium (`first-contentful-paint` from the browser's
   Performance API) against `relay dashboard`, with 100,000 jobs in relay.db (target ≤ 200 ms), and
   the server's own time for the page (TestClient, in process).
2. Filtered queries of the jobs page (by status, by agent, by text) — target ≤ 300 ms each.
3. SSE latency: a job's state changes in the store; the time until the event reaches a client
   streaming `/events/jobs` from `relay dashboard` over HTTP (target ≤ 100 ms, median; p95 reported).
4. The costs page over the same jobs (14 days), informational.
5. The workers page (8 running workers among 2,000 that stopped: every relay process that ran jobs is
   one) and the jobs page filtered by worker: one that ran 1 job in 8, and one that ran 50 of the
   100,000 (the worst case without `m017_jobs_worker_index`: SQLite read far down the whole list).

The 100,000 jobs are written straight into relay.db (one transaction) after relay created its schema.
Run alone: .venv/bin/python benchmarks/bench_dashboard.py
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from _common import RELAY_BIN, Result, bench_env, main_for, median, ms, percentile

NAME = "dashboard"
JOBS = 100_000
PAGE_SAMPLES = 20
QUERY_SAMPLES = 10
SSE_SAMPLES = 30
TARGET_PAINT_MS = 200.0
TARGET_QUERY_MS = 300.0
TARGET_SSE_MS = 100.0
AGENTS = ("claude", "codex", "gemini", "copilot")
RUNNING_WORKERS = 8
STOPPED_WORKERS = 2000
RARE_WORKER = "rare-host:1/00000000"


def _worker_of(i: int) -> str:
    return RARE_WORKER if i % 2000 == 7 else f"host-{i % RUNNING_WORKERS}:1/0000000{i % RUNNING_WORKERS}"


def _seed(db: Path, now: float) -> None:
    rng = random.Random(15)
    rows: list[tuple[Any, ...]] = []
    for i in range(JOBS):
        created = now - rng.random() * 30 * 86400
        agent = AGENTS[i % len(AGENTS)]
        status = "failed" if i % 20 == 0 else "completed"
        result = {"cost_usd": round(rng.random() / 100, 6), "usage": {"input": 1000, "output": 200, "cached": 300}}
        request = {"agent": agent, "prompt": f"task number {i}: refactor module {i % 97}", "cwd": "/work/repo"}
        rows.append(
            (
                f"{i:016x}",
                agent,
                status,
                json.dumps(request),
                f"{agent}-model",
                "/work/repo",
                created,
                created + 1,
                created + 1 + rng.random() * 60,
                json.dumps(result),
                _worker_of(i),
            )
        )
    workers = [
        (f"host-{n}:1/0000000{n}", f"host-{n}:1", f"host-{n}", 1, "running", now) for n in range(RUNNING_WORKERS)
    ]
    workers.append((RARE_WORKER, "rare-host:1", "rare-host", 1, "stopped", now - 86400))
    workers += [(f"gone:{n}/{n:08x}", f"gone:{n}", "gone", n, "stopped", now - n) for n in range(STOPPED_WORKERS)]
    with sqlite3.connect(db) as conn:
        conn.executemany(
            "INSERT INTO jobs (id, agent, kind, status, request, model, cwd, created_at, started_at, finished_at,"
            " result, worker) VALUES (?, ?, 'cli', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        conn.executemany(
            "INSERT INTO workers (id, name, host, pid, slots, lease_s, started_at, heartbeat_at, state, ran)"
            " VALUES (?, ?, ?, ?, 8, 3600, ?6, ?6, ?5, 1)",
            workers,
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError("relay dashboard did not start")


FCP_JS = (
    "() => new Promise(r => { const e = performance.getEntriesByName('first-contentful-paint');"
    " if (e.length) r(e[0].startTime); else new PerformanceObserver(l => r(l.getEntries()[0].startTime))"
    ".observe({type: 'paint', buffered: true}); })"
)
TTFB_JS = "() => performance.getEntriesByType('navigation')[0].responseStart"
# The same browser painting a one-line page: what any page costs on this machine, for comparison.
BASELINE_URL = "data:text/html,<!doctype html><title>x</title><h1>hello</h1>"


def _first_paint(url: str) -> tuple[list[float], list[float], list[float]]:
    """First contentful paint of `url` and of a one-line baseline page (alternating), and `url`'s time to
    its first response byte, in seconds."""
    from playwright.sync_api import sync_playwright

    paints: list[float] = []
    baseline: list[float] = []
    ttfb: list[float] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(headless=True, executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        for _ in range(PAGE_SAMPLES):
            for target, out in ((url, paints), (BASELINE_URL, baseline)):
                page = browser.new_page()
                page.goto(target)
                out.append(float(page.evaluate(FCP_JS)) / 1000)
                if target == url:
                    ttfb.append(float(page.evaluate(TTFB_JS)) / 1000)
                page.close()
        browser.close()
    return paints, baseline, ttfb


def _sse_latency(base: str, db: Path) -> list[float]:
    import httpx2 as httpx

    latencies: list[float] = []
    changed_at: dict[str, float] = {}
    arrived: dict[str, float] = {}
    ready = threading.Event()
    done = threading.Event()

    def listen() -> None:
        with httpx.Client(timeout=None) as client, client.stream("GET", f"{base}/events/jobs") as response:
            ready.set()
            buffer = ""
            for chunk in response.iter_text():
                buffer += chunk
                while "\n\n" in buffer:
                    block, buffer = buffer.split("\n\n", 1)
                    for line in block.split("\n"):
                        if line.startswith("data: "):
                            row = json.loads(line[6:])
                            if row["status"] == "completed" and row["id"] in changed_at:
                                arrived.setdefault(row["id"], time.perf_counter())
                if done.is_set():
                    return

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    ready.wait(30)
    conn = sqlite3.connect(db, isolation_level=None)
    for i in range(SSE_SAMPLES):
        job_id = f"ffff{i:012x}"
        now = time.time()
        conn.execute(
            "INSERT INTO jobs (id, agent, kind, status, request, created_at, started_at) VALUES"
            " (?, 'claude', 'cli', 'running', '{}', ?, ?)",
            (job_id, now, now),
        )
        time.sleep(0.3 + random.random() * 0.2)  # let the feed see it running, at a random phase of its poll
        changed_at[job_id] = time.perf_counter()
        conn.execute("UPDATE jobs SET status='completed', finished_at=? WHERE id=?", (time.time(), job_id))
        deadline = time.monotonic() + 5
        while job_id not in arrived and time.monotonic() < deadline:
            time.sleep(0.001)
        if job_id in arrived:
            latencies.append(arrived[job_id] - changed_at[job_id])
    done.set()
    conn.close()
    return latencies


async def run() -> list[Result]:
    import anyio

    # Playwright's sync API and the TestClient each want a thread without a running event loop.
    return await anyio.to_thread.run_sync(_run)


def _query_result(metric: str, got: list[float]) -> Result:
    return Result(
        NAME,
        metric,
        ms(median(got)),
        "ms",
        f"≤ {TARGET_QUERY_MS:.0f} ms",
        median(got) * 1000 <= TARGET_QUERY_MS,
        {"p95_ms": ms(percentile(got, 95))},
    )


def _run() -> list[Result]:
    from starlette.testclient import TestClient

    from relay.store import Store
    from relay.web import build_app

    with bench_env() as env:
        settings = env.settings()
        Store(settings.db_path).close()
        seed_started = time.perf_counter()
        _seed(settings.db_path, time.time())
        seed_s = time.perf_counter() - seed_started
        results: list[Result] = [Result(NAME, f"seed {JOBS} jobs", round(seed_s, 2), "s")]
        with TestClient(build_app(settings), base_url="http://127.0.0.1:8766") as client:

            def timed(path: str, samples: int) -> list[float]:
                out: list[float] = []
                for _ in range(samples):
                    started = time.perf_counter()
                    assert client.get(path).status_code == 200
                    out.append(time.perf_counter() - started)
                return out

            page = timed("/jobs", PAGE_SAMPLES)
            results.append(Result(NAME, "jobs page, server time, median", ms(median(page)), "ms"))
            for label, path in (
                ("status=failed", "/jobs?status=failed"),
                ("agent=codex", "/jobs?agent=codex"),
                ("text 'module 42'", "/jobs?q=module+42"),
                ("status=failed, page 50", "/jobs?status=failed&page=50"),
                ("worker=one of 8", f"/jobs?worker={quote(_worker_of(0))}"),
                ("worker=one that ran 50 of 100k", f"/jobs?worker={quote(RARE_WORKER)}"),
            ):
                results.append(_query_result(f"filtered query {label}, median", timed(path, QUERY_SAMPLES)))
            for label, path in (("running ones", "/workers"), ("with the stopped ones", "/workers?all=1")):
                metric = f"workers page ({label}; {STOPPED_WORKERS} stopped in the store), median"
                results.append(_query_result(metric, timed(path, QUERY_SAMPLES)))
            costs = timed("/costs", 3)
            results.append(Result(NAME, "costs page (14 days of the 100k jobs), median", ms(median(costs)), "ms"))
        port = _free_port()
        server = subprocess.Popen(
            [str(RELAY_BIN), "dashboard", "--port", str(port)],
            env={**os.environ, **env.env},
            cwd=str(env.work),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait_listening(port)
            paints, baseline, ttfb = _first_paint(f"http://127.0.0.1:{port}/jobs")
            results.append(
                Result(
                    NAME,
                    "jobs page first contentful paint (Chromium), median",
                    ms(median(paints)),
                    "ms",
                    f"≤ {TARGET_PAINT_MS:.0f} ms",
                    median(paints) * 1000 <= TARGET_PAINT_MS,
                    {
                        "p95_ms": ms(percentile(paints, 95)),
                        "one_line_page_median_ms": ms(median(baseline)),
                        "first_byte_median_ms": ms(median(ttfb)),
                    },
                )
            )
            results.append(
                Result(NAME, "first contentful paint of a one-line page (baseline), median", ms(median(baseline)), "ms")
            )
            sse = _sse_latency(f"http://127.0.0.1:{port}", settings.db_path)
            results.append(
                Result(
                    NAME,
                    "SSE: state change in the store -> event at the client, median",
                    ms(median(sse)),
                    "ms",
                    f"≤ {TARGET_SSE_MS:.0f} ms",
                    median(sse) * 1000 <= TARGET_SSE_MS and len(sse) == SSE_SAMPLES,
                    {"p95_ms": ms(percentile(sse, 95)), "max_ms": ms(max(sse)), "received": len(sse)},
                )
            )
        finally:
            server.terminate()
            server.wait(30)
    return results


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main_for(NAME, run))
