"""Benchmark: what an operator's watching costs (docs/scaling.md, "What an operator watches").

1. A `/metrics` scrape with 1,000 and 10,000 queued jobs, on SQLite and on a throwaway PostgreSQL: the store's
   `queue_depth()` alone, a whole exposition that reads it (the cache emptied first), and one that finds it
   cached (every scrape within QUEUE_READ_TTL_S of the last read).
2. The telemetry calls of one job's life (submit, claim, spawn, first output, end) as the job engine makes
   them: tracing off (the default), and tracing on with the OpenTelemetry SDK recording five spans (its
   exporter dropping them: the export itself runs in the SDK's background thread).

Run alone: .venv/bin/python benchmarks/bench_metrics.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _common import Result, main_for, median, ms, pg_cluster

NAME = "metrics"
QUEUES = (1_000, 10_000)
RUNS = 20
JOB_LIVES = 20_000
TRACED_LIVES = 5_000
AGENTS = ("claude", "codex", "gemini")


def _timed(fn: Callable[[], Any], runs: int = RUNS) -> list[float]:
    samples: list[float] = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return samples


def _fill(store: Any, count: int, work: str) -> None:
    for i in range(count):
        labels = ("gpu",) if i % 5 == 0 else ()
        request = {"prompt": f"task number {i}: " + "x" * 200, "labels": list(labels)}
        store.insert_job(f"q{i:08d}", AGENTS[i % 3], "cli", request, None, work, labels=labels)


def _scrapes(backend: str, target: str | Path, home: Path, count: int) -> list[Result]:
    from relay.store import open_store
    from relay.telemetry import metrics
    from relay.telemetry.endpoint import exposition

    store = open_store(target, home=home)
    _fill(store, count, str(home))
    results: list[Result] = []
    depth = _timed(store.queue_depth)
    results.append(
        Result(
            NAME, f"{backend}, {count:,} queued: queue_depth(), median", ms(median(depth)), "ms", details=_stats(depth)
        )
    )
    with metrics.WATCH.watching(lambda: 0, 8, store.queue_depth):

        def read() -> None:
            metrics.WATCH._read = (0.0, None)  # pyright: ignore[reportPrivateUsage]  (the cache emptied)
            exposition("")

        cold = _timed(read)
        exposition("")
        warm = _timed(lambda: exposition(""))
    results.append(
        Result(NAME, f"{backend}, {count:,} queued: a scrape that reads the queue, median", ms(median(cold)), "ms")
    )
    results.append(
        Result(NAME, f"{backend}, {count:,} queued: a scrape within the cache, median", ms(median(warm)), "ms")
    )
    store.close()
    return results


def _stats(samples: Sequence[float]) -> dict[str, Any]:
    return {"runs": len(samples), "min_ms": ms(min(samples)), "max_ms": ms(max(samples))}


def _job_life(stored: dict[str, Any]) -> Callable[[], None]:
    from relay.telemetry import job as telemetry

    def life() -> None:
        submit = telemetry.submitted("j", "claude")
        submit.end()
        request = stored or submit.stored
        telemetry.claimed("j", "claude", request, time.time(), "w")
        telemetry.spawned("j", 1)
        telemetry.output("j")
        telemetry.ended("j", "claude", "completed", None, time.time(), request)

    return life


def _per_job(lives: int, life: Callable[[], None]) -> float:
    started = time.perf_counter()
    for _ in range(lives):
        life()
    return (time.perf_counter() - started) / lives


def _telemetry_calls() -> list[Result]:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    from relay.telemetry import tracing

    off = _per_job(JOB_LIVES, _job_life({}))

    class Dropped(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Dropped()))
    tracing.use(provider)
    try:
        on = _per_job(TRACED_LIVES, _job_life({}))
    finally:
        tracing.stop()
        provider.shutdown()
    return [
        Result(NAME, "one job's telemetry calls, tracing off", off * 1e6, "us", "≤ 100 us", off * 1e6 <= 100),
        Result(NAME, "one job's telemetry calls, tracing on (5 spans)", on * 1e6, "us"),
    ]


async def run() -> list[Result]:
    results: list[Result] = []
    with pg_cluster() as cluster:
        for count in QUEUES:
            with tempfile.TemporaryDirectory() as tmp_dir:
                tmp = Path(tmp_dir)
                results += _scrapes("sqlite", tmp / "relay.db", tmp, count)
                results += _scrapes("postgresql", cluster.new_database(), tmp, count)
    results += _telemetry_calls()
    return results


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main_for(NAME, run))
