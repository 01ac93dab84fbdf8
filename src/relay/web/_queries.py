"""The dashboard's own read-only queries over the job store: text search and deep paging of jobs, and cost totals.

The store's `list_jobs` decodes every row it returns, which is right for a page of jobs but not for
finding page 50 of a filtered list or summing the costs of 100,000 jobs. These queries let the
database do that work (ids only, or sums) on a connection that can only read; the rows a page shows
are then read through the engine, like everywhere else. `JobQueries` reads relay.db (SQLite);
`relay.web._pg_queries.PgJobQueries` answers the same questions on a PostgreSQL store, with the same
body (`QueriesBody`) over that store's Conn (relay.store.dialect).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from relay.store.dialect import Conn, Dialect, marks, pg_sql
from relay.store.sqlite_conn import SQLITE, SqliteConn

__all__ = ["SQLITE", "CostRow", "JobQueries", "Queries", "QueriesBody", "WorkerName", "add_usd", "job_ids_sql"]

# How long a read waits for a writer holding the database (ms).
BUSY_TIMEOUT_MS = 5000


@dataclass(frozen=True)
class CostRow:
    day: str
    agent: str
    model: str | None
    jobs: int
    cost_usd: float | None  # None when no job of the row reported a cost (a model with no price: unknown, not free)
    input: int
    output: int
    cached: int


def add_usd(total: float | None, value: object) -> float | None:
    """A sum of costs where a missing one is unknown, not free: None until some job reported a number."""
    if not isinstance(value, int | float):
        return total
    return (total or 0.0) + float(value)


@dataclass(frozen=True)
class WorkerName:
    """Who a worker is, for a job's page (one row by its key, however many workers the store has known)."""

    id: str
    name: str
    host: str
    pid: int
    state: str


class Queries(Protocol):
    """What the dashboard asks its store beyond the engine's reads (both backends answer alike)."""

    def close(self) -> None: ...

    def job_ids(
        self,
        *,
        statuses: Sequence[str],
        agent: str | None,
        text: str | None,
        offset: int,
        limit: int,
        principal: str | None = None,
        worker: str | None = None,
    ) -> list[str]: ...

    def worker(self, worker_id: str) -> WorkerName | None: ...

    def costs(self, since: float) -> list[CostRow]: ...

    def costliest(self, since: float, limit: int) -> list[tuple[str, str, float]]: ...


# The span the database sums costs over before the day is told: a quarter hour divides every UTC offset in use.
SLOT_S = 900


def _day(slot: int) -> str:
    """The local day (this process's time zone, with its daylight-saving rules) of a quarter hour of UTC."""
    return time.strftime("%Y-%m-%d", time.localtime(slot * SLOT_S))


def job_ids_sql(
    d: Dialect,
    *,
    statuses: Sequence[str],
    agent: str | None,
    text: str | None,
    offset: int,
    limit: int,
    principal: str | None,
    worker: str | None,
) -> tuple[str, list[Any]]:
    """The query of `Queries.job_ids` on the backend of dialect `d` (its own parameter marks), and its parameters."""
    sql, params = _job_ids(d, statuses, agent, text, principal, worker)
    sql += " ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?"
    return (pg_sql(sql) if d.name == "postgresql" else sql), [*params, limit, offset]


def _job_ids(
    d: Dialect, statuses: Sequence[str], agent: str | None, text: str | None, principal: str | None, worker: str | None
) -> tuple[str, list[Any]]:
    where: list[str] = []
    params: list[Any] = []
    if principal:
        where.append("principal = ?")
        params.append(principal)
    if worker:
        where.append("worker = ?")
        params.append(worker)
    if statuses:
        where.append(f"status IN ({marks(len(statuses))})")
        params += list(statuses)
    if agent:
        where.append("agent = ?")
        params.append(agent)
    if text:
        escaped = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        columns = ("id", d.json_field("request", "prompt"), "cwd", "model", d.json_field("request", "via"))
        where.append("(" + " OR ".join([f"{c} {d.like} ? ESCAPE '\\'" for c in columns]) + ")")
        params += [escaped] * len(columns)
    return "SELECT id FROM jobs" + (f" WHERE {' AND '.join(where)}" if where else ""), params


class QueriesBody:
    """The dashboard's queries over a backend's Conn (relay.store.dialect), written once for both stores."""

    _db: Conn

    def close(self) -> None:
        self._db.close()

    def job_ids(
        self,
        *,
        statuses: Sequence[str],
        agent: str | None,
        text: str | None,
        offset: int,
        limit: int,
        principal: str | None = None,
        worker: str | None = None,
    ) -> list[str]:
        """Ids of the jobs matching the filters (`principal`: the jobs it started; `worker`: the jobs whose claim
        that worker holds or held last), newest first, one page of them."""
        sql, params = _job_ids(self._db.dialect, statuses, agent, text, principal, worker)
        sql += " ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?"
        return [str(r[0]) for r in self._db.exec(sql, [*params, limit, offset])]

    def worker(self, worker_id: str) -> WorkerName | None:
        row = self._db.exec("SELECT id, name, host, pid, state FROM workers WHERE id = ?", (worker_id,)).fetchone()
        return WorkerName(*row) if row is not None else None

    def costs(self, since: float) -> list[CostRow]:
        """Jobs, spend and tokens per local day, agent and model, for jobs created since `since`.

        Days are this process's local days: the database sums per quarter hour of UTC (every local midnight of
        every time zone in use falls on one), and each quarter hour is given its local day here, with this
        process's time zone and its daylight-saving rules."""
        d = self._db.dialect
        # A cost no job of the slot reported stays NULL (unknown, not free); token counts sum from 0.
        usage = [f"COALESCE(SUM({d.json_number('result', f'usage.{k}')}), 0)" for k in ("input", "output", "cached")]
        rows = self._db.exec(
            f"SELECT {d.int_floor('created_at / ?')} AS slot, agent, model, COUNT(*),"
            f" SUM({d.json_number('result', 'cost_usd')}), {', '.join(usage)}"
            " FROM jobs WHERE created_at >= ? GROUP BY slot, agent, model",
            (SLOT_S, since),
        )
        sums: dict[tuple[str, str, str | None], list[float]] = {}
        costs: dict[tuple[str, str, str | None], float | None] = {}
        for slot, agent, model, jobs, cost, *tokens in rows:
            key = (_day(int(slot)), str(agent), model)
            found = sums.setdefault(key, [0.0] * 4)
            for i, value in enumerate((jobs, *tokens)):
                found[i] += float(value)
            costs[key] = add_usd(costs.get(key), cost)
        # Day, agent, then model (no model first).
        keys = sorted(sums, key=lambda k: (k[0], k[1], k[2] is not None, k[2] or ""))
        return [
            CostRow(day, agent, model, int(s[0]), costs[(day, agent, model)], int(s[1]), int(s[2]), int(s[3]))
            for (day, agent, model), s in ((k, sums[k]) for k in keys)
        ]

    def costliest(self, since: float, limit: int) -> list[tuple[str, str, float]]:
        """(id, agent, cost) of the costliest jobs created since `since` (a cost that is not a number is none)."""
        cost = self._db.dialect.json_number("result", "cost_usd")
        rows = self._db.exec(
            f"SELECT id, agent, cost FROM (SELECT id, agent, {cost} AS cost FROM jobs WHERE created_at >= ?) AS c"
            " WHERE cost > 0 ORDER BY cost DESC LIMIT ?",
            (since, limit),
        )
        return [(str(r[0]), str(r[1]), float(r[2])) for r in rows]


class JobQueries(QueriesBody):
    """A query-only connection to relay.db, safe to share between worker threads."""

    def __init__(self, db_path: Path) -> None:
        db = sqlite3.connect(db_path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA query_only = ON")
        self._db = SqliteConn(db, db_path, BUSY_TIMEOUT_MS / 1000, release=False)
