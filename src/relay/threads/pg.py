"""Conversation threads in the PostgreSQL store: every front of one store continues every thread.

Loaded only when RELAY_STORE names PostgreSQL (`open_threads`), so relay on SQLite never loads psycopg.
The tables are those of migration m004_threads (store/pg/schema.py), with the lifetime, turn limit and
principal filter of the SQLite `Threads`. `add_turns` holds the thread's row lock from its first read
to its commit, so two fronts adding to one thread at once number their turns one after the other.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Sequence
from contextlib import contextmanager
from typing import LiteralString

import psycopg
from psycopg import pq
from psycopg.rows import DictRow, dict_row

from relay.errors import invalid
from relay.principal import current
from relay.store.pg.connect import conninfo, needs_check
from relay.store.pg.errors import relay_errors
from relay.store.pg.schema import migrate
from relay.threads import (
    TURN_COLUMNS,
    NewTurn,
    Thread,
    ThreadSettings,
    ThreadStore,
    checked_id,
    heading,
    not_found,
    too_many_turns,
    turn_of,
    turn_row,
    valid_id,
)

Conn = psycopg.Connection[DictRow]

THREAD_COLUMNS: LiteralString = (
    "id, parent_id, tool, title, created_at, updated_at, turn_count, total_cost_usd, principal"
)

# Connections closed thread stores left for the next one to open (callers open a store per call: a new
# connection costs ~8 ms on loopback, more with TLS and a password); at most IDLE_KEPT, oldest closed first.
IDLE_KEPT = 4
_idle: list[tuple[str, Conn]] = []
# The stores this process has migrated (the job store migrates on its own opening; a thread store may come first).
_migrated: set[str] = set()
_shared = threading.Lock()


def _migrate_once(url: str) -> None:
    with _shared:
        if url in _migrated:
            return
        with psycopg.connect(conninfo(url), autocommit=True) as conn:
            migrate(conn)
        _migrated.add(url)


def _take_idle(url: str) -> Conn | None:
    with _shared:
        for index in range(len(_idle) - 1, -1, -1):
            if _idle[index][0] == url:
                return _idle.pop(index)[1]
    return None


def _keep_idle(url: str, db: Conn) -> None:
    if db.closed or db.broken or db.info.transaction_status != pq.TransactionStatus.IDLE:
        db.close()
        return
    with _shared:
        _idle.append((url, db))
        extra = _idle[:-IDLE_KEPT]
        del _idle[:-IDLE_KEPT]
    for _, old in extra:
        old.close()


class PgThreads(ThreadStore):
    """Threads in the PostgreSQL store at `url`; safe to share between the event loop and worker threads."""

    def __init__(
        self, url: str, config: ThreadSettings | None = None, *, clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__(config, clock)
        self.url = url
        self._lock = threading.RLock()
        self._db: Conn | None = None
        self._used_at = 0.0
        with self._conn():
            pass  # a wrong URL or a server that is down fails here, at opening

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                _keep_idle(self.url, self._db)
                self._db = None

    def _usable(self) -> Conn:
        """This store's connection: its own unless found dead, else one a closed store left, else a new one."""
        db = self._db
        if db is None:
            db = self._db = _take_idle(self.url)
            self._used_at = 0.0  # left by another store: checked first
        if db is not None and not (db.closed or db.broken):
            if not needs_check(db, self._used_at):
                return db
            try:
                db.execute("")
                return db
            except psycopg.Error:
                db.close()
        _migrate_once(self.url)
        db = Conn.connect(conninfo(self.url), autocommit=True, row_factory=dict_row)
        self._db = db
        return db

    @contextmanager
    def _conn(self) -> Generator[Conn]:
        """The connection, held by this thread for the block; a psycopg failure becomes a RelayError."""
        with self._lock:
            try:
                with relay_errors(self.url):
                    yield self._usable()
            finally:
                self._used_at = time.monotonic()

    def find(self, thread_id: str) -> Thread | None:
        if not valid_id(thread_id):
            return None
        with self._conn() as db, db.transaction():
            # One snapshot for the thread and its turns (a turn added meanwhile by another front is in both or neither).
            db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            row = db.execute(f"SELECT {THREAD_COLUMNS} FROM threads WHERE id=%s", (thread_id,)).fetchone()
            if row is None or not self._live(row, self._clock()):
                return None  # another principal's thread is as unknown as one that never was
            rows = db.execute(
                f"SELECT {TURN_COLUMNS} FROM thread_turns WHERE thread_id=%s ORDER BY seq", (thread_id,)
            ).fetchall()
        return self._thread(row, tuple(turn_of(r) for r in rows))  # turn_of reads the bytea's UTF-8

    def list(self, *, limit: int = 20, include_expired: bool = False) -> list[Thread]:
        if limit < 1:
            raise invalid("limit must be at least 1", "pass a positive limit")
        who = current()
        mine = "" if who.is_admin else " AND principal = %s"
        params = (self._cutoff(include_expired), *(() if who.is_admin else (who.name,)), limit)
        with self._conn() as db:
            rows = db.execute(
                f"SELECT {THREAD_COLUMNS} FROM threads WHERE updated_at > %s{mine} ORDER BY updated_at DESC LIMIT %s",
                params,
            ).fetchall()
        return [self._thread(r) for r in rows]

    def add_turns(
        self,
        thread_id: str,
        turns: Sequence[NewTurn],
        *,
        tool: str,
        title: str = "",
        parent_id: str | None = None,
        cost_usd: float = 0.0,
    ) -> Thread:
        checked_id(thread_id)
        now = self._clock()
        with self._conn() as db, db.transaction():
            # A new thread is made here (undone with the rest if the turns do not fit); a thread another front
            # makes at the same moment is waited for, then found below.
            db.execute(
                "INSERT INTO threads (id, parent_id, tool, title, created_at, updated_at, turn_count, total_cost_usd,"
                " principal) VALUES (%s,%s,%s,%s,%s,%s,0,0,%s) ON CONFLICT (id) DO NOTHING",
                (thread_id, parent_id, tool, heading(title), now, now, current().name),
            )
            row = db.execute(
                "SELECT turn_count, updated_at, principal FROM threads WHERE id=%s FOR UPDATE", (thread_id,)
            ).fetchone()
            if row is None or not self._live(row, now):
                raise not_found(thread_id)
            count = int(row["turn_count"])
            if count + len(turns) > self.config.max_turns:
                raise too_many_turns(thread_id, count, self.config.max_turns)
            with db.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO thread_turns ({TURN_COLUMNS}) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                    [turn_row(thread_id, count + i, turn, now, tool, _utf8) for i, turn in enumerate(turns)],
                )
            db.execute(
                "UPDATE threads SET turn_count=turn_count+%s, updated_at=%s, total_cost_usd=total_cost_usd+%s"
                " WHERE id=%s",
                (len(turns), now, cost_usd, thread_id),
            )
        return self.get(thread_id)

    def purge_expired(self) -> int:
        with self._conn() as db:
            cur = db.execute("DELETE FROM threads WHERE updated_at <= %s", (self._clock() - self.config.ttl_s,))
            return cur.rowcount  # their turns go with them (ON DELETE CASCADE)


def _utf8(content: str) -> bytes:
    """A turn's text as the bytea column keeps it: UTF-8 (a turn may hold NUL, which PostgreSQL's text cannot)."""
    return content.encode("utf-8", "surrogatepass")
