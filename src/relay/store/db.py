"""The SQLite store. One connection per process, WAL so CLI readers never block the server."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Generator, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from relay.audit import AuditLog, finished_data, open_audit, queued_data
from relay.events import Event
from relay.osfiles import private
from relay.store import outputs
from relay.store.claims import OF_HOST, Claims
from relay.store.connect import open_sqlite, prepare_home
from relay.store.health import sqlite_error
from relay.store.release import large, unbind

# How long a writer waits for another process's transaction before "database is locked".
BUSY_TIMEOUT_MS = 10_000

ACTIVE_STATUSES = ("queued", "running")
FINAL_STATUSES = ("completed", "failed", "cancelled", "timed_out", "interrupted")


@dataclass(frozen=True)
class JobRecord:
    """A job row. Its JSON columns are decoded on first use: a list of 500 jobs decodes only what it shows."""

    id: str
    agent: str
    kind: str
    status: str
    request_json: str
    model: str | None
    cwd: str | None
    session_id: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    deadline_at: float | None
    idle_timeout_s: float | None
    pid: int | None
    pid_start_ticks: int | None
    boot_id: str | None
    owner_pid: int | None
    owner_start_ticks: int | None
    cancel_requested: bool
    stop_reason: str | None
    exit_code: int | None
    result_json: str | None
    error_json: str | None
    # Who started it (relay/principal.py): the local user for stdio, the CLI and rows from before principals.
    principal: str = "local"
    # The claim it runs under (store/claims.py): the worker holding it and the fencing epoch of that claim.
    worker: str | None = None
    epoch: int = 0

    @property
    def is_final(self) -> bool:
        return self.status in FINAL_STATUSES

    @cached_property
    def request(self) -> dict[str, Any]:
        return json.loads(self.request_json) if self.request_json else {}

    @cached_property
    def result(self) -> dict[str, Any] | None:
        return json.loads(self.result_json) if self.result_json else None

    @cached_property
    def error(self) -> dict[str, Any] | None:
        return json.loads(self.error_json) if self.error_json else None


@dataclass(frozen=True)
class SessionRecord:
    agent: str
    session_id: str
    cwd: str
    model: str | None
    permission: str
    title: str
    turns: int
    total_cost_usd: float
    created_at: float
    last_used_at: float
    principal: str = "local"


@dataclass(frozen=True)
class SessionTurn:
    """One more turn of an agent session, as a finished job counts it."""

    agent: str
    session_id: str
    cwd: str
    model: str | None
    permission: str
    title: str
    cost: float
    principal: str = "local"

    def params(self, now: float) -> tuple[Any, ...]:
        return (
            self.agent,
            self.session_id,
            self.cwd,
            self.model,
            self.permission,
            self.title,
            self.cost,
            now,
            now,
            self.principal,
        )


# The highest audit entry written, whichever process wrote it (entries are appended under the log's lock).
_MARK_AUDIT = (
    "INSERT INTO audit_mark (id, seq, hash, updated_at) VALUES (1, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET"
    " seq=excluded.seq, hash=excluded.hash, updated_at=excluded.updated_at WHERE excluded.seq >= audit_mark.seq"
)

_UPSERT_SESSION = (
    "INSERT INTO sessions (agent, session_id, cwd, model, permission, title, turns, total_cost_usd,"
    " created_at, last_used_at, principal) VALUES (?,?,?,?,?,?,1,?,?,?,?)"
    " ON CONFLICT(agent, session_id) DO UPDATE SET turns=turns+1, total_cost_usd=total_cost_usd+excluded.total_cost_usd,"
    " last_used_at=excluded.last_used_at, model=COALESCE(excluded.model, model)"
)


# The jobs columns in JobRecord's field order (named, so a column added later cannot shift them).
JOB_COLUMNS = (
    "id, agent, kind, status, request, model, cwd, session_id, created_at, started_at, finished_at, deadline_at,"
    " idle_timeout_s, pid, pid_start_ticks, boot_id, owner_pid, owner_start_ticks, cancel_requested, stop_reason,"
    " exit_code, result, error, principal, worker, epoch"
)


def _job(r: tuple[Any, ...]) -> JobRecord:
    # r holds the 26 columns of JOB_COLUMNS, in JobRecord's field order (cancel_requested, 19th, is 0/1).
    return JobRecord(*r[:18], bool(r[18]), *r[19:])  # pyright: ignore[reportCallIssue]


class _Rows:
    """A statement's rows, fetched while the store's lock was held, and how many rows it changed."""

    def __init__(self, rows: list[sqlite3.Row], rowcount: int) -> None:
        self.rows = rows
        self.rowcount = rowcount

    def fetchone(self) -> sqlite3.Row | None:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[sqlite3.Row]:
        return self.rows

    def __iter__(self) -> Iterator[sqlite3.Row]:
        return iter(self.rows)


class Store(Claims):
    """Typed access to relay.db. Safe to share between the event loop and worker threads."""

    spans_hosts = False  # one file in one home: the jobs' files are beside it

    def __init__(self, path: Path, audit: AuditLog | None = None) -> None:
        prepare_home(path)
        self.path = path
        # Every job state change written here is also an entry in the audit log next to the database.
        self.audit = audit if audit is not None else open_audit(path.parent)
        self._lock = threading.RLock()
        self._busy_s = BUSY_TIMEOUT_MS / 1000
        self._db = open_sqlite(path, self._busy_s)
        for made in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            private(made)  # SQLite makes the -wal and -shm files with the database file's mode
        self.audit.marks.append(self._mark_audit)

    def close(self) -> None:
        with suppress(ValueError):
            self.audit.marks.remove(self._mark_audit)
        with self._lock:
            self._db.close()

    def _mark_audit(self, seq: int, line_hash: str) -> None:
        self._exec(_MARK_AUDIT, (seq, line_hash, time.time()))

    @contextmanager
    def _running(self, sql: str, params: Sequence[Any]) -> Generator[sqlite3.Connection]:
        """The connection, under the lock, for what runs `sql` with `params`: a SQLite failure becomes a
        RelayError, and a large bound value is let go afterwards (store/release.py)."""
        with self._lock:
            try:
                yield self._db
            except sqlite3.Error as exc:
                raise sqlite_error(exc, self.path, self._busy_s) from None
            finally:
                if large(params):
                    unbind(self._db, sql, len(params))

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> _Rows:
        """Run one statement and fetch its rows under the lock; a SQLite failure becomes a RelayError."""
        with self._running(sql, params) as db:
            cur = db.execute(sql, params)
            return _Rows(cur.fetchall(), cur.rowcount)

    def applied_migrations(self) -> list[str]:
        return [r[0] for r in self._exec("SELECT name FROM migrations ORDER BY name")]

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
            " VALUES (?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
        """The job's process runs; with `epoch`, only while the job's claim is still that one, and never once it ended
        (a cancel that ended a claimed job before its spawn): False then."""
        fence, fenced = _fence(epoch)
        cur = self._exec(
            "UPDATE jobs SET status='running', started_at=?, pid=?, pid_start_ticks=?, boot_id=?, owner_pid=?,"
            f" owner_start_ticks=?, deadline_at=?, idle_timeout_s=? WHERE id=? AND status IN ('queued', 'running'){fence}",
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
        if cur.rowcount != 1:
            return False
        self.audit.record("running", job_id, {"pid": pid})
        return True

    def request_cancel(self, job_id: str) -> None:
        self._exec("UPDATE jobs SET cancel_requested=1 WHERE id=?", (job_id,))

    def set_stop_reason(self, job_id: str, reason: str) -> None:
        """Record why relay is stopping a job (cancelled / timed_out) before it kills it."""
        self._exec("UPDATE jobs SET stop_reason=COALESCE(stop_reason, ?) WHERE id=?", (reason, job_id))

    def set_session(self, job_id: str, session_id: str) -> None:
        self._exec("UPDATE jobs SET session_id=? WHERE id=?", (session_id, job_id))

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
        sql = (
            "UPDATE jobs SET status=?, finished_at=?, exit_code=?, result=?, error=?,"
            " session_id=COALESCE(?, session_id), model=COALESCE(?, model), epoch=epoch+?"
            f" WHERE id=? AND status IN ('queued', 'running'){guard}"
        )
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
        with self._running(sql, params) as db, self._transaction():
            changed = db.execute(sql, params).rowcount == 1
            if changed and session is not None:
                db.execute(_UPSERT_SESSION, session.params(time.time()))
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
        jobs = self._jobs(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id=?{where}", (job_id, *params))
        return jobs[0] if jobs else None

    def find_jobs(self, prefix: str, *, principal: str | None = None) -> list[JobRecord]:
        """Jobs whose id starts with `prefix` (at most 5; with `principal`, only its own): a range on the
        primary key, never a scan."""
        where, params = _of(principal)
        return self._jobs(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE id >= ? AND id < ?{where} ORDER BY id LIMIT 5",
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
        """Jobs newest first (ties by id); `before` = (created_at, id) of the last job of the previous page.

        `via` keeps the jobs whose request's `via` starts with it ("core/", "powerspawn/spawn_codex");
        `principal` the jobs that principal started.
        """
        where: list[str] = []
        params: list[Any] = []
        if principal is not None:
            where.append("principal = ?")
            params.append(principal)
        if before is not None:
            where.append("(created_at, id) < (?, ?)")
            params += [before[0], before[1]]
        status_list = list(statuses)
        if status_list:
            where.append(f"status IN ({','.join('?' * len(status_list))})")
            params += status_list
        if agent:
            where.append("agent = ?")
            params.append(agent)
        if since is not None:
            where.append("created_at >= ?")
            params.append(since)
        if session_id:
            where.append("session_id = ?")
            params.append(session_id)
        if via:
            where.append("substr(json_extract(request, '$.via'), 1, ?) = ?")
            params += [len(via), via]
        sql = f"SELECT {JOB_COLUMNS} FROM jobs" + (f" WHERE {' AND '.join(where)}" if where else "")
        sql += " ORDER BY created_at DESC, id DESC LIMIT ?"
        params.append(limit)
        return self._jobs(sql, params)

    def active_jobs_of_host(self, boot_id: str | None) -> list[JobRecord]:
        """The active jobs a process of the host `boot_id` may have to adopt (claims.OF_HOST), newest first."""
        return self._jobs(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE {OF_HOST} ORDER BY created_at DESC, id DESC", (boot_id,)
        )

    def _jobs(self, sql: str, params: Sequence[Any]) -> list[JobRecord]:
        """Job rows as records, read as plain tuples (no per-row dict) under the lock."""
        with self._running(sql, params) as db:
            cur = db.cursor()
            cur.row_factory = None
            rows: list[tuple[Any, ...]] = cur.execute(sql, params).fetchall()
        return [_job(r) for r in rows]

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
        """Store events (one transaction: one commit for the batch), and the job's session id when it is new;
        with `epoch`, only while the job's claim is still that one (else nothing is stored: False)."""
        if not events and session_id is None:
            return True
        now = time.time()
        rows = [(job_id, first_seq + i, now, e.type, json.dumps(e.data, default=str)) for i, e in enumerate(events)]
        sql = "INSERT OR IGNORE INTO events (job_id, seq, ts, type, data) VALUES (?,?,?,?,?)"
        with self._running(sql, rows[-1] if rows else ()) as db, self._transaction(immediate=epoch is not None):
            if epoch is not None:
                row = db.execute("SELECT epoch FROM jobs WHERE id=?", (job_id,)).fetchone()
                if row is None or row[0] != epoch:
                    return False
            if rows:
                db.executemany(sql, rows)
            if session_id is not None:
                db.execute("UPDATE jobs SET session_id=? WHERE id=?", (session_id, job_id))
        return True

    @contextmanager
    def _transaction(self, *, immediate: bool = False) -> Generator[None]:
        """One explicit transaction (the connection autocommits each statement otherwise, each a commit).
        `immediate`: it reads before it writes, so it takes the write lock at its start (a read transaction that
        turns into a write one after another process wrote fails at once instead of waiting its turn)."""
        self._db.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
        try:
            yield
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:  # a failed statement or commit (disk full, busy) leaves nothing half-done
                with suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
            raise

    def max_event_seq(self, job_id: str) -> int:
        row = self._exec("SELECT MAX(seq) FROM events WHERE job_id=?", (job_id,)).fetchone()
        return int(row[0]) if row and row[0] is not None else -1

    def events(self, job_id: str, after_seq: int = -1, limit: int = 1000) -> list[tuple[int, float, Event]]:
        rows = self._exec(
            "SELECT seq, ts, type, data FROM events WHERE job_id=? AND seq>? ORDER BY seq LIMIT ?",
            (job_id, after_seq, limit),
        ).fetchall()
        return [(int(r[0]), float(r[1]), Event(r[2], json.loads(r[3]))) for r in rows]

    # outputs ----------------------------------------------------------------------------

    def append_output(self, job_id: str, stream: str, data: bytes, *, epoch: int | None = None) -> int:
        """Append to a job's output stream (stdout/stderr/transcript/result) in chunks; its length after. With
        `epoch`: only under that claim (-1: refused, the job's claim is another's or it ended)."""
        # The chunk's parameters, so that a large chunk bound to the cached statement is let go afterwards.
        with self._running(outputs.INSERT_CHUNK, (job_id, stream, 0, 0, 0, data)) as db:
            return outputs.append(db, job_id, stream, data, epoch)

    def read_output_page(self, job_id: str, stream: str, offset: int, limit: int) -> tuple[bytes, int]:
        """Up to `limit` bytes of a job's output stream from `offset`, and the stream's whole length."""
        with self._running(outputs.READ_PAGE, ()) as db:
            return outputs.read_page(db, job_id, stream, offset, limit)

    def output_sizes(self, job_id: str) -> dict[str, int]:
        """How many bytes of each output stream of a job the store holds (one read for all four)."""
        with self._running(outputs.SIZES, (job_id,)) as db:
            return outputs.sizes(db.execute(outputs.SIZES, (job_id,)).fetchall())

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
            where += " AND agent=?"
            params = (*params, agent)
        row = self._exec(f"SELECT * FROM sessions WHERE session_id=?{where}", (session_id, *params)).fetchone()
        return SessionRecord(**dict(row)) if row else None

    def list_sessions(
        self, *, agent: str | None = None, limit: int = 50, principal: str | None = None
    ) -> list[SessionRecord]:
        """Agent sessions, last used first (of `agent`; with `principal`, the ones it started)."""
        where, params = _of(principal)
        if agent:
            where += " AND agent=?"
            params = (*params, agent)
        rows = self._exec(
            f"SELECT * FROM sessions WHERE 1=1{where} ORDER BY last_used_at DESC LIMIT ?", (*params, limit)
        ).fetchall()
        return [SessionRecord(**dict(r)) for r in rows]


@dataclass(frozen=True)
class AuditExpectation:
    """What the store knows of the audit log: the last entry relay wrote (seq, hash), and how many jobs it holds."""

    mark: tuple[int, str] | None
    jobs: int


def audit_expectation(path: Path) -> AuditExpectation:
    """Read, without creating or migrating anything, what relay.db at `path` records about the audit log."""
    if not path.exists():
        return AuditExpectation(None, 0)
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
    except sqlite3.Error:
        return AuditExpectation(None, 0)
    try:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        jobs = db.execute("SELECT count(*) FROM jobs").fetchone()[0] if "jobs" in tables else 0
        row = db.execute("SELECT seq, hash FROM audit_mark WHERE id=1").fetchone() if "audit_mark" in tables else None
        return AuditExpectation((int(row[0]), str(row[1])) if row else None, int(jobs))
    except sqlite3.Error:
        return AuditExpectation(None, 0)
    finally:
        db.close()


def _fence(epoch: int | None) -> tuple[str, tuple[Any, ...]]:
    """The condition (after a WHERE) that holds only under the claim of `epoch`; nothing for None."""
    return (" AND epoch=?", (epoch,)) if epoch is not None else ("", ())


def _of(principal: str | None) -> tuple[str, tuple[Any, ...]]:
    """The condition (after a WHERE) that keeps one principal's rows; nothing for None (every principal's)."""
    return (" AND principal=?", (principal,)) if principal is not None else ("", ())
