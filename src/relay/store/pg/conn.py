"""How the store's statements run on PostgreSQL: store/dialect.py's `Conn` over psycopg.

The PostgreSQL half of the one store body: `?` statements made psycopg's once (dialect.pg_sql), psycopg
failures as RelayErrors (pg/errors.py), a unique-key collision as `Conflict`, and a batch of statements
pipelined with its BEGIN and COMMIT over libpq's own pipeline (pg/pipe.py): one round trip however many
statements it holds. `PoolConn` is the job
store's and the dashboard's (a pool); `OneConn` the conversation threads' (one connection, kept for the
next store of this process when closed).
"""

from __future__ import annotations

import threading
import time
import weakref
from abc import ABC, abstractmethod
from asyncio import events as asyncio_events
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import AbstractContextManager, contextmanager, suppress
from functools import lru_cache
from typing import Any, TypeVar

import psycopg
from psycopg import pq
from psycopg_pool import ConnectionPool

from relay.errors import ErrorCode, RelayError
from relay.store.dialect import PG_MARK_AUDIT, PG_REGISTER_WORKER, Conflict, Dialect, Rows, Step, may_queue, pg_sql
from relay.store.pg.connect import conninfo, needs_check
from relay.store.pg.errors import redact, relay_errors
from relay.store.pg.pipe import run_batch, run_one
from relay.store.pg.schema import MIGRATION_LOCK, migrate

Conn = psycopg.Connection[tuple[Any, ...]]
T = TypeVar("T")


# The server's clock, however far a process's own runs ahead or behind.
_NOW = "extract(epoch from clock_timestamp())::float8"


def _json_field(column: str, key: str) -> str:
    return f"({column}::json ->> '{key}')"


def _json_number(column: str, path: str) -> str:
    at = f"({column}::json #> '{{{path.replace('.', ',')}}}')"
    return f"CASE WHEN json_typeof({at}) = 'number' THEN {at}::text::double precision END"


def _int_floor(value: str) -> str:
    return f"floor({value})::bigint"


PG = Dialect(
    name="postgresql",
    json_field=_json_field,
    json_number=_json_number,
    int_floor=_int_floor,
    for_update=" FOR UPDATE",
    for_key_share=" FOR NO KEY UPDATE",
    for_share=" FOR SHARE",
    now=_NOW,
    skip_locked=" FOR UPDATE SKIP LOCKED",
    # Held to the claim's commit: the slots every worker holds are counted from rows no other claim can change
    # meanwhile (a per-agent count read without it could be read by two claimers at once, each taking the last).
    claim_lock=f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK + 1})",
    like="ILIKE",
    labels_within="labels::jsonb <@ ?::jsonb",
    mark_audit=PG_MARK_AUDIT,
    register_worker=PG_REGISTER_WORKER.format(now=_NOW),
    greatest="greatest",
    least="least",
    claim_in_one=True,
)


# How the store's connections are made: statements commit on their own (a transaction says BEGIN), and psycopg
# prepares none of its own (pg/pipe.py prepares them: psycopg's DEALLOCATE ALL after a rollback would drop those).
OWN_CONNECTION: dict[str, Any] = {"autocommit": True, "prepare_threshold": None}

# The statements that may change a job's row (`PgConn.wrote` counts them).
JOB_WRITES = ("UPDATE jobs", "INSERT INTO jobs", "DELETE FROM jobs")
# The jobs whose writes PgConn counts one by one; past it the counts start over (as one write to every job).
WRITTEN_KEPT = 4096


@lru_cache(maxsize=1024)
def one_job_at(sql: str) -> int | None:
    """Where among its values a statement that writes one job's row has that job's id (a new job's insert, an
    UPDATE whose one WHERE starts with the id); None for one that may write any number of jobs (a claim, a
    heartbeat, a purge)."""
    if sql.startswith("INSERT INTO jobs (id,") and " VALUES (" in sql and " SELECT " not in sql:
        return 0
    if sql.startswith("UPDATE jobs SET ") and sql.count(" WHERE ") == 1 and (at := sql.find(" WHERE id=?")) >= 0:
        return sql[:at].count("?")
    return None


# The longest an event loop waits for one store call (a front's loop answers every client: a store that went
# away must not hold it): a call on a loop runs on one of LOOP_THREADS threads of the store's own.
LOOP_CALL_S = 2.0
LOOP_THREADS = 8
# The longest a call on any other thread waits for the server's answer to a batch (then STORE_UNAVAILABLE).
THREAD_CALL_S = 60.0
# How often a store found away is looked at again (a new connection and an empty query), in a thread of its own.
AWAY_LOOK_S = 0.25
# How long a call on an event loop waits for a server known to be away (it may be back before the look saw it).
AWAY_WAIT_S = 0.5


class _Budget(threading.local):
    wait: float | None = None  # how long a call thread waits for a pooled connection (None: the pool's own wait)


_budget = _Budget()


def _running_loop() -> object | None:
    return asyncio_events._get_running_loop()  # pyright: ignore[reportPrivateUsage]


class Away:
    """Whether the server was found away, and the look that finds it back: while away, a call on an event loop
    fails at once with STORE_UNAVAILABLE instead of waiting for the pool (a thread's calls still wait their turn)."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._since: float | None = None
        self._lock = threading.Lock()
        self.checks = 0  # how many looks found it still away (tests)

    @property
    def is_away(self) -> bool:
        return self._since is not None

    def check(self) -> None:
        if self._since is not None:
            raise self._error(f"away since {time.monotonic() - self._since:.1f} s ago")

    def _error(self, why: str) -> RelayError:
        return RelayError(
            ErrorCode.STORE_UNAVAILABLE,
            f"PostgreSQL at {redact(self._url)} cannot be reached now ({why})",
            "try again in a few seconds; relay looks for the store every "
            f"{AWAY_LOOK_S} s, and jobs keep running meanwhile",
        )

    def found(self, why: str) -> RelayError:
        """The server did not answer: calls on a loop fail at once from now until a look finds it back."""
        with self._lock:
            if self._since is None:
                self._since = time.monotonic()
                threading.Thread(target=self._look, name="relay-store-away", daemon=True).start()
        return self._error(why)

    def watching(self, call: Callable[[], T]) -> T:
        with self.noting():
            return call()

    @contextmanager
    def noting(self) -> Generator[None]:
        """A STORE_UNAVAILABLE inside the block marks the server away."""
        try:
            yield
        except RelayError as err:
            if err.code is ErrorCode.STORE_UNAVAILABLE:
                self.found(err.message)
            raise

    def _look(self) -> None:
        while True:
            try:
                with psycopg.connect(conninfo(self._url), autocommit=True, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
            except psycopg.Error:
                self.checks += 1
                time.sleep(AWAY_LOOK_S)
                continue
            with self._lock:
                self._since = None
            return


class _Later(Rows):
    """The rows of a statement sent in a pipeline: read (and so waited for) only when asked, so the statements
    before a read go to the server together."""

    __slots__ = ("_cur", "_done")

    def __init__(self, cur: psycopg.Cursor[tuple[Any, ...]]) -> None:
        super().__init__([], -1)
        self._cur = cur
        self._done = False

    def _fetch(self) -> None:
        if not self._done:
            try:  # a fetch waits for the pipeline's results (a description read before it would not)
                self._rows = self._cur.fetchall()
            except psycopg.ProgrammingError as exc:
                if exc.sqlstate is not None:  # the server refused the statement (no such table, no privilege)
                    raise
                self._rows = []  # psycopg's own: a statement that returns no rows
            self._count = self._cur.rowcount
            self._done = True

    @property
    def rowcount(self) -> int:
        self._fetch()
        return self._count

    def fetchall(self) -> list[Any]:
        self._fetch()
        return self._rows


class _Tx:
    """The statements of one pipelined transaction: each is sent at once, its rows waited for when read."""

    def __init__(self, conn: Conn) -> None:
        self._conn = conn
        self.sent: list[tuple[str, Sequence[Any], bool]] = []

    def exec(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        self.sent.append((sql, params, False))
        cur = self._conn.cursor()
        cur.execute(pg_sql(sql), params)  # pyright: ignore[reportArgumentType]
        return _Later(cur)

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.sent.append((sql, rows, True))
        with self._conn.cursor() as cur:
            cur.executemany(pg_sql(sql), rows)  # pyright: ignore[reportArgumentType]


class PgConn(ABC):
    """Statements on a PostgreSQL connection that `_borrow` lends.

    A call made on an event loop's thread never holds that loop longer than LOOP_CALL_S: it runs on a thread
    of this store's own and is waited for that long at most (then STORE_UNAVAILABLE; the thread finishes on
    its own), or, a pool's statement or batch, on the loop's thread with that deadline on each of its waits.
    Once a call found the server away, calls on a loop fail at once (`Away`) until a look of its own finds it
    back: a front cut from its store keeps answering what needs no store."""

    dialect = PG
    # Whether a call made on an event loop's thread runs there (every wait to lend a connection is bounded).
    calls_on_loop = False

    def __init__(self, url: str) -> None:
        self.url = url
        self.away = Away(url)
        # Statements of this process that may have changed any job's row (a copy of a row is good while it stays),
        # those that changed one job's (by job: `written`), and those that may have queued a job (a new job, a
        # claim handed back).
        self.job_writes = 0
        self.written: dict[str, int] = {}
        self.queued_writes = 0
        self._count = threading.Lock()
        self._calls = ThreadPoolExecutor(max_workers=LOOP_THREADS, thread_name_prefix="relay-store-call")

    @abstractmethod
    def _borrow(self) -> AbstractContextManager[Conn]: ...

    @abstractmethod
    def close(self) -> None: ...

    @contextmanager
    def _conn(self) -> Generator[Conn]:
        """A connection; a psycopg failure becomes a RelayError (a unique-key one, Conflict)."""
        with relay_errors(self.url), self._borrow() as conn:
            yield conn

    def _off_loop(self, call: Callable[[], T]) -> T:
        """`call()` here, or, on an event loop's thread, on a thread of this store's, waited for LOOP_CALL_S at most
        (AWAY_WAIT_S while the server is known away: a loop is held that long at most, and a server back from a
        restart answers before the look finds it)."""
        if _running_loop() is None:
            return self.away.watching(call)
        budget = AWAY_WAIT_S if self.away.is_away else LOOP_CALL_S
        done = self._calls.submit(self._within, call, budget)
        try:
            return done.result(timeout=budget)
        except FutureTimeout:
            raise self.away.found(f"no answer within {budget} s") from None

    def _within(self, call: Callable[[], T], budget: float) -> T:
        """`call()`, which waits for a pooled connection (and a batch for its answer) `budget` seconds at most."""
        _budget.wait = budget
        try:
            return self.away.watching(call)
        finally:
            _budget.wait = None

    def exec(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        """One statement, in its own transaction (on a loop's thread as a batch runs there: `batch`)."""
        return self._on_loop(lambda: self._exec(sql, params))

    def _exec(self, sql: str, params: Sequence[Any]) -> Rows:
        try:
            with self._conn() as conn, _unique():
                return run_one(conn, Step(sql, params), deadline=time.monotonic() + (_budget.wait or THREAD_CALL_S))
        finally:
            self.wrote(sql, params)

    def wrote(self, sql: str, params: Sequence[Any] = (), many: bool = False) -> None:
        """Count a statement that may have changed a job's row, once it ran (or failed): in `written` under its job
        when it writes one job (`one_job_at`), else in `job_writes`."""
        if not (sql.startswith(JOB_WRITES) or (sql.startswith("WITH") and "AS (UPDATE jobs " in sql)):  # a claim
            return
        at = one_job_at(sql)
        with self._count:
            self.queued_writes += may_queue(sql)
            if at is None:
                self.job_writes += 1
                return
            for row in params if many else (params,):
                job_id = str(row[at])
                self.written[job_id] = self.written.get(job_id, 0) + 1
            if len(self.written) > WRITTEN_KEPT:  # forgotten: as a write to every job (counted first: a reader
                self.job_writes += 1  # between the two sees the new count, never a job's count gone back to 0)
                self.written.clear()

    def batch(self, steps: Sequence[Step], *, lock: bool = False) -> list[Rows]:
        """The statements, BEGIN and COMMIT pipelined: one round trip. (`lock`: PostgreSQL locks rows, not the
        database: a statement that must hold a row says so itself.) On an event loop's thread a pool's batch runs
        there, without a hop to a call thread and back: each of its waits (for a connection, its check, the answer:
        pipe.py) has the deadline `_off_loop` gives a call."""
        del lock
        return self._on_loop(lambda: self._batch(steps))

    def _on_loop(self, call: Callable[[], T]) -> T:
        """`call()` here; on an event loop's thread, here too when every wait of a pool's is bounded (each of them
        has the deadline `_off_loop` gives a call), else through `_off_loop`."""
        if _running_loop() is None:
            return self.away.watching(call)
        if not self.calls_on_loop:
            return self._off_loop(call)
        return self._within(call, AWAY_WAIT_S if self.away.is_away else LOOP_CALL_S)

    def _batch(self, steps: Sequence[Step]) -> list[Rows]:
        try:
            return self._batch_once(steps)
        finally:
            for step in steps:
                self.wrote(step.sql, step.params, step.many)

    def _batch_once(self, steps: Sequence[Step]) -> list[Rows]:
        with self._conn() as conn, _unique():
            return run_batch(conn, steps, deadline=time.monotonic() + (_budget.wait or THREAD_CALL_S))

    @contextmanager
    def tx(self, *, lock: bool = False, snapshot: bool = False) -> Generator[_Tx]:
        """A pipelined transaction: BEGIN goes with the first statements, and what is sent before a read goes in
        that read's round trip. (On an event loop's thread it fails at once while the server is known away.)"""
        del lock
        if _running_loop() is not None:
            self.away.check()
        tx: _Tx | None = None
        try:
            with self.away.noting(), self._conn() as conn, _unique(), _pipelined_tx(conn, snapshot=snapshot):
                tx = _Tx(conn)
                yield tx
        finally:
            for sql, params, many in tx.sent if tx is not None else ():
                self.wrote(sql, params, many)


@contextmanager
def _pipelined_tx(conn: Conn, *, snapshot: bool = False) -> Generator[None]:
    """BEGIN, the block's statements and COMMIT in one pipeline: one round trip when the block reads nothing before
    its end (psycopg's own `transaction()` in a pipeline waits for the server at BEGIN and at COMMIT: four). A
    failure rolls the transaction back, so no connection goes back to its pool inside one."""
    try:
        with conn.pipeline():
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ" if snapshot else "BEGIN")
            yield
            conn.execute("COMMIT")
    except BaseException:
        if not conn.closed and conn.info.transaction_status != pq.TransactionStatus.IDLE:
            with suppress(psycopg.Error):
                conn.rollback()
        raise


@contextmanager
def _unique() -> Generator[None]:
    try:
        yield
    except psycopg.errors.UniqueViolation as exc:
        raise Conflict(" ".join(str(exc).split())) from None


class PoolConn(PgConn):
    """A pool of up to `size` connections (the job store's; the dashboard's, read-only)."""

    calls_on_loop = True  # the pool's wait has a timeout, its check a deadline; connections are made by its threads

    def __init__(
        self,
        url: str,
        *,
        size: int,
        wait_s: float,
        name: str,
        configure: Callable[[Conn], None] | None = None,
    ) -> None:
        super().__init__(url)
        self._last_used: weakref.WeakKeyDictionary[Conn, float] = weakref.WeakKeyDictionary()
        self._configure_more = configure
        # The pool's connections by the pid of the server process serving each (a notice names its sender's).
        self.own: weakref.WeakValueDictionary[int, Conn] = weakref.WeakValueDictionary()
        with relay_errors(url):
            self.pool: ConnectionPool[Conn] = ConnectionPool(
                conninfo(url),
                kwargs=OWN_CONNECTION,
                min_size=1,
                max_size=size,
                timeout=wait_s,
                check=self._check,
                configure=self._configure,
                name=name,
                open=True,
            )

    def close(self) -> None:
        self._calls.shutdown(wait=False)
        self.pool.close()

    def _configure(self, conn: Conn) -> None:
        self.own[conn.info.backend_pid] = conn
        if self._configure_more is not None:
            self._configure_more(conn)

    def is_own(self, backend_pid: int) -> bool:
        """Whether the server process `backend_pid` serves one of this pool's open connections."""
        conn = self.own.get(backend_pid)
        return conn is not None and not conn.closed

    def _check(self, conn: Conn) -> None:
        """The pool's check before it hands out `conn`: a round trip, when pg/connect.py's `needs_check` says so."""
        if needs_check(conn, self._last_used.get(conn, float("-inf"))):
            run_batch(conn, (), deadline=time.monotonic() + (_budget.wait or THREAD_CALL_S))  # a bounded round trip

    @contextmanager
    def _borrow(self) -> Generator[Conn]:
        with self.pool.connection(timeout=_budget.wait) as conn:
            try:
                yield conn
            finally:
                self._last_used[conn] = time.monotonic()


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


class OneConn(PgConn):
    """One connection, held by one thread at a time: its own unless found dead, else one a closed store of this
    process left (IDLE_KEPT of them), else a new one (the store migrated first, once per process)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._lock = threading.RLock()
        self._db: Conn | None = None
        self._used_at = 0.0
        with self._conn():
            pass  # a wrong URL or a server that is down fails here, at opening

    def close(self) -> None:
        self._calls.shutdown(wait=False)
        with self._lock:
            if self._db is not None:
                _keep_idle(self.url, self._db)
                self._db = None

    def _usable(self) -> Conn:
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
        db = Conn.connect(conninfo(self.url), **OWN_CONNECTION)
        self._db = db
        return db

    @contextmanager
    def _borrow(self) -> Generator[Conn]:
        with self._lock:
            try:
                yield self._usable()
            finally:
                self._used_at = time.monotonic()
