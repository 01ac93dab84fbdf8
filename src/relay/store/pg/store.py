"""The PostgreSQL store: the one store body (store/body.py, store/queue.py) over a pool of connections.

Same methods as the SQLite `Store`, from the same body, so the job engine does not know which one it
holds. What is PostgreSQL's own is here and in pg/conn.py: the pool (a connection idle for a second is
checked on the way out, so a server restart costs a reconnect, not an error), the migrations, the change
notices (the tables' triggers announce every job state change on `relay_jobs` / `relay_queue`: pg/schema.py;
pg/listen.py and pg/watch.py wait for them), the server's clock, the audit marks and witness rows.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg

from relay.audit import AuditLog
from relay.config import DEFAULT_STORE_POOL_SIZE
from relay.store.body import JobBody
from relay.store.dialect import Step, timed
from relay.store.pg.conn import PoolConn
from relay.store.pg.connect import conninfo
from relay.store.pg.errors import relay_errors
from relay.store.pg.listen import PgChanges
from relay.store.pg.schema import migrate
from relay.store.pg.watch import ChangeCount
from relay.store.pg.witness import INSERT_ROWS, WitnessWriter, witness_status
from relay.store.queue import ClaimAsk, ClaimsBody, WorkerInfo
from relay.store.records import JOB_COLUMNS, AuditExpectation, JobRecord, job_of

# Connections one process keeps to the server: the event loop and a few worker threads at once (`[store] pool_size`).
POOL_SIZE = DEFAULT_STORE_POOL_SIZE
# How long a call waits for a free connection (or for the server to come back) before STORE_UNAVAILABLE.
POOL_WAIT_S = 10.0

# How many jobs' last reads are kept (the jobs a process waits on or runs at once, with room).
KEPT_JOBS = 256
# What a copy of a job was read under: (other processes' notices heard, this one's writes that may change any job,
# this one's writes to that job).
Stamp = tuple[int, int, int]

logger = logging.getLogger("relay.store")


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


class PgStore(JobBody, ClaimsBody):
    """The job store on PostgreSQL at `url`; safe to share between the event loop and worker threads."""

    spans_hosts = True  # fronts and workers of any host: a job's outputs are copied into it
    overlaps_calls = True  # round trips to a server, on connections of a pool

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
        self._pool = PoolConn(url, size=pool_size, wait_s=wait_s, name="relay-store")
        self._db = self._pool
        self._notices = ChangeCount(url, self._pool.is_own)
        # Jobs as last read (get_job), with what had been heard and written then (`_stamp`).
        self._kept: dict[str, tuple[Stamp, JobRecord]] = {}
        self._kept_lock = threading.Lock()
        self._start_marks()
        self._witness: WitnessWriter | None = None
        if self.witness.present and self.witness.can_insert:
            self._witness = WitnessWriter(self._witness_rows)
            self.audit.marks.append(self._witness.put)

    def changes(self) -> PgChanges:
        """A listener for this store's change notices (enter it with `async with` to start it)."""
        return PgChanges(self.url)

    def close(self) -> None:
        self._stop_marks()
        if self._witness is not None:
            with suppress(ValueError):
                self.audit.marks.remove(self._witness.put)
            self._witness.close()
        self._notices.close()
        self._db.close()

    def _witness_rows(self, seqs: list[int], hashes: list[str]) -> None:
        self._db.exec(INSERT_ROWS.replace("%s", "?"), (self._log, seqs, hashes))

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

    @timed
    def get_job(self, job_id: str, *, principal: str | None = None) -> JobRecord | None:
        """The job `job_id`; with `principal`, only if that principal started it (else None, as for no job).

        A job read again while no notice of another process's change, no write of this process to that job and
        none that may change any job (a claim, a heartbeat) came since is answered from the copy read then (a
        waiter woken by new output reads its job without a round trip; the jobs of a burst, each written in turn,
        keep theirs); a write of this process to the job that returned its row (write_job, finish_job) leaves that
        row as the copy; another process's change is seen once its notice is heard (a fraction of a millisecond)."""
        seen = self._stamp(job_id)
        with self._kept_lock:
            kept = self._kept.get(job_id)
        if kept is not None and kept[0] == seen:
            rec = kept[1]
        else:
            found = self._db.exec(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id=?", (job_id,)).fetchone()
            rec = job_of(found) if found is not None else None
            if rec is not None:
                self._keep(job_id, seen, rec)
        return rec if rec is not None and (principal is None or rec.principal == principal) else None

    _keeps_jobs = True

    def _seen(self) -> tuple[int, int]:
        """What this process had heard and written of every job: (other processes' notices, its own writes that may
        change any job)."""
        return (self._notices.version(others=True), self._pool.job_writes)

    def _stamp(self, job_id: str) -> Stamp:
        """`_seen`, and this process's own writes to `job_id`."""
        return (*self._seen(), self._pool.written.get(job_id, 0))

    def _refresh(self, job_id: str, row: Sequence[Any] | None, stamp: Stamp, writes: int) -> None:
        """Keep the row the write returned, unless another write of this process to the job (or to any job) came
        between (then the next read asks the server)."""
        notices, wide, before = stamp
        written = self._pool.written.get(job_id, 0)
        if row is not None and self._pool.job_writes == wide and written - before == writes:
            self._keep(job_id, (notices, wide, written), job_of(tuple(row)))

    def _keep(self, job_id: str, seen: Stamp, rec: JobRecord) -> None:
        with self._kept_lock:
            self._kept[job_id] = (seen, rec)
            if len(self._kept) > KEPT_JOBS:
                del self._kept[next(iter(self._kept))]

    def claim(
        self,
        worker: WorkerInfo,
        *,
        free: int,
        max_total: int,
        per_agent: Callable[[str], int],
        only: Sequence[str] = (),
    ) -> list[tuple[str, str, int]]:
        """ClaimsBody.claim, the copies of the jobs it took kept as it changed them."""
        seen = self._seen()
        won = super().claim(worker, free=free, max_total=max_total, per_agent=per_agent, only=only)
        self._claimed(won, worker, seen)
        return won

    def _queue_seen(self, worker: WorkerInfo, ahead: int = 0) -> tuple[Any, ...] | None:
        """ClaimsBody's: the notices of other processes on the queue's channel, and the jobs this one queued."""
        return (worker.id, self._notices.queued(), self._pool.queued_writes + ahead)

    def _insert_claiming(
        self, job_ids: Sequence[str], inserts: Sequence[Step], ask: ClaimAsk
    ) -> list[tuple[str, str, int]]:
        """ClaimsBody._insert_claiming, the jobs' rows kept as the inserts and the claim left them."""
        notices, wide = self._seen()
        before = {job_id: self._pool.written.get(job_id, 0) for job_id in job_ids}
        won, inserted = self._insert_and_claim(
            [Step(f"{s.sql} RETURNING {JOB_COLUMNS}", s.params) for s in inserts], ask
        )
        after = self._pool.job_writes
        with self._kept_lock:
            for taken, _, _ in won:
                self._kept.pop(taken, None)
        if after - wide != 1:  # the claim's one statement, and no other write to any job between
            return won
        epochs = {taken: e for taken, _, e in won}
        for job_id, rows in zip(job_ids, inserted, strict=False):
            row, written = rows.fetchone(), self._pool.written.get(job_id, 0)
            if row is not None and written - before[job_id] == 1:  # its insert, nothing else
                rec = job_of(tuple(row))
                epoch = epochs.get(job_id)
                claimed = rec if epoch is None else _as_claimed(rec, ask.worker, epoch)
                self._keep(job_id, (notices, after, written), claimed)
        return won

    def _claimed(self, won: list[tuple[str, str, int]], worker: WorkerInfo, seen: tuple[int, int]) -> None:
        """The copies of the jobs a claim took, as it changed them, when they were current before it (`seen`: the
        notices and the writes to any job then) and the claim's one statement was the only job write since (else
        the next read asks the server)."""
        notices, wide = seen
        after = self._pool.job_writes
        with self._kept_lock:
            for job_id, _, epoch in won:
                kept = self._kept.pop(job_id, None)
                written = self._pool.written.get(job_id, 0)
                if (
                    kept is not None
                    and kept[0] == (notices, wide, written)
                    and kept[1].epoch == epoch - 1
                    and after - wide == 1
                ):
                    self._kept[job_id] = ((notices, after, written), _as_claimed(kept[1], worker, epoch))

    @timed
    def clock(self) -> float:
        """The store's time now (seconds since the epoch): what leases and heartbeats are judged by."""
        row = self._db.exec(f"SELECT {self._db.dialect.now}").fetchone()
        return float(row[0]) if row else 0.0


def _as_claimed(rec: JobRecord, worker: WorkerInfo, epoch: int) -> JobRecord:
    """A job's row as a claim of `worker` under `epoch` changes it."""
    return replace(rec, worker=worker.id, epoch=epoch, owner_pid=worker.pid, owner_start_ticks=worker.start_ticks)
