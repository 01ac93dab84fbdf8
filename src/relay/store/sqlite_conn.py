"""How the store's statements run on SQLite: one connection shared by the process's threads, under a lock.

The SQLite half of store/dialect.py's `Conn`: autocommit statements, a transaction (`BEGIN IMMEDIATE` when it
writes after it reads, so claimers of every process take turns), SQLite failures as RelayErrors
(store/health.py), and a large value bound to a cached statement let go once it ran (store/release.py).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Generator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from relay.errors import RelayError
from relay.store.dialect import SQLITE_MARK_AUDIT, SQLITE_REGISTER_WORKER, Conflict, Dialect, Rows, Step, may_queue
from relay.store.health import sqlite_error
from relay.store.release import large, unbind

# The store's clock: this host's, as Python reads it (a function of the connection's, `_now`).
_NOW = "relay_now()"


def _now() -> float:
    return time.time()


def _json_field(column: str, key: str) -> str:
    return f"json_extract({column}, '$.{key}')"


def _json_number(column: str, path: str) -> str:
    return (
        f"CASE WHEN json_type({column}, '$.{path}') IN ('integer', 'real') THEN json_extract({column}, '$.{path}') END"
    )


def _int_floor(value: str) -> str:
    return f"CAST({value} AS INTEGER)"  # floored values are times since 1970, never negative: the cast is the floor


SQLITE = Dialect(
    name="sqlite",
    json_field=_json_field,
    json_number=_json_number,
    int_floor=_int_floor,
    for_update="",  # the transaction holds the database's write lock (BEGIN IMMEDIATE)
    for_key_share="",
    for_share="",
    now=_NOW,
    skip_locked="",
    claim_lock=None,
    like="LIKE",  # SQLite's LIKE ignores ASCII case
    labels_within="NOT EXISTS (SELECT 1 FROM json_each(labels) WHERE value NOT IN (SELECT value FROM json_each(?)))",
    mark_audit=SQLITE_MARK_AUDIT,
    register_worker=SQLITE_REGISTER_WORKER.format(now=_NOW),
    greatest="max",
    least="min",
)


class _Tx:
    """The statements of one SQLite transaction (the connection's lock is held throughout)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self.large: list[tuple[str, int]] = []  # statements whose bound values are let go afterwards
        self.queued = 0  # of them, those that may have queued a job

    def exec(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        cur = self._db.execute(sql, params)
        self.queued += may_queue(sql)
        if params and large(params):
            self.large.append((sql, len(params)))
        return Rows(cur.fetchall(), cur.rowcount)

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._db.executemany(sql, rows)
        self.queued += may_queue(sql)
        if rows and any(large(r) for r in rows):
            self.large.append((sql, len(rows[0])))


class SqliteConn:
    """A SQLite connection (rows as tuples, autocommit) shared by threads; statements as store/dialect.py's Conn."""

    dialect = SQLITE

    def __init__(self, db: sqlite3.Connection, path: Path, busy_s: float, *, release: bool = True) -> None:
        """`release`: let a large bound value go after its statement (a connection that caches statements)."""
        db.row_factory = None
        self._release = release
        db.create_function("relay_now", 0, _now)
        self.db = db
        self.path = path
        self._busy_s = busy_s
        self.lock = threading.RLock()
        self.queued_writes = 0

    def close(self) -> None:
        with self.lock:
            self.db.close()

    def _error(self, exc: sqlite3.Error) -> RelayError:
        """A SQLite failure as a RelayError (a unique-key one, Conflict)."""
        if isinstance(exc, sqlite3.IntegrityError) and "UNIQUE" in str(exc):
            return Conflict(str(exc))
        return sqlite_error(exc, self.path, self._busy_s)

    @contextmanager
    def _held(self) -> Generator[sqlite3.Connection]:
        """The connection under the lock; a SQLite failure becomes a RelayError."""
        with self.lock:
            try:
                yield self.db
            except sqlite3.Error as exc:
                raise self._error(exc) from None

    # exec and batch are the hot path (every job's calls): written out, without a generator's context manager.

    def exec(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        with self.lock:
            try:
                cur = self.db.execute(sql, params)
                self.queued_writes += may_queue(sql)
                return Rows(cur.fetchall(), cur.rowcount)
            except sqlite3.Error as exc:
                raise self._error(exc) from None
            finally:
                if self._release and params and large(params):
                    unbind(self.db, sql, len(params))

    def batch(self, steps: Sequence[Step], *, lock: bool = False) -> list[Rows]:
        db = self.db
        with self.lock:
            done: list[Rows] = []
            try:
                db.execute("BEGIN IMMEDIATE" if lock else "BEGIN")
                for step in steps:
                    if step.many:
                        db.executemany(step.sql, step.params)
                        done.append(Rows([], -1))
                    else:
                        cur = db.execute(step.sql, step.params)
                        done.append(Rows(cur.fetchall(), cur.rowcount))
                db.execute("COMMIT")
                self.queued_writes += sum(may_queue(step.sql) for step in steps)
            except BaseException as exc:
                if db.in_transaction:  # a failed statement or commit (disk full, busy) leaves nothing half-done
                    with suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise self._error(exc) from None
                raise
            finally:
                if self._release:
                    for step in steps:
                        rows = step.params if step.many else [step.params]
                        if rows and any(large(r) for r in rows):
                            unbind(db, step.sql, len(rows[0]))
            return done

    @contextmanager
    def tx(self, *, lock: bool = False, snapshot: bool = False) -> Generator[_Tx]:
        """One transaction (a deferred BEGIN reads one snapshot; `lock`: BEGIN IMMEDIATE, the write lock at once)."""
        del snapshot  # a SQLite transaction reads one snapshot from its first read
        with self._held() as db:
            tx = _Tx(db)
            db.execute("BEGIN IMMEDIATE" if lock else "BEGIN")
            try:
                yield tx
                db.execute("COMMIT")
                self.queued_writes += tx.queued
            except BaseException:
                if db.in_transaction:  # a failed statement or commit (disk full, busy) leaves nothing half-done
                    with suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                raise
            finally:
                for sql, count in tx.large if self._release else ():
                    unbind(db, sql, count)
