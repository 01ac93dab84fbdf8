"""The dashboard's own read-only queries over the job store: text search and deep paging of jobs, and cost totals.

The store's `list_jobs` decodes every row it returns, which is right for a page of jobs but not for
finding page 50 of a filtered list or summing the costs of 100,000 jobs. These queries let the
database do that work (ids only, or sums) on a connection that can only read; the rows a page shows
are then read through the engine, like everywhere else. `JobQueries` reads relay.db (SQLite);
`relay.web._pg_queries.PgJobQueries` answers the same questions on a PostgreSQL store.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, LiteralString, Protocol

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


@dataclass(frozen=True)
class Dialect:
    """How one backend spells the jobs list's query: its parameter mark, a request's fields, a text match."""

    mark: LiteralString  # "?" (sqlite3) or "%s" (psycopg)
    prompt: LiteralString  # the request's prompt, as text
    via: LiteralString  # the request's via, as text
    like: LiteralString  # the operator of the text search: SQLite's LIKE ignores ASCII case, PostgreSQL's ILIKE


SQLITE: Dialect = Dialect("?", "json_extract(request, '$.prompt')", "json_extract(request, '$.via')", "LIKE")


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
) -> tuple[LiteralString, list[Any]]:
    """The query of `Queries.job_ids` in dialect `d`, and its parameters."""
    where: list[LiteralString] = []
    params: list[Any] = []
    if principal:
        where.append(f"principal = {d.mark}")
        params.append(principal)
    if worker:
        where.append(f"worker = {d.mark}")
        params.append(worker)
    if statuses:
        marks: list[LiteralString] = [d.mark] * len(statuses)
        where.append(f"status IN ({','.join(marks)})")
        params += list(statuses)
    if agent:
        where.append(f"agent = {d.mark}")
        params.append(agent)
    if text:
        escaped = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        columns: tuple[LiteralString, ...] = ("id", d.prompt, "cwd", "model", d.via)
        where.append("(" + " OR ".join([f"{c} {d.like} {d.mark} ESCAPE '\\'" for c in columns]) + ")")
        params += [escaped] * len(columns)
    sql: LiteralString = "SELECT id FROM jobs" + (f" WHERE {' AND '.join(where)}" if where else "")
    sql += f" ORDER BY created_at DESC, id DESC LIMIT {d.mark} OFFSET {d.mark}"
    return sql, [*params, limit, offset]


class JobQueries:
    """A query-only connection to relay.db, safe to share between worker threads."""

    def __init__(self, db_path: Path) -> None:
        self._lock = threading.Lock()
        self._db = sqlite3.connect(db_path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
        self._db.execute("PRAGMA query_only = ON")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _rows(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

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
        sql, params = job_ids_sql(
            SQLITE,
            statuses=statuses,
            agent=agent,
            text=text,
            offset=offset,
            limit=limit,
            principal=principal,
            worker=worker,
        )
        return [str(r[0]) for r in self._rows(sql, params)]

    def worker(self, worker_id: str) -> WorkerName | None:
        rows = self._rows("SELECT id, name, host, pid, state FROM workers WHERE id = ?", (worker_id,))
        return WorkerName(*rows[0]) if rows else None

    def costs(self, since: float) -> list[CostRow]:
        """Jobs, spend and tokens per local day, agent and model, for jobs created since `since`."""
        rows = self._rows(
            "SELECT date(created_at, 'unixepoch', 'localtime') AS day, agent, model, COUNT(*),"
            " SUM(CASE WHEN json_type(result, '$.cost_usd') IN ('integer', 'real')"
            " THEN json_extract(result, '$.cost_usd') END), TOTAL(json_extract(result, '$.usage.input')),"
            " TOTAL(json_extract(result, '$.usage.output')), TOTAL(json_extract(result, '$.usage.cached'))"
            " FROM jobs WHERE created_at >= ? GROUP BY day, agent, model",
            (since,),
        )
        return [
            CostRow(str(r[0]), str(r[1]), r[2], int(r[3]), add_usd(None, r[4]), int(r[5]), int(r[6]), int(r[7]))
            for r in rows
        ]

    def costliest(self, since: float, limit: int) -> list[tuple[str, str, float]]:
        """(id, agent, cost) of the costliest jobs created since `since` (a cost that is not a number is none)."""
        rows = self._rows(
            "SELECT id, agent, json_extract(result, '$.cost_usd') AS cost FROM jobs"
            " WHERE created_at >= ? AND json_type(result, '$.cost_usd') IN ('integer', 'real') AND cost > 0"
            " ORDER BY cost DESC LIMIT ?",
            (since, limit),
        )
        return [(str(r[0]), str(r[1]), float(r[2])) for r in rows]
