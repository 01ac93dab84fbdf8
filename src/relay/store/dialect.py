"""What the store's one body (store/body.py, queue.py, threads, the dashboard's queries) asks of a backend.

Every method body is written once, in SQL that both SQLite and PostgreSQL accept, with `?` marks.
What differs between the two is said in exactly two places per backend:

- a `Dialect`: the few spellings that differ (a JSON field of a text column, row locks, the claim's lock,
  the audit mark's key, the workers upsert, the labels test), plain strings, no driver loaded;
- a `Conn` (store/sqlite_conn.py, store/pg/conn.py): how a statement runs there: one statement, a batch
  of statements in one transaction (one round trip on PostgreSQL: pipelined), or a transaction whose
  statements depend on each other's rows. Failures come back as RelayErrors, a unique-key collision as
  `Conflict`.

psycopg's `%s` marks are made from the `?` text once per statement text (`pg_sql`, cached), so a body's
statement costs SQLite nothing and PostgreSQL one dictionary look-up.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Concatenate, NamedTuple, ParamSpec, Protocol, TypeVar

from relay.errors import ErrorCode, RelayError
from relay.telemetry.metrics import store_call

T = TypeVar("T")
P = ParamSpec("P")


class Backed(Protocol):
    """A store whose calls are timed: it names its backend."""

    @property
    def backend(self) -> str: ...


S = TypeVar("S", bound=Backed)


class OverConn:
    """What a store body holds: the backend's Conn (set by the store's __init__), and the backend's name."""

    _db: Conn

    @property
    def backend(self) -> str:
        return self._db.dialect.name

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        """One statement with `?` marks, as either backend runs it (tests set rows up this way)."""
        return self._db.exec(sql, params)


class Rows:
    """A statement's rows and how many rows it changed (fetched while the connection was held)."""

    __slots__ = ("_count", "_rows")

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self._rows = rows
        self._count = rowcount

    @property
    def rowcount(self) -> int:
        return self._count

    def fetchone(self) -> Any | None:
        rows = self.fetchall()
        return rows[0] if rows else None

    def fetchall(self) -> list[Any]:
        return self._rows

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())


class Step(NamedTuple):
    """One statement of a batch: `params` is one row of values, or with `many` a list of them."""

    sql: str
    params: Sequence[Any] = ()
    many: bool = False


class Conflict(RelayError):
    """A write collided with another on a unique key (two appenders of one stream): the body tries again."""

    def __init__(self, detail: str) -> None:
        super().__init__(
            ErrorCode.STORE_BUSY,
            f"another write came first: {detail}",
            "one process writes a job's output: look for a second worker holding the same job",
        )


class Tx(Protocol):
    """A transaction in progress: its statements run one after another, each answered before the next."""

    def exec(self, sql: str, params: Sequence[Any] = ()) -> Rows: ...

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...


def may_queue(sql: str) -> bool:
    """Whether a statement may queue a job (a new job; a claim handed back): the count of these a process ran tells
    its claims whether a job may wait that its last claim did not see."""
    return sql.startswith("INSERT INTO jobs") or "status='queued'," in sql


class Conn(Protocol):
    """How statements run on one backend (the narrow place where SQLite and PostgreSQL differ)."""

    dialect: Dialect
    queued_writes: int  # statements run that may have queued a job (may_queue)

    def exec(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        """One statement, committed on its own."""
        ...

    def batch(self, steps: Sequence[Step], *, lock: bool = False) -> list[Rows]:
        """Statements in one transaction, sent together (PostgreSQL: one round trip); each one's rows.
        `lock`: the transaction takes the write lock at its start (SQLite's BEGIN IMMEDIATE)."""
        ...

    def tx(self, *, lock: bool = False, snapshot: bool = False) -> AbstractContextManager[Tx]:
        """A transaction whose statements depend on each other's rows. `lock`: as for batch; `snapshot`: every
        read sees one state of the store (PostgreSQL: REPEATABLE READ)."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Dialect:
    """The spellings of one backend's SQL that differ from the other's (each a fragment of a `?` statement)."""

    name: str  # "sqlite" or "postgresql": the store_call metric's backend label
    json_field: Callable[[str, str], str]  # (column, key) -> the text of that key of a JSON text column
    # (column, path "a.b") -> the number at that path of a JSON text column, NULL when missing or not a number
    json_number: Callable[[str, str], str]
    int_floor: Callable[[str], str]  # a number rounded down to a whole one
    for_update: str  # after a SELECT that locks its rows until the commit ("" where the transaction locks all)
    for_key_share: str  # after a SELECT that keeps its row's key (an epoch) from changing until the commit
    for_share: str  # after a SELECT whose row may not change until the commit (others may read-lock it too)
    now: str  # the store's clock in seconds since the epoch: leases and heartbeats are judged by it, never a process's
    skip_locked: str  # after the claim's SELECT of candidates: pass over rows another transaction holds
    claim_lock: str | None  # the statement a claim starts with (PostgreSQL's advisory lock; SQLite: the write lock)
    like: str  # the case-blind text match (SQLite's LIKE is; PostgreSQL's ILIKE)
    labels_within: str  # "a job's labels (JSON text) are all among the worker's (JSON text, the one mark)"
    mark_audit: str  # the upsert of the audit mark: params (log, seq, hash, updated_at)
    register_worker: str  # the upsert of a worker's row: params worker_row(...)
    greatest: str  # the larger of two values
    least: str  # the smaller of two values
    # Whether a claim is one statement that decides, takes and counts (a data-modifying WITH, sent with the lock and
    # the commit: PostgreSQL, where each read is a round trip), or a transaction that reads the slots held and the
    # candidates and decides between its statements (SQLite: a read costs no round trip, and the one statement's
    # sorts and joins cost it more than the decision in Python).
    claim_in_one: bool = False


# The audit mark and the worker's row are the two upserts whose keys differ (SQLite keeps one mark, a shared
# PostgreSQL store one per audit log); the rest of each statement is common.
_MARK_SET = (
    " DO UPDATE SET seq=excluded.seq, hash=excluded.hash, updated_at=excluded.updated_at"
    " WHERE excluded.seq >= audit_mark.seq"
)
SQLITE_MARK_AUDIT = (
    "INSERT INTO audit_mark (id, seq, hash, updated_at) SELECT 1, seq, hash, at"
    " FROM (SELECT ? AS log, ? AS seq, ? AS hash, ? AS at) WHERE true ON CONFLICT(id)" + _MARK_SET
)
PG_MARK_AUDIT = "INSERT INTO audit_mark (log, seq, hash, updated_at) VALUES (?, ?, ?, ?) ON CONFLICT (log)" + _MARK_SET
# A worker's row: params worker_row(info)[:-2] (its start and heartbeat are the store's clock, `{now}`).
_WORKER_INSERT = (
    "INSERT INTO workers (id, name, host, pid, start_ticks, boot_id, agents, labels, slots, lease_s,"
    " started_at, heartbeat_at, state) VALUES (?,?,?,?,?,?,?,?,?,?,{now},{now}, 'running')"
)
SQLITE_REGISTER_WORKER = _WORKER_INSERT.replace("INSERT INTO", "INSERT OR REPLACE INTO", 1)
PG_REGISTER_WORKER = (
    _WORKER_INSERT + " ON CONFLICT (id) DO UPDATE SET name=excluded.name, host=excluded.host, pid=excluded.pid,"
    " start_ticks=excluded.start_ticks, boot_id=excluded.boot_id, agents=excluded.agents,"
    " labels=excluded.labels, slots=excluded.slots, lease_s=excluded.lease_s,"
    " started_at=excluded.started_at, heartbeat_at=excluded.heartbeat_at, stopped_at=NULL,"
    " state='running', ran=0"
)


def pg_is(sql: str) -> str:
    """`sql` with `IS ?` as `IS NOT DISTINCT FROM ?`: SQLite's `IS` compares NULLs too, PostgreSQL's does not."""
    return sql.replace(" IS ?", " IS NOT DISTINCT FROM ?")


@lru_cache(maxsize=1024)
def pg_sql(sql: str) -> str:
    """`sql` (with `?` marks) as psycopg takes it: `%` doubled, `?` as `%s`, `IS ?` as `IS NOT DISTINCT FROM %s`
    (`pg_is`). The statements have no `?` inside a quoted literal."""
    return pg_is(sql.replace("%", "%%")).replace("?", "%s")


def marks(n: int) -> str:
    """`?,?,...,?`: n marks for an IN list (the same in both dialects)."""
    return ",".join("?" * n)


def timed(method: Callable[Concatenate[S, P], T]) -> Callable[Concatenate[S, P], T]:
    """The one place every store call goes through: the store_call metric (backend, method's name, seconds)."""
    name = method.__name__

    @functools.wraps(method)
    def call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        start = time.perf_counter()
        try:
            return method(self, *args, **kwargs)
        finally:
            store_call(self.backend, name, time.perf_counter() - start)

    return call
