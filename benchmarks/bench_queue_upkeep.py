"""Benchmark: the reads of the queue's upkeep, on SQLite and on a throwaway PostgreSQL.

1. The jobs list filtered by worker (the dashboard's `/jobs?worker=`), at 100,000 final jobs run by 8
   workers, for a worker that ran 50 of them (the worst case: its jobs are spread over the whole list)
   and for one that ran 1 in 8, with and without `m017_jobs_worker_index` (the index dropped for the "without" runs, then made again).
   The query is the dashboard's own (`relay.web._queries.job_ids_sql`, one page of 50).
2. One `Engine.recover()` (every heartbeat calls it) on a store of 10,000 final jobs and 1,000 running
   ones claimed by 20 workers of another host (alive: their leases run far ahead), plus 200 stopped workers.
   It adopts nothing there: what it costs is what it reads.

Run alone: .venv/bin/python benchmarks/bench_queue_upkeep.py
"""

from __future__ import annotations

import json
import random
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import Result, bench_env, main_for, median, ms, percentile, pg_cluster

NAME = "queue_upkeep"
FILTER_JOBS = 100_000
FILTER_RUNS = 50
RARE_WORKER = "rare-host:1/00000000"
BUSY_WORKER = "host-0:1/00000000"
FINAL_JOBS = 10_000
ACTIVE_JOBS = 1_000
OTHER_WORKERS = 20
STOPPED_WORKERS = 200
RECOVER_RUNS = 50
JOB_COLUMNS = (
    "id, agent, kind, status, request, model, cwd, created_at, started_at, finished_at, result, worker,"
    " owner_pid, owner_start_ticks, lease_until, epoch"
)
WORKER_COLUMNS = "id, name, host, pid, boot_id, slots, lease_s, started_at, heartbeat_at, state, ran"


def _filter_jobs(now: float) -> list[tuple[Any, ...]]:
    """FILTER_JOBS final jobs over 30 days; RARE_WORKER ran 1 in 2,000 of them, 8 others the rest."""
    rng = random.Random(17)
    rows: list[tuple[Any, ...]] = []
    for i in range(FILTER_JOBS):
        created = now - rng.random() * 30 * 86400
        worker = RARE_WORKER if i % 2000 == 7 else f"host-{i % 8}:1/0000000{i % 8}"
        request = {"agent": "claude", "prompt": f"task number {i}", "cwd": "/work/repo"}
        rows.append(_job(f"{i:016x}", "completed", request, created, worker, None, None))
    return rows


def _job(
    job_id: str,
    status: str,
    request: dict[str, Any],
    created: float,
    worker: str,
    owner: int | None,
    lease: float | None,
) -> tuple[Any, ...]:
    final = status != "running"
    result = json.dumps({"cost_usd": 0.01, "usage": {"input": 1000, "output": 200}}) if final else None
    return (
        job_id,
        "claude",
        "cli",
        status,
        json.dumps(request),
        "sonnet",
        "/work/repo",
        created,
        created + 1,
        created + 30 if final else None,
        result,
        worker,
        owner,
        None,
        lease,
        1,
    )


def _upkeep_rows(now: float) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """FINAL_JOBS final jobs and ACTIVE_JOBS running ones claimed by live workers of another host; the workers."""
    workers = [
        (f"far-{n}:1/{n:08x}", f"far-{n}:1", f"far-{n}", 1000 + n, "other-boot", 8, 15.0, now, now, "running", 50)
        for n in range(OTHER_WORKERS)
    ]
    workers += [
        (f"gone-{n}:1/{n:08x}", f"gone-{n}:1", "gone", 5000 + n, "other-boot", 8, 15.0, now - n, now - n, "stopped", 1)
        for n in range(STOPPED_WORKERS)
    ]
    request = {"agent": "claude", "prompt": "refactor " + "x" * 200, "cwd": "/work/repo"}
    jobs = [
        _job(f"f{i:015x}", "completed", request, now - 86400 + i, workers[i % OTHER_WORKERS][0], None, None)
        for i in range(FINAL_JOBS)
    ]
    jobs += [
        _job(f"a{i:015x}", "running", request, now - 600 + i / 10, workers[i % OTHER_WORKERS][0], 1000, now + 86400)
        for i in range(ACTIVE_JOBS)
    ]
    return jobs, workers


def _fill_sqlite(db_path: Path, jobs: list[tuple[Any, ...]], workers: list[tuple[Any, ...]]) -> None:
    db = sqlite3.connect(db_path)
    with db:
        db.executemany(f"INSERT INTO jobs ({JOB_COLUMNS}) VALUES ({','.join('?' * 16)})", jobs)
        db.executemany(f"INSERT INTO workers ({WORKER_COLUMNS}) VALUES ({','.join('?' * 11)})", workers)
    db.execute("ANALYZE")
    db.close()


def _fill_pg(url: str, jobs: list[tuple[Any, ...]], workers: list[tuple[Any, ...]]) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        with conn.cursor().copy(f"COPY jobs ({JOB_COLUMNS}) FROM STDIN") as copy:
            for row in jobs:
                copy.write_row(row)
        with conn.cursor().copy(f"COPY workers ({WORKER_COLUMNS}) FROM STDIN") as copy:
            for row in workers:
                copy.write_row(row)
        conn.execute("ANALYZE")


def _timed(fn: Callable[[], Any], runs: int) -> list[float]:
    fn()
    samples: list[float] = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return samples


def _stats(samples: list[float]) -> dict[str, float]:
    return {"median_ms": ms(median(samples)), "p99_ms": ms(percentile(samples, 99)), "runs": len(samples)}


class _Db:
    """One backend's plain connection: run a query, explain it, drop and make the worker index."""

    def __init__(self, backend: str, target: str | Path) -> None:
        self.backend = backend
        if backend == "sqlite":
            self._lite = sqlite3.connect(target)
        else:
            import psycopg

            self._pg = psycopg.connect(str(target), autocommit=True)

    def rows(self, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
        if self.backend == "sqlite":
            return self._lite.execute(sql, params).fetchall()
        return self._pg.execute(sql.encode(), params).fetchall()  # pyright: ignore[reportUnknownVariableType]

    def plan(self, sql: str, params: list[Any]) -> str:
        explain = "EXPLAIN QUERY PLAN " if self.backend == "sqlite" else "EXPLAIN "
        rows = self.rows(explain + sql, params)
        return " | ".join(str(r[-1]).strip() for r in rows)

    def index(self, make: bool) -> None:
        sql = (
            "CREATE INDEX IF NOT EXISTS jobs_worker_created_id ON jobs(worker, created_at, id)"
            if make
            else "DROP INDEX IF EXISTS jobs_worker_created_id"
        )
        for statement in (sql, "ANALYZE"):
            if self.backend == "sqlite":
                self._lite.execute(statement)
            else:
                self._pg.execute(statement.encode())

    def close(self) -> None:
        if self.backend == "sqlite":
            self._lite.close()
        else:
            self._pg.close()


def _worker_filter(backend: str, target: str | Path) -> list[Result]:
    from relay.web._pg_queries import PG
    from relay.web._queries import SQLITE, job_ids_sql

    dialect = SQLITE if backend == "sqlite" else PG
    kw: dict[str, Any] = {"statuses": (), "agent": None, "text": None, "offset": 0, "limit": 50, "principal": None}
    db = _Db(backend, target)
    results: list[Result] = []
    for label, make in (("without the index", False), ("with m017_jobs_worker_index", True)):
        db.index(make)
        for who, worker in (("ran 50", RARE_WORKER), ("ran 1 in 8", BUSY_WORKER)):
            sql, params = job_ids_sql(dialect, worker=worker, **kw)
            assert len(db.rows(sql, params)) == 50
            samples = _timed(lambda q=sql, p=params: db.rows(q, p), FILTER_RUNS)
            details = _stats(samples) | {"plan": db.plan(sql, params)}
            metric = f"{backend}: one page of the jobs of a worker that {who} of {FILTER_JOBS:,}, {label}, median"
            results.append(Result(NAME, metric, ms(median(samples)), "ms", details=details))
    db.close()
    return results


async def _recover(backend: str, store_url: str | None) -> Result:
    from relay.jobs.engine import Engine
    from relay.store import open_store

    with bench_env(store_url=store_url) as env:
        settings = env.settings()
        open_store(settings.store_target, home=settings.home).close()  # the schema, with every migration
        jobs, workers = _upkeep_rows(time.time())
        if store_url is None:
            _fill_sqlite(settings.db_path, jobs, workers)
        else:
            _fill_pg(store_url, jobs, workers)
        async with Engine(settings).running() as engine:
            assert engine.recover() == []
            samples = _timed(engine.recover, RECOVER_RUNS)
    metric = (
        f"{backend}: one recover() over {FINAL_JOBS:,} final + {ACTIVE_JOBS:,} running jobs of another host, median"
    )
    return Result(NAME, metric, ms(median(samples)), "ms", details=_stats(samples))


async def run() -> list[Result]:
    import tempfile

    from relay.store import open_store

    results: list[Result] = []
    with pg_cluster() as cluster, tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        targets: dict[str, str | Path] = {"sqlite": tmp / "filter.db", "postgresql": cluster.new_database()}
        jobs = _filter_jobs(time.time())
        for backend, target in targets.items():
            open_store(target, home=tmp).close()
            if backend == "sqlite":
                _fill_sqlite(Path(target), jobs, [])
            else:
                _fill_pg(str(target), jobs, [])
            results += _worker_filter(backend, target)
        results.append(await _recover("sqlite", None))
        results.append(await _recover("postgresql", cluster.new_database()))
    return results


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main_for(NAME, run))
