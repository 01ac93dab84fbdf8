"""The PostgreSQL store: the job store's API (jobs, events, sessions, outputs) over a pool of connections.

Same method names, signatures and return types as the SQLite `Store`, so the job engine does not know
which one it holds. Each call borrows a connection from the pool (checked on the way out, so a server
restart costs a reconnect, not an error), runs in autocommit or in one explicit transaction, and any
psycopg error comes back as a RelayError (pg/errors.py). Every job state change is also announced by
the tables' triggers on `relay_jobs` / `relay_queue` (pg/schema.py; pg/listen.py waits for them).
"""

from __future__ import annotations

import json
import logging
import socket
import time
import weakref
from collections.abc import Generator, Iterable, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, LiteralString

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from relay.audit import AuditLog, finished_data, queued_data
from relay.errors import ErrorCode, RelayError
from relay.events import Event
from relay.store import outputs
from relay.store.db import JOB_COLUMNS, AuditExpectation, JobRecord, SessionRecord, SessionTurn
from relay.store.pg.claims import OF_HOST_PG, Conn, PgClaims
from relay.store.pg.connect import conninfo, needs_check
from relay.store.pg.errors import relay_errors
from relay.store.pg.listen import PgChanges
from relay.store.pg.marks import LatestMark
from relay.store.pg.schema import migrate
from relay.store.pg.watch import ChangeCount
from relay.store.pg.witness import INSERT_ROWS, WitnessWriter, witness_status

# Connections one process keeps to the server: the event loop and a few worker threads at once.
POOL_SIZE = 4
# How long a call waits for a free connection (or for the server to come back) before STORE_UNAVAILABLE.
POOL_WAIT_S = 10.0

logger = logging.getLogger("relay.store")

_JOB_COLUMNS: LiteralString = (
    "id, agent, kind, status, request, model, cwd, session_id, created_at, started_at, finished_at, deadline_at,"
    " idle_timeout_s, pid, pid_start_ticks, boot_id, owner_pid, owner_start_ticks, cancel_requested, stop_reason,"
    " exit_code, result, error, principal, worker, epoch"
)
assert _JOB_COLUMNS == JOB_COLUMNS  # one column order for both backends (JobRecord's field order)

_MARK_AUDIT = (
    "INSERT INTO audit_mark (log, seq, hash, updated_at) VALUES (%s, %s, %s, %s) ON CONFLICT (log) DO UPDATE SET"
    " seq=excluded.seq, hash=excluded.hash, updated_at=excluded.updated_at WHERE excluded.seq >= audit_mark.seq"
)
_UPSERT_SESSION = (
    "INSERT INTO sessions (agent, session_id, cwd, model, permission, title, turns, total_cost_usd,"
    " created_at, last_used_at, principal) VALUES (%s,%s,%s,%s,%s,%s,1,%s,%s,%s,%s)"
    " ON CONFLICT (agent, session_id) DO UPDATE SET turns=sessions.turns+1,"
    " total_cost_usd=sessions.total_cost_usd+excluded.total_cost_usd,"
    " last_used_at=excluded.last_used_at, model=COALESCE(excluded.model, sessions.model)"
)
# A batch of events in one statement (one round trip, one notification); a seq already stored is kept.
# ... while the job exists (under the claim's epoch when a fence follows this and closes the parenthesis).
_ADD_EVENTS = (
    "INSERT INTO events (job_id, seq, ts, type, data)"
    " SELECT %s, s, %s, t, d FROM unnest(%s::integer[], %s::text[], %s::text[]) AS e(s, t, d)"
    " WHERE EXISTS (SELECT 1 FROM jobs WHERE id=%s"
)
_ADD_EVENTS_END = ") ON CONFLICT (job_id, seq) DO NOTHING"
_READ_PAGE = (
    "SELECT substring(data FROM greatest(%s - byte_offset, 0)::integer + 1"
    " FOR (least(byte_offset + size, %s) - greatest(byte_offset, %s))::integer)"
    " FROM outputs WHERE job_id=%s AND stream=%s AND byte_offset + size > %s AND byte_offset > %s AND byte_offset < %s"
    " ORDER BY byte_offset"
)
_TOTAL = "SELECT COALESCE(MAX(byte_offset + size), 0) FROM outputs WHERE job_id=%s AND stream=%s"
_LAST_CHUNK = "SELECT seq + 1, byte_offset + size FROM outputs WHERE job_id=%s AND stream=%s ORDER BY seq DESC LIMIT 1"
_SIZES = "SELECT stream, MAX(byte_offset + size) FROM outputs WHERE job_id=%s GROUP BY stream"
# One chunk after the stream's last, in one statement; two appenders at once collide on (job, stream, seq).
_APPEND_CHUNK = (
    "INSERT INTO outputs (job_id, stream, seq, byte_offset, size, data)"
    " SELECT %s, %s, COALESCE(last.seq + 1, 0), COALESCE(last.byte_offset + last.size, 0), %s, %s"
    " FROM (SELECT 1) AS one LEFT JOIN LATERAL (SELECT seq, byte_offset, size FROM outputs"
    " WHERE job_id=%s AND stream=%s ORDER BY seq DESC LIMIT 1) AS last ON true"
    " RETURNING byte_offset + size"
)
# An append under a claim: the job still holds it (its row share-locked until the append commits).
_UNDER_EPOCH: LiteralString = (
    "SELECT 1 FROM jobs WHERE id=%s AND epoch=%s AND status IN ('queued', 'running') FOR SHARE"
)
# How often an append is tried again after another appender took its seq.
APPEND_TRIES = 100
_INSERT_CHUNK = "INSERT INTO outputs (job_id, stream, seq, byte_offset, size, data) VALUES (%s, %s, %s, %s, %s, %s)"


def audit_log_name(home: Path) -> str:
    """The audit log of the process whose RELAY_HOME is `home`, as the mark table names it (several fronts, each
    with its own home and log, share one database)."""
    return f"{socket.gethostname()}:{home}"


def audit_expectation(url: str, home: Path) -> AuditExpectation:
    """What the store at `url` records of the audit log in `home` (its last entry), read without migrating."""
    with relay_errors(url), psycopg.connect(conninfo(url), autocommit=True) as conn:
        if conn.execute("SELECT to_regclass('audit_mark')").fetchone() in (None, (None,)):
            return AuditExpectation(None, 0)
        row = conn.execute("SELECT seq, hash FROM audit_mark WHERE log=%s", (audit_log_name(home),)).fetchone()
    # The jobs of a shared store are every front's: the mark alone says this log was written.
    return AuditExpectation((int(row[0]), str(row[1])) if row else None, 0)


def _job(row: tuple[Any, ...]) -> JobRecord:
    return JobRecord(*row)  # the columns of JOB_COLUMNS, in JobRecord's field order


class PgStore(PgClaims):
    """The job store on PostgreSQL at `url`; safe to share between the event loop and worker threads."""

    spans_hosts = True  # fronts and workers of any host: a job's outputs are copied into it

    def __init__(self, url: str, audit: AuditLog, *, pool_size: int = POOL_SIZE, wait_s: float = POOL_WAIT_S) -> None:
        self.url = url
        self.audit = audit
        self._log = audit_log_name(audit.home)
        with relay_errors(url), psycopg.connect(conninfo(url), autocommit=True) as conn:
            migrate(conn)
            # The audit witness (pg/witness.py): relay says at start whether its role could rewrite it.
            self.witness = witness_status(conn)
        if self.witness.present and not self.witness.holds:
            logger.warning("audit witness: %s", self.witness.describe())
        self._last_used: weakref.WeakKeyDictionary[Conn, float] = weakref.WeakKeyDictionary()
        # The pool's connections by the pid of the server process serving each (a notice names its sender's).
        self._own: weakref.WeakValueDictionary[int, Conn] = weakref.WeakValueDictionary()
        self._pool: ConnectionPool[Conn] = ConnectionPool(
            conninfo(url),
            kwargs={"autocommit": True},
            min_size=1,
            max_size=pool_size,
            timeout=wait_s,
            check=self._check,
            configure=self._configure,
            name="relay-store",
            open=True,
        )
        self._notices = ChangeCount(url, self._is_own)
        self._marks = LatestMark(self._mark_audit)
        self.audit.marks.append(self._marks.put)
        self._witness: WitnessWriter | None = None
        if self.witness.present and self.witness.can_insert:
            self._witness = WitnessWriter(self._witness_rows)
            self.audit.marks.append(self._witness.put)

    def changes(self) -> PgChanges:
        """A listener for this store's change notices (enter it with `async with` to start it)."""
        return PgChanges(self.url)

    def close(self) -> None:
        with suppress(ValueError):
            self.audit.marks.remove(self._marks.put)
        self._marks.close()
        if self._witness is not None:
            with suppress(ValueError):
                self.audit.marks.remove(self._witness.put)
            self._witness.close()
        self._notices.close()
        self._pool.close()

    def _configure(self, conn: Conn) -> None:
        self._own[conn.info.backend_pid] = conn

    def _is_own(self, backend_pid: int) -> bool:
        """Whether the server process `backend_pid` serves one of this store's open connections."""
        conn = self._own.get(backend_pid)
        return conn is not None and not conn.closed

    def _check(self, conn: Conn) -> None:
        """The pool's check before it hands out `conn`: a round trip, when pg/connect.py's `needs_check` says so."""
        if needs_check(conn, self._last_used.get(conn, float("-inf"))):
            ConnectionPool.check_connection(conn)

    @contextmanager
    def _conn(self) -> Generator[Conn]:
        """A connection of the pool; a psycopg failure becomes a RelayError."""
        with relay_errors(self.url), self._pool.connection() as conn:
            try:
                yield conn
            finally:
                self._last_used[conn] = time.monotonic()

    @contextmanager
    def _tx(self) -> Generator[Conn]:
        """A connection of the pool inside one transaction (committed at the end, rolled back on an error)."""
        with self._conn() as conn, conn.transaction():
            yield conn

    def _exec(self, sql: LiteralString, params: Sequence[Any] = ()) -> tuple[list[tuple[Any, ...]], int]:
        """Run one statement; its rows (if it returns any) and how many rows it changed."""
        with self._conn() as conn:
            cur = conn.execute(sql, params)
            return (cur.fetchall() if cur.description else []), cur.rowcount

    def _mark_audit(self, seq: int, line_hash: str) -> None:
        self._exec(_MARK_AUDIT, (self._log, seq, line_hash, time.time()))

    def _witness_rows(self, seqs: list[int], hashes: list[str]) -> None:
        self._exec(INSERT_ROWS, (self._log, seqs, hashes))

    def queue_version(self) -> int:
        """A number that changes whenever another process changed a job (counted from the store's notices;
        as SQLite's data_version, this process's own writes leave it as it is)."""
        return self._notices.version(others=True)

    def wait_queue_change(self, version: int, timeout: float) -> bool:
        """Block this thread until `queue_version()` passes `version` (True) or `timeout` seconds (False):
        an idle worker's wait for work or a cancel, woken by the store's notices instead of a poll."""
        return self._notices.wait_past(version, timeout, others=True)

    def change_version(self) -> int:
        """A number that changes whenever any process changed a job, this one included (a dashboard's look)."""
        return self._notices.version()

    def wait_change(self, version: int, timeout: float) -> bool:
        """Block this thread until `change_version()` passes `version` (True) or `timeout` seconds (False)."""
        return self._notices.wait_past(version, timeout)

    def applied_migrations(self) -> list[str]:
        return [str(r[0]) for r in self._exec("SELECT name FROM migrations ORDER BY name")[0]]

    # jobs -------------------------------------------------------------------------------

    def insert_job(
        self,
        job_id: str,
        agent: str,
        kind: str,
        request: dict[str, Any],
        model: str | None,
        cwd: str | None,
        *,
        owner: tuple[int, int | None] | None = None,
        principal: str = "local",
        labels: Sequence[str] = (),
        retry: str | None = None,
    ) -> None:
        """Record a queued job of `principal`, owned from its first instant by `owner` (pid, start ticks) when given
        (an in-process task; a CLI job is owned by the worker that claims it), needing `labels` of its worker."""
        owner_pid, owner_ticks = owner if owner is not None else (None, None)
        self._exec(
            "INSERT INTO jobs (id, agent, kind, status, request, model, cwd, session_id, created_at,"
            " owner_pid, owner_start_ticks, principal, labels, retry)"
            " VALUES (%s, %s, %s, 'queued', %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                job_id,
                agent,
                kind,
                json.dumps(request),
                model,
                cwd,
                request.get("session_id"),
                time.time(),
                owner_pid,
                owner_ticks,
                principal,
                json.dumps(sorted(labels)) if labels else None,
                retry,
            ),
        )
        self.audit.record("queued", job_id, queued_data(agent, kind, request, model, cwd) | {"principal": principal})

    def mark_running(
        self,
        job_id: str,
        *,
        pid: int | None,
        pid_start_ticks: int | None,
        boot_id: str | None,
        owner_pid: int,
        owner_start_ticks: int | None,
        deadline_at: float | None,
        idle_timeout_s: float | None,
        epoch: int | None = None,
    ) -> bool:
        """The job's process runs; with `epoch`, only while the job's claim is still that one (else False)."""
        fence, fenced = _fence(epoch)
        _, changed = self._exec(
            "UPDATE jobs SET status='running', started_at=%s, pid=%s, pid_start_ticks=%s, boot_id=%s, owner_pid=%s,"
            f" owner_start_ticks=%s, deadline_at=%s, idle_timeout_s=%s WHERE id=%s AND status IN ('queued', 'running'){fence}",
            (
                time.time(),
                pid,
                pid_start_ticks,
                boot_id,
                owner_pid,
                owner_start_ticks,
                deadline_at,
                idle_timeout_s,
                job_id,
                *fenced,
            ),
        )
        if changed != 1:
            return False
        self.audit.record("running", job_id, {"pid": pid})
        return True

    def request_cancel(self, job_id: str) -> None:
        self._exec("UPDATE jobs SET cancel_requested=true WHERE id=%s", (job_id,))

    def set_stop_reason(self, job_id: str, reason: str) -> None:
        """Record why relay is stopping a job (cancelled / timed_out) before it kills it."""
        self._exec("UPDATE jobs SET stop_reason=COALESCE(stop_reason, %s) WHERE id=%s", (reason, job_id))

    def set_session(self, job_id: str, session_id: str) -> None:
        self._exec("UPDATE jobs SET session_id=%s WHERE id=%s", (session_id, job_id))

    def finish_job(
        self,
        job_id: str,
        status: str,
        *,
        exit_code: int | None,
        result: dict[str, Any] | None,
        error: dict[str, Any] | None,
        session_id: str | None,
        model: str | None,
        output: str | None = None,
        session: SessionTurn | None = None,
        epoch: int | None = None,
        fence: bool = False,
        output_chars: int | None = None,
    ) -> bool:
        """Write the final state once (and its audit entry, with `output`); False if another process finished it first.

        `session`: the agent session's turn, counted in the same transaction as the final state (one commit).
        `epoch`: only while the job's claim is still that one (a worker whose lease was taken over is refused);
        `fence`: and end that claim (a lost worker's job: nothing it writes later is taken).
        `output_chars`: the output's length when `output` is already bounded (a text too large to hold).
        """
        guard, fenced = _fence(epoch)
        params = (
            status,
            time.time(),
            exit_code,
            json.dumps(result) if result is not None else None,
            json.dumps(error) if error is not None else None,
            session_id,
            model,
            int(fence),
            job_id,
            *fenced,
        )
        with self._tx() as conn:
            cur = conn.execute(
                "UPDATE jobs SET status=%s, finished_at=%s, exit_code=%s, result=%s, error=%s,"
                " session_id=COALESCE(%s, session_id), model=COALESCE(%s, model), epoch=epoch+%s"
                f" WHERE id=%s AND status IN ('queued', 'running'){guard}",
                params,
            )
            changed = cur.rowcount == 1
            if changed and session is not None:
                conn.execute(_UPSERT_SESSION, session.params(time.time()))
        if not changed:
            return False
        done = finished_data(
            status,
            exit_code=exit_code,
            result=result,
            error=error,
            model=model,
            session_id=session_id,
            output=output,
            output_chars=output_chars,
        )
        self.audit.record(status, job_id, done)
        return True

    def get_job(self, job_id: str, *, principal: str | None = None) -> JobRecord | None:
        """The job `job_id`; with `principal`, only if that principal started it (else None, as for no job)."""
        where, params = _of(principal)
        jobs = self._jobs(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id=%s{where}", (job_id, *params))
        return jobs[0] if jobs else None

    def find_jobs(self, prefix: str, *, principal: str | None = None) -> list[JobRecord]:
        """Jobs whose id starts with `prefix` (at most 5; with `principal`, only its own): a range on the key."""
        where, params = _of(principal)
        return self._jobs(
            f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id >= %s AND id < %s{where} ORDER BY id LIMIT 5",
            (prefix, prefix + "\U0010ffff", *params),
        )

    def list_jobs(
        self,
        *,
        statuses: Iterable[str] = (),
        agent: str | None = None,
        since: float | None = None,
        session_id: str | None = None,
        limit: int = 50,
        before: tuple[float, str] | None = None,
        via: str | None = None,
        principal: str | None = None,
    ) -> list[JobRecord]:
        """Jobs newest first (ties by id); `before` = (created_at, id) of the last job of the previous page."""
        where: list[LiteralString] = []
        params: list[Any] = []
        if principal is not None:
            where.append("principal = %s")
            params.append(principal)
        if before is not None:
            where.append("(created_at, id) < (%s, %s)")
            params += [before[0], before[1]]
        status_list = list(statuses)
        if status_list:
            where.append("status = ANY(%s)")
            params.append(status_list)
        if agent:
            where.append("agent = %s")
            params.append(agent)
        if since is not None:
            where.append("created_at >= %s")
            params.append(since)
        if session_id:
            where.append("session_id = %s")
            params.append(session_id)
        if via:
            where.append("substr(request::json ->> 'via', 1, %s) = %s")
            params += [len(via), via]
        clause: LiteralString = f" WHERE {' AND '.join(where)}" if where else ""
        params.append(limit)
        return self._jobs(f"SELECT {_JOB_COLUMNS} FROM jobs{clause} ORDER BY created_at DESC, id DESC LIMIT %s", params)

    def active_jobs_of_host(self, boot_id: str | None) -> list[JobRecord]:
        """The active jobs a process of the host `boot_id` may have to adopt (claims.OF_HOST), newest first."""
        sql: LiteralString = f"SELECT {_JOB_COLUMNS} FROM jobs WHERE {OF_HOST_PG} ORDER BY created_at DESC, id DESC"
        return self._jobs(sql, (boot_id,))

    def _jobs(self, sql: LiteralString, params: Sequence[Any]) -> list[JobRecord]:
        return [_job(r) for r in self._exec(sql, params)[0]]

    # events -----------------------------------------------------------------------------

    def add_events(
        self,
        job_id: str,
        first_seq: int,
        events: Sequence[Event],
        *,
        session_id: str | None = None,
        epoch: int | None = None,
    ) -> bool:
        """Store events (one statement, one commit for the batch), and the job's session id when it is new;
        with `epoch`, only while the job's claim is still that one (else nothing is stored: False)."""
        if not events and session_id is None:
            return True
        seqs = [first_seq + i for i in range(len(events))]
        types = [e.type for e in events]
        data = [json.dumps(e.data, default=str) for e in events]
        fence, fenced = _fence(epoch)
        # Pipelined: the statements and the commit go in one round trip. With `epoch`, the first locks the job's
        # row until the commit (a take-over cannot change its epoch in between) and the others write only under
        # that epoch.
        with self._conn() as conn, conn.pipeline():
            with conn.transaction():
                lock = (
                    conn.execute("SELECT epoch FROM jobs WHERE id=%s FOR NO KEY UPDATE", (job_id,))
                    if epoch is not None
                    else None
                )
                if events:
                    sql = _ADD_EVENTS + fence + _ADD_EVENTS_END
                    conn.execute(sql, (job_id, time.time(), seqs, types, data, job_id, *fenced))
                if session_id is not None:
                    conn.execute("UPDATE jobs SET session_id=%s WHERE id=%s" + fence, (session_id, job_id, *fenced))
            row = lock.fetchone() if lock is not None else None
        return lock is None or (row is not None and row[0] == epoch)

    def max_event_seq(self, job_id: str) -> int:
        rows, _ = self._exec("SELECT MAX(seq) FROM events WHERE job_id=%s", (job_id,))
        return int(rows[0][0]) if rows and rows[0][0] is not None else -1

    def events(self, job_id: str, after_seq: int = -1, limit: int = 1000) -> list[tuple[int, float, Event]]:
        rows, _ = self._exec(
            "SELECT seq, ts, type, data FROM events WHERE job_id=%s AND seq>%s ORDER BY seq LIMIT %s",
            (job_id, after_seq, limit),
        )
        return [(int(r[0]), float(r[1]), Event(r[2], json.loads(r[3]))) for r in rows]

    # outputs ----------------------------------------------------------------------------

    def append_output(self, job_id: str, stream: str, data: bytes, *, epoch: int | None = None) -> int:
        """Append to a job's output stream (stdout/stderr/transcript/result) in chunks; its length after.

        Each append lands whole after the stream's last chunk: one chunk (what the mirror writes) in one
        statement, more in one transaction. Two appenders at once collide on (job, stream, seq); the one
        that lost appends again after the other's chunks. With `epoch`: only under that claim, the job's row
        share-locked to the commit (a take-over or an end waits for it); -1 when refused."""
        outputs.check_stream(stream)
        for _ in range(APPEND_TRIES):
            with self._conn() as conn:
                try:
                    if epoch is not None:
                        return self._append_fenced(conn, job_id, stream, data, epoch)
                    if len(data) <= outputs.CHUNK_BYTES:
                        row = conn.execute(_APPEND_CHUNK, (job_id, stream, len(data), data, job_id, stream)).fetchone()
                        return int(row[0]) if row else 0
                    with conn.transaction():
                        row = conn.execute(_LAST_CHUNK, (job_id, stream)).fetchone()
                        seq, total = (int(row[0]), int(row[1])) if row else (0, 0)
                        for at, piece in outputs.pieces(data, total):
                            conn.execute(_INSERT_CHUNK, (job_id, stream, seq, at, len(piece), piece))
                            seq += 1
                    return total + len(data)
                except psycopg.errors.UniqueViolation:
                    continue
        raise RelayError(
            ErrorCode.STORE_BUSY,
            f"output of job {job_id} ({stream}) was not appended: {APPEND_TRIES} other appends came first",
            "one process writes a job's output: look for a second worker holding the same job",
        )

    def _append_fenced(self, conn: Conn, job_id: str, stream: str, data: bytes, epoch: int) -> int:
        with conn.transaction():
            if conn.execute(_UNDER_EPOCH, (job_id, epoch)).fetchone() is None:
                return -1
            row = conn.execute(_LAST_CHUNK, (job_id, stream)).fetchone()
            seq, total = (int(row[0]), int(row[1])) if row else (0, 0)
            for at, piece in outputs.pieces(data, total):
                conn.execute(_INSERT_CHUNK, (job_id, stream, seq, at, len(piece), piece))
                seq += 1
        return total + len(data)

    def read_output_page(self, job_id: str, stream: str, offset: int, limit: int) -> tuple[bytes, int]:
        """Up to `limit` bytes of a job's output stream from `offset`, and the stream's whole length."""
        outputs.check_stream(stream)
        outputs.check_page(offset, limit)
        end = outputs.page_end(offset, limit)
        low = offset - outputs.CHUNK_BYTES  # no chunk that starts this early reaches `offset`: the index's bound
        with self._tx() as conn:
            cur = conn.cursor(binary=True)
            cur.execute(_READ_PAGE, (offset, end, offset, job_id, stream, offset, low, end))
            parts = [bytes(r[0]) for r in cur]
            total = conn.execute(_TOTAL, (job_id, stream)).fetchone()
        return b"".join(parts), int(total[0]) if total else 0

    def output_sizes(self, job_id: str) -> dict[str, int]:
        """How many bytes of each output stream of a job the store holds (one read for all four)."""
        rows, _ = self._exec(_SIZES, (job_id,))
        return outputs.sizes(rows)

    # sessions ---------------------------------------------------------------------------

    def upsert_session(
        self,
        agent: str,
        session_id: str,
        *,
        cwd: str,
        model: str | None,
        permission: str,
        title: str,
        cost: float,
    ) -> None:
        turn = SessionTurn(agent, session_id, cwd, model, permission, title, cost)
        self._exec(_UPSERT_SESSION, turn.params(time.time()))

    def get_session(
        self, session_id: str, agent: str | None = None, *, principal: str | None = None
    ) -> SessionRecord | None:
        """An agent session (of `agent` when given; with `principal`, only one that principal started)."""
        where, params = _of(principal)
        if agent:
            where += " AND agent=%s"
            params = (*params, agent)
        rows = self._sessions(f"SELECT * FROM sessions WHERE session_id=%s{where}", (session_id, *params))
        return rows[0] if rows else None

    def list_sessions(
        self, *, agent: str | None = None, limit: int = 50, principal: str | None = None
    ) -> list[SessionRecord]:
        """Agent sessions, last used first (of `agent`; with `principal`, the ones it started)."""
        where, params = _of(principal)
        if agent:
            where += " AND agent=%s"
            params = (*params, agent)
        return self._sessions(
            f"SELECT * FROM sessions WHERE true{where} ORDER BY last_used_at DESC LIMIT %s", (*params, limit)
        )

    def _sessions(self, sql: LiteralString, params: Sequence[Any]) -> list[SessionRecord]:
        with self._conn() as conn:
            cur = conn.cursor(row_factory=dict_row)
            return [SessionRecord(**row) for row in cur.execute(sql, params)]


def _fence(epoch: int | None) -> tuple[LiteralString, tuple[Any, ...]]:
    """The condition (after a WHERE) that holds only under the claim of `epoch`; nothing for None."""
    return (" AND epoch=%s", (epoch,)) if epoch is not None else ("", ())


def _of(principal: str | None) -> tuple[LiteralString, tuple[Any, ...]]:
    """The condition (after a WHERE) that keeps one principal's rows; nothing for None (every principal's)."""
    return (" AND principal=%s", (principal,)) if principal is not None else ("", ())
