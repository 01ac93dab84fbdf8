"""The job store's one body: jobs, events, outputs and agent sessions, written once for SQLite and PostgreSQL.

Every method runs its statements through `self._db`, a store/dialect.py `Conn` (store/sqlite_conn.py or
store/pg/conn.py), with `?` marks and the few spellings that differ taken from its `Dialect`. Each public
call is timed into the store_call metric (dialect.timed). A method that writes several statements sends
them as one batch: one transaction, one round trip on PostgreSQL.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from relay.audit import queued_data
from relay.events import Event
from relay.store import outputs
from relay.store.dialect import Conflict, OverConn, Rows, Step, marks, timed
from relay.store.jobwrite import End, JobWrite, Written
from relay.store.marks import Riding
from relay.store.queue import ClaimAsk
from relay.store.records import JOB_COLUMNS, JobRecord, NewJob, SessionRecord, SessionTurn, job_of

# The active jobs whose owner a process of one host may find dead and adopt (jobs/recovery.py): claimed by a
# worker of that host (its boot id, the one parameter) or by one the workers table does not know, or running
# with no worker (an in-process task, a row from before claims). Another host's worker is judged by its lease.
OF_HOST = (
    "status IN ('queued', 'running') AND ((worker IS NULL AND status = 'running')"
    " OR worker IN (SELECT id FROM workers WHERE boot_id IS ?)"
    " OR (worker IS NOT NULL AND worker NOT IN (SELECT id FROM workers)))"
)
UPSERT_SESSION = (
    "INSERT INTO sessions (agent, session_id, cwd, model, permission, title, turns, total_cost_usd,"
    " created_at, last_used_at, principal) VALUES (?,?,?,?,?,?,1,?,?,?,?)"
    " ON CONFLICT (agent, session_id) DO UPDATE SET turns=sessions.turns+1,"
    " total_cost_usd=sessions.total_cost_usd+excluded.total_cost_usd,"
    " last_used_at=excluded.last_used_at, model=COALESCE(excluded.model, sessions.model)"
)
SESSION_COLUMNS = (
    "agent, session_id, cwd, model, permission, title, turns, total_cost_usd, created_at, last_used_at, principal"
)
INSERT_JOB = (
    "INSERT INTO jobs (id, agent, kind, status, request, model, cwd, session_id, created_at,"
    " owner_pid, owner_start_ticks, principal, labels, retry) VALUES (?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
MARK_RUNNING = (
    "UPDATE jobs SET status='running', started_at=?, pid=?, pid_start_ticks=?, boot_id=?, owner_pid=?,"
    " owner_start_ticks=?, deadline_at=?, idle_timeout_s=? WHERE id=? AND status IN ('queued', 'running')"
)
FINISH_JOB = (
    "UPDATE jobs SET status=?, finished_at=?, exit_code=?, result=?, error=?,"
    " session_id=COALESCE(?, session_id), model=COALESCE(?, model), epoch=epoch+?"
    " WHERE id=? AND status IN ('queued', 'running')"
)
# A turn of the job's agent session, counted only when the job's end above was written (same transaction).
UPSERT_SESSION_OF_END = UPSERT_SESSION.replace(
    "VALUES (?,?,?,?,?,?,1,?,?,?,?)",
    "SELECT ?,?,?,?,?,?,1,?,?,?,? WHERE EXISTS (SELECT 1 FROM jobs WHERE id=? AND finished_at=?)",
)
# Events under a fence (the job exists; with an epoch, `AND epoch=?` closes the parenthesis), a seq stored once.
ADD_EVENT = (
    "INSERT INTO events (job_id, seq, ts, type, data) SELECT ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM jobs WHERE id=?"
)
ADD_EVENT_END = ") ON CONFLICT (job_id, seq) DO NOTHING"
# A write of a job's running state (its events, its session id) together with others: only while it is active.
ACTIVE = " AND status IN ('queued', 'running')"
SET_SESSION = "UPDATE jobs SET session_id=? WHERE id=?"
# The statements that change a job's row (the store's copy of it is then refreshed from what the last returns).
JOB_WRITES = ("UPDATE jobs", "INSERT INTO jobs", "DELETE FROM jobs")
# The last chunk of a stream: the next seq, and the stream's length so far.
LAST_CHUNK = "SELECT seq + 1, byte_offset + size FROM outputs WHERE job_id=? AND stream=? ORDER BY seq DESC LIMIT 1"
INSERT_CHUNK = "INSERT INTO outputs (job_id, stream, seq, byte_offset, size, data) VALUES (?, ?, ?, ?, ?, ?)"
# One chunk after the stream's last, in one statement; two appenders at once collide on (job, stream, seq).
APPEND_CHUNK = (
    "INSERT INTO outputs (job_id, stream, seq, byte_offset, size, data)"
    " SELECT ?, ?, COALESCE(last.seq + 1, 0), COALESCE(last.byte_offset + last.size, 0), ?, ?"
    " FROM (SELECT 1 AS one) AS one LEFT JOIN (SELECT seq, byte_offset, size FROM outputs"
    " WHERE job_id=? AND stream=? ORDER BY seq DESC LIMIT 1) AS last ON true{under}"
    " RETURNING byte_offset + size"
)
# The job is still under the claim of an epoch (params: job id, epoch): an append carrying it lands.
UNDER_EPOCH = "SELECT 1 FROM jobs WHERE id=? AND epoch=? AND status IN ('queued', 'running')"
TOTAL = "SELECT COALESCE(MAX(byte_offset + size), 0) FROM outputs WHERE job_id=? AND stream=?"
# Every stream's length so far (the streams with no chunk yet are left out).
SIZES = "SELECT stream, MAX(byte_offset + size) FROM outputs WHERE job_id=? GROUP BY stream"
# How often an append is tried again after another appender took its seq.
APPEND_TRIES = 100


def read_page_sql(greatest: str, least: str) -> str:
    """The part of each chunk inside [start, end): chunks that end after `start` and begin before `end` (and so
    after `start - CHUNK_BYTES`: the bound the offset index seeks to). Parameters: start, end, start, job_id,
    stream, start, start - CHUNK_BYTES, end."""
    return (
        f"SELECT substr(data, CAST({greatest}(? - byte_offset, 0) AS INTEGER) + 1,"
        f" CAST({least}(byte_offset + size, ?) - {greatest}(byte_offset, ?) AS INTEGER))"
        " FROM outputs WHERE job_id=? AND stream=? AND byte_offset + size > ? AND byte_offset > ? AND byte_offset < ?"
        " ORDER BY byte_offset"
    )


def fence(epoch: int | None) -> tuple[str, tuple[Any, ...]]:
    """The condition (after a WHERE) that holds only under the claim of `epoch`; nothing for None."""
    return (" AND epoch=?", (epoch,)) if epoch is not None else ("", ())


def of(principal: str | None) -> tuple[str, tuple[Any, ...]]:
    """The condition (after a WHERE) that keeps one principal's rows; nothing for None (every principal's)."""
    return (" AND principal=?", (principal,)) if principal is not None else ("", ())


class JobBody(Riding, OverConn):
    """Jobs, events, outputs and sessions over `_db` (mixed into each backend's store, which opens `_db`)."""

    _log: str  # the audit log's name in the mark table (SQLite keeps one mark)

    def _mark_audit(self, seq: int, line_hash: str) -> None:
        """The highest audit entry written, whichever process wrote it (entries are appended under the log's lock)."""
        self._db.exec(self._db.dialect.mark_audit, (self._log, seq, line_hash, time.time()))

    @timed
    def applied_migrations(self) -> list[str]:
        return [str(r[0]) for r in self._db.exec("SELECT name FROM migrations ORDER BY name")]

    # jobs -------------------------------------------------------------------------------

    @timed
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
        claim: ClaimAsk | None = None,
    ) -> list[tuple[str, str, int]]:
        """Record a queued job of `principal`, owned from its first instant by `owner` (pid, start ticks) when given
        (an in-process task; a CLI job is owned by the worker that claims it), needing `labels` of its worker.

        With `claim`, the insert and that claim go in one transaction: what the claim won is returned (else [])."""
        new = NewJob(job_id, agent, kind, request, model, cwd, owner, principal, labels, retry)
        return self._insert([new], claim)

    @timed
    def insert_jobs(self, jobs: Sequence[NewJob], claim: ClaimAsk | None) -> list[tuple[str, str, int]]:
        """`insert_job` of several jobs (submitted together): with `claim`, one transaction and one claim."""
        return self._insert(jobs, claim)

    def _insert(self, jobs: Sequence[NewJob], claim: ClaimAsk | None) -> list[tuple[str, str, int]]:
        now = time.time()
        steps = [Step(INSERT_JOB, job.row(now)) for job in jobs]
        won: list[tuple[str, str, int]] = []
        if claim is None:
            for job, step in zip(jobs, steps, strict=True):
                self._write_row(job.id, step.sql, step.params)
        else:
            won = self._insert_claiming([job.id for job in jobs], steps, claim)
        for job in jobs:
            data = queued_data(job.agent, job.kind, job.request, job.model, job.cwd)
            self.audit.record("queued", job.id, data | {"principal": job.principal})
        return won

    # ClaimsBody's (store/queue.py), and PostgreSQL's own (pg/store.py: its copy of the job)
    _insert_claiming: Callable[[Sequence[str], Sequence[Step], ClaimAsk], list[tuple[str, str, int]]]

    @timed
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
        guard, fenced = fence(epoch)
        params = (time.time(), pid, pid_start_ticks, boot_id, owner_pid, owner_start_ticks, deadline_at)
        if self._write_row(job_id, MARK_RUNNING + guard, (*params, idle_timeout_s, job_id, *fenced)).rowcount != 1:
            return False
        self.audit.record("running", job_id, {"pid": pid})
        return True

    @timed
    def request_cancel(self, job_id: str) -> None:
        self._db.exec("UPDATE jobs SET cancel_requested=true WHERE id=?", (job_id,))

    @timed
    def set_stop_reason(self, job_id: str, reason: str) -> None:
        """Record why relay is stopping a job (cancelled / timed_out) before it kills it."""
        self._db.exec("UPDATE jobs SET stop_reason=COALESCE(stop_reason, ?) WHERE id=?", (reason, job_id))

    @timed
    def set_session(self, job_id: str, session_id: str) -> None:
        self._db.exec("UPDATE jobs SET session_id=? WHERE id=?", (session_id, job_id))

    @timed
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

        `session`: the agent session's turn, counted in the same transaction as the final state (one commit, one
        round trip: the turn is counted only if this end was written).
        `epoch`: only while the job's claim is still that one (a worker whose lease was taken over is refused);
        `fence`: and end that claim (a lost worker's job: nothing it writes later is taken).
        `output_chars`: the output's length when `output` is already bounded (a text too large to hold).
        """
        end = End(status, exit_code, result, error, session_id, model, output, output_chars, session, fence)
        return self._write_job(JobWrite(job_id, epoch, end=end)).ended

    @timed
    def write_job(self, write: JobWrite) -> Written:
        """A job's running mark, events, session id, outputs and end (each part when given) in one transaction: one
        round trip on PostgreSQL. With `write.epoch`, the job's row is held from the first statement to the commit
        and every part lands only under that claim while the job is active (else nothing does: `held` False); the
        running mark, when sent, must land too. Each part's audit entry follows its commit, as the separate calls'."""
        for _ in range(APPEND_TRIES):
            try:
                done = self._write_job(write)
            except Conflict:  # another appender took a chunk's seq: nothing was written, all of it again
                continue
            return done
        raise Conflict(f"job {write.job_id} was not written: {APPEND_TRIES} other appends came first")

    def _write_job(self, w: JobWrite) -> Written:
        if w.empty:
            return Written(held=True)
        d = self._db.dialect
        guard, fenced = fence(w.epoch)
        now = time.time()
        steps: list[Step] = []
        # The row held first when more than the end goes (each later part is judged under one state of it).
        locked = w.epoch is not None and bool(w.running or w.events or w.session_id is not None or w.outputs)
        if locked:
            steps.append(self._hold(w.job_id))
        ran = len(steps)
        if (r := w.running) is not None:
            params = (r.at, r.pid, r.pid_start_ticks, r.boot_id, r.owner_pid, r.owner_start_ticks, r.deadline_at)
            steps.append(Step(MARK_RUNNING + guard, (*params, r.idle_timeout_s, w.job_id, *fenced)))
        # The end sets the session id the events announce (its COALESCE): no statement of its own then.
        session_id = None if w.end is not None and w.end.session_id == w.session_id else w.session_id
        steps += _event_steps(w.job_id, w.first_seq, w.events, session_id, guard + ACTIVE, fenced, now)
        under, held = (
            ("", ()) if w.epoch is None else (f" WHERE EXISTS ({UNDER_EPOCH}{d.for_share})", (w.job_id, w.epoch))
        )
        appended: list[tuple[str, int]] = []
        for stream, data in w.outputs:
            outputs.check_stream(stream)
            for _, piece in outputs.pieces(data, 0):
                appended.append((stream, len(steps)))
                params = (w.job_id, stream, len(piece), piece, w.job_id, stream, *held)
                steps.append(Step(APPEND_CHUNK.format(under=under), params))
        ended = len(steps)
        if (end := w.end) is not None:
            steps += self._end_steps(w.job_id, end, guard, (*fenced,), now)
        writes = [i for i, step in enumerate(steps) if step.sql.startswith(JOB_WRITES) and not step.many]
        if writes and self._keeps_jobs:  # the row as the last write left it: the store's copy of the job
            last = steps[writes[-1]]
            steps[writes[-1]] = last._replace(sql=f"{last.sql} RETURNING {JOB_COLUMNS}")
        stamp = self._stamp(w.job_id)
        done = self._batch_with_mark(steps, lock=locked)
        if locked:
            row = done[0].fetchone()
            if row is None or row[0] != w.epoch:
                return Written(held=False)
        if w.running is not None and done[ran].rowcount != 1:
            return Written(held=False)
        if writes and self._keeps_jobs:
            self._refresh(w.job_id, done[writes[-1]].fetchone(), stamp, len(writes))
        sizes: dict[str, int] = {}
        for stream, index in appended:
            got = done[index].fetchone()
            if got is not None:
                sizes[stream] = int(got[0])
        if w.running is not None:
            self.audit.record("running", w.job_id, {"pid": w.running.pid})
        finished = end is not None and done[ended].rowcount == 1
        if end is not None and finished:
            self.audit.record(end.status, w.job_id, end.audit_data())
        return Written(held=True, ended=finished, sizes=sizes)

    def _hold(self, job_id: str) -> Step:
        """The first statement of a write under a claim: reads the job's epoch and holds its row until the commit (a
        take-over cannot change it in between: SQLite's write lock, PostgreSQL's row lock)."""
        return Step(f"SELECT epoch FROM jobs WHERE id=?{self._db.dialect.for_key_share}", (job_id,))

    def _end_steps(self, job_id: str, end: End, guard: str, fenced: tuple[Any, ...], now: float) -> list[Step]:
        """The final state's UPDATE, and the session's turn counted only if it was written (same transaction)."""
        result = json.dumps(end.result) if end.result is not None else None
        error = json.dumps(end.error) if end.error is not None else None
        params = (end.status, now, end.exit_code, result, error, end.session_id, end.model, int(end.fence))
        steps = [Step(FINISH_JOB + guard, (*params, job_id, *fenced))]
        if end.session is not None:
            steps.append(Step(UPSERT_SESSION_OF_END, (*end.session.params(now), job_id, now)))
        return steps

    def _write_row(self, job_id: str, sql: str, params: Sequence[Any]) -> Rows:
        """One statement that writes the job's row, with the audit mark when one rides (then one transaction); the
        row it leaves becomes the store's copy of the job."""
        stamp = self._stamp(job_id)
        if self._keeps_jobs:
            sql = f"{sql} RETURNING {JOB_COLUMNS}"
        if not self._rides_alone or (mark := self._riding_mark()) is None:
            done = self._db.exec(sql, params)
        else:
            done = self._batch_with_mark([Step(sql, params)], lock=False, mark=mark)[0]
        if self._keeps_jobs and done.rowcount == 1:
            self._refresh(job_id, done.fetchone(), stamp, 1)
        return done

    def _batch_with_mark(self, steps: list[Step], *, lock: bool, mark: tuple[int, str] | None = None) -> list[Rows]:
        """`steps` in one transaction, and the newest audit mark not yet written with them (last: the mark's row is
        held from there to the commit only, after the job's rows), given back when the transaction failed."""
        mark = mark or self._riding_mark()
        if mark is None:
            return self._db.batch(steps, lock=lock)
        ride = Step(self._db.dialect.mark_audit, (self._log, mark[0], mark[1], time.time()))
        try:
            return self._db.batch([*steps, ride], lock=lock)
        except BaseException:
            self._mark_back(mark)
            raise

    # The store's copies of jobs (PostgreSQL's: pg/store.py): a write that changes a job returns its row.
    _keeps_jobs = False

    def _stamp(self, job_id: str) -> Any:
        """What the store had seen of `job_id` before a write (its copy of the job is good while that stays)."""
        return None

    def _refresh(self, job_id: str, row: Sequence[Any] | None, stamp: Any, writes: int) -> None:
        """The job's row as this process's own write of `writes` statements left it."""

    @timed
    def get_job(self, job_id: str, *, principal: str | None = None) -> JobRecord | None:
        """The job `job_id`; with `principal`, only if that principal started it (else None, as for no job)."""
        where, params = of(principal)
        jobs = self._jobs(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id=?{where}", (job_id, *params))
        return jobs[0] if jobs else None

    @timed
    def find_jobs(self, prefix: str, *, principal: str | None = None) -> list[JobRecord]:
        """Jobs whose id starts with `prefix` (at most 5; with `principal`, only its own): a range on the
        primary key, never a scan."""
        where, params = of(principal)
        return self._jobs(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE id >= ? AND id < ?{where} ORDER BY id LIMIT 5",
            (prefix, prefix + "\U0010ffff", *params),
        )

    @timed
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
            where.append(f"status IN ({marks(len(status_list))})")
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
            where.append(f"substr({self._db.dialect.json_field('request', 'via')}, 1, ?) = ?")
            params += [len(via), via]
        sql = f"SELECT {JOB_COLUMNS} FROM jobs" + (f" WHERE {' AND '.join(where)}" if where else "")
        sql += " ORDER BY created_at DESC, id DESC LIMIT ?"
        params.append(limit)
        return self._jobs(sql, params)

    @timed
    def active_jobs_of_host(self, boot_id: str | None) -> list[JobRecord]:
        """The active jobs a process of the host `boot_id` may have to adopt (OF_HOST), newest first."""
        return self._jobs(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE {OF_HOST} ORDER BY created_at DESC, id DESC", (boot_id,)
        )

    def _jobs(self, sql: str, params: Sequence[Any]) -> list[JobRecord]:
        return [job_of(r) for r in self._db.exec(sql, params)]

    # events -----------------------------------------------------------------------------

    @timed
    def add_events(
        self,
        job_id: str,
        first_seq: int,
        events: Sequence[Event],
        *,
        session_id: str | None = None,
        epoch: int | None = None,
    ) -> bool:
        """Store events and the job's session id when it is new, in one transaction (one commit, one round trip);
        with `epoch`, only while the job's claim is still that one (else nothing is stored: False).

        With `epoch`, the first statement reads the job's epoch and holds its row until the commit (a take-over
        cannot change it in between: SQLite's write lock, PostgreSQL's row lock); the others write only under it.
        """
        if not events and session_id is None:
            return True
        guard, fenced = fence(epoch)
        steps = [self._hold(job_id)] if epoch is not None else []
        steps += _event_steps(job_id, first_seq, events, session_id, guard, fenced, time.time())
        done = self._db.batch(steps, lock=epoch is not None)
        if epoch is None:
            return True
        row = done[0].fetchone()
        return row is not None and row[0] == epoch

    @timed
    def max_event_seq(self, job_id: str) -> int:
        row = self._db.exec("SELECT MAX(seq) FROM events WHERE job_id=?", (job_id,)).fetchone()
        return int(row[0]) if row and row[0] is not None else -1

    @timed
    def events(self, job_id: str, after_seq: int = -1, limit: int = 1000) -> list[tuple[int, float, Event]]:
        rows = self._db.exec(
            "SELECT seq, ts, type, data FROM events WHERE job_id=? AND seq>? ORDER BY seq LIMIT ?",
            (job_id, after_seq, limit),
        )
        return [(int(r[0]), float(r[1]), Event(r[2], json.loads(r[3]))) for r in rows]

    # outputs ----------------------------------------------------------------------------

    @timed
    def append_output(self, job_id: str, stream: str, data: bytes, *, epoch: int | None = None) -> int:
        """Append to a job's output stream (stdout/stderr/transcript/result) in chunks; its length after.

        Each append lands whole after the stream's last chunk: one chunk (what the mirror writes) in one
        statement, more in one transaction. Two appenders at once collide on (job, stream, seq); the one
        that lost appends again after the other's chunks. With `epoch`: only under that claim, the job's row
        share-locked to the commit (a take-over or an end waits for it); -1 when refused."""
        outputs.check_stream(stream)
        d = self._db.dialect
        under, fenced = ("", ()) if epoch is None else (f" WHERE EXISTS ({UNDER_EPOCH}{d.for_share})", (job_id, epoch))
        for _ in range(APPEND_TRIES):
            try:
                if len(data) <= outputs.CHUNK_BYTES:
                    params = (job_id, stream, len(data), data, job_id, stream, *fenced)
                    row = self._db.exec(APPEND_CHUNK.format(under=under), params).fetchone()
                    return int(row[0]) if row else (0 if epoch is None else -1)
                with self._db.tx(lock=True) as tx:
                    if epoch is not None and tx.exec(UNDER_EPOCH + d.for_share, fenced).fetchone() is None:
                        return -1
                    row = tx.exec(LAST_CHUNK, (job_id, stream)).fetchone()
                    seq, total = (int(row[0]), int(row[1])) if row else (0, 0)
                    for at, piece in outputs.pieces(data, total):
                        tx.exec(INSERT_CHUNK, (job_id, stream, seq, at, len(piece), piece))
                        seq += 1
                return total + len(data)
            except Conflict:
                continue
        raise Conflict(f"output of job {job_id} ({stream}) was not appended: {APPEND_TRIES} other appends came first")

    @timed
    def read_output_page(self, job_id: str, stream: str, offset: int, limit: int) -> tuple[bytes, int]:
        """Up to `limit` bytes of a job's output stream from `offset`, and the stream's whole length."""
        outputs.check_stream(stream)
        outputs.check_page(offset, limit)
        end = outputs.page_end(offset, limit)
        low = offset - outputs.CHUNK_BYTES  # no chunk that starts this early reaches `offset`: the index's bound
        d = self._db.dialect
        with self._db.tx() as tx:  # one snapshot for the page and the total
            rows = tx.exec(read_page_sql(d.greatest, d.least), (offset, end, offset, job_id, stream, offset, low, end))
            total = tx.exec(TOTAL, (job_id, stream)).fetchone()
        return b"".join(bytes(r[0]) for r in rows), int(total[0]) if total else 0

    @timed
    def output_sizes(self, job_id: str) -> dict[str, int]:
        """How many bytes of each output stream of a job the store holds (one read for all four)."""
        return outputs.sizes(self._db.exec(SIZES, (job_id,)).fetchall())

    # sessions ---------------------------------------------------------------------------

    @timed
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
        self._db.exec(UPSERT_SESSION, turn.params(time.time()))

    @timed
    def get_session(
        self, session_id: str, agent: str | None = None, *, principal: str | None = None
    ) -> SessionRecord | None:
        """An agent session (of `agent` when given; with `principal`, only one that principal started)."""
        where, params = of(principal)
        if agent:
            where += " AND agent=?"
            params = (*params, agent)
        rows = self._sessions(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id=?{where}", (session_id, *params)
        )
        return rows[0] if rows else None

    @timed
    def list_sessions(
        self, *, agent: str | None = None, limit: int = 50, principal: str | None = None
    ) -> list[SessionRecord]:
        """Agent sessions, last used first (of `agent`; with `principal`, the ones it started)."""
        where, params = of(principal)
        if agent:
            where += " AND agent=?"
            params = (*params, agent)
        sql = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE true{where} ORDER BY last_used_at DESC LIMIT ?"
        return self._sessions(sql, (*params, limit))

    def _sessions(self, sql: str, params: Sequence[Any]) -> list[SessionRecord]:
        return [SessionRecord(*r) for r in self._db.exec(sql, params)]


def _event_steps(
    job_id: str,
    first_seq: int,
    events: Sequence[Event],
    session_id: str | None,
    where: str,
    fenced: Sequence[Any],
    now: float,
) -> list[Step]:
    """The statements that store `events` (numbered from `first_seq`) and the job's new `session_id`, each only where
    `where` holds of the job's row (its claim's guard, and maybe ACTIVE)."""
    steps: list[Step] = []
    if events:
        rows = [
            (job_id, first_seq + i, now, e.type, json.dumps(e.data, default=str), job_id, *fenced)
            for i, e in enumerate(events)
        ]
        steps.append(Step(ADD_EVENT + where + ADD_EVENT_END, rows, many=True))
    if session_id is not None:
        steps.append(Step(SET_SESSION + where, (session_id, job_id, *fenced)))
    return steps
