"""The dashboard's read-only queries on a PostgreSQL store: the same answers as `JobQueries` gives on relay.db.

Loaded only when the store is a postgresql:// URL (psycopg comes with it). A small pool of its own,
each connection's transactions read-only. The jobs table keeps a job's request and result as JSON
text (pg/schema.py), read here with PostgreSQL's json operators.

Days are the server process's local days, as SQLite's 'localtime' makes them: the database sums per
quarter hour of UTC (every local midnight of every time zone in use falls on one), and each quarter
hour is given its local day here, with this process's time zone and its daylight-saving rules.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Sequence
from contextlib import contextmanager
from typing import Any, LiteralString

import psycopg
from psycopg_pool import ConnectionPool

from relay.store.pg.connect import conninfo
from relay.store.pg.errors import relay_errors
from relay.web._queries import CostRow, Dialect, WorkerName, add_usd, job_ids_sql

# Connections the dashboard keeps to the server (its queries are short; pages render one at a time or so).
POOL_SIZE = 2
# How long a query waits for a free connection (or for the server to come back) before STORE_UNAVAILABLE.
POOL_WAIT_S = 10.0
# The span the database sums over before the day is told: a quarter hour divides every UTC offset in use.
SLOT_S = 900

PG: Dialect = Dialect("%s", "(request::json ->> 'prompt')", "(request::json ->> 'via')", "ILIKE")

Conn = psycopg.Connection[tuple[Any, ...]]


def _number(path: LiteralString) -> LiteralString:
    """The number at `path` of a job's result (`r`), NULL when it is missing or not a number (SQLite's TOTAL skips)."""
    return f"CASE WHEN json_typeof(r {path}) = 'number' THEN (r {path})::text::double precision END"


_COST = _number("-> 'cost_usd'")
_USAGE = (_number("-> 'usage' -> 'input'"), _number("-> 'usage' -> 'output'"), _number("-> 'usage' -> 'cached'"))
# A cost no job of the slot reported stays NULL (unknown, not free); token counts sum from 0.
_SUMS = ", ".join([f"SUM({_COST})", *[f"COALESCE(SUM({n}), 0)" for n in _USAGE]])
_COSTS: LiteralString = (
    f"SELECT floor(created_at / %s)::bigint AS slot, agent, model, COUNT(*), {_SUMS}"
    " FROM (SELECT created_at, agent, model, result::json AS r FROM jobs WHERE created_at >= %s) AS j"
    " GROUP BY slot, agent, model"
)
_COSTLIEST: LiteralString = (
    f"SELECT id, agent, cost FROM (SELECT id, agent, {_COST} AS cost"
    " FROM (SELECT id, agent, result::json AS r FROM jobs WHERE created_at >= %s) AS j) AS c"
    " WHERE cost > 0 ORDER BY cost DESC LIMIT %s"
)


def _read_only(conn: Conn) -> None:
    conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")


def _day(slot: int) -> str:
    return time.strftime("%Y-%m-%d", time.localtime(slot * SLOT_S))


class PgJobQueries:
    """Read-only queries on the PostgreSQL store at `url`, safe to share between worker threads."""

    def __init__(self, url: str, *, pool_size: int = POOL_SIZE, wait_s: float = POOL_WAIT_S) -> None:
        self._url = url
        self._pool: ConnectionPool[Conn] = ConnectionPool(
            conninfo(url),
            kwargs={"autocommit": True},
            min_size=1,
            max_size=pool_size,
            timeout=wait_s,
            check=ConnectionPool.check_connection,
            configure=_read_only,
            name="relay-dashboard",
            open=True,
        )

    def close(self) -> None:
        self._pool.close()

    @contextmanager
    def _conn(self) -> Generator[Conn]:
        with relay_errors(self._url), self._pool.connection() as conn:
            yield conn

    def _rows(self, sql: LiteralString, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._conn() as conn:
            return conn.execute(sql, params).fetchall()

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
        """Ids of the jobs matching the filters, newest first, one page of them (as `JobQueries.job_ids`)."""
        sql, params = job_ids_sql(
            PG,
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
        rows = self._rows("SELECT id, name, host, pid, state FROM workers WHERE id = %s", (worker_id,))
        return WorkerName(*rows[0]) if rows else None

    def costs(self, since: float) -> list[CostRow]:
        """Jobs, spend and tokens per local day, agent and model, for jobs created since `since`."""
        sums: dict[tuple[str, str, str | None], list[float]] = {}
        costs: dict[tuple[str, str, str | None], float | None] = {}
        for slot, agent, model, jobs, cost, *tokens in self._rows(_COSTS, (SLOT_S, since)):
            key = (_day(int(slot)), str(agent), model)
            found = sums.setdefault(key, [0.0] * 4)
            for i, value in enumerate((jobs, *tokens)):
                found[i] += float(value)
            costs[key] = add_usd(costs.get(key), cost)
        # In SQLite's GROUP BY order: day, agent, then model (no model first).
        keys = sorted(sums, key=lambda k: (k[0], k[1], k[2] is not None, k[2] or ""))
        return [
            CostRow(day, agent, model, int(s[0]), costs[(day, agent, model)], int(s[1]), int(s[2]), int(s[3]))
            for (day, agent, model), s in ((k, sums[k]) for k in keys)
        ]

    def costliest(self, since: float, limit: int) -> list[tuple[str, str, float]]:
        """(id, agent, cost) of the costliest jobs created since `since`."""
        return [(str(r[0]), str(r[1]), float(r[2])) for r in self._rows(_COSTLIEST, (since, limit))]
