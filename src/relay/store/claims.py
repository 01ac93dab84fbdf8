"""Claims: the store decides who runs a job, across every process (and host) that uses it.

A job starts only under a claim won in one transaction (SQLite: `BEGIN IMMEDIATE`, so two claimers
are serialized by the database's write lock). The claim counts the slots held by every worker
against the global and per-agent limits. A claim is a lease: the worker's id, an expiry renewed by
its heartbeat, and a fencing epoch that every later write of the job's state must match (`epoch=`
on mark_running, add_events, finish_job): a worker whose lease was taken over cannot finish the job
a second time. A job holds a slot while it is queued or running with a worker named.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Generator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

# The jobs that hold a slot: claimed and not final. In-process tasks (model calls) take no slot.
HOLDS_SLOT = "status IN ('queued', 'running') AND worker IS NOT NULL AND kind = 'cli'"
# How many queued jobs one claim looks at (oldest first) to find ones its limits let start.
CLAIM_WINDOW = 500
# The active jobs whose owner a process of one host may find dead and adopt (jobs/recovery.py): claimed by a
# worker of that host (its boot id, the one parameter) or by one the workers table does not know, or running
# with no worker (an in-process task, a row from before claims). Another host's worker is judged by its lease.
OF_HOST = (
    "status IN ('queued', 'running') AND ((worker IS NULL AND status = 'running')"
    " OR worker IN (SELECT id FROM workers WHERE boot_id IS ?)"
    " OR (worker IS NOT NULL AND worker NOT IN (SELECT id FROM workers)))"
)
# The workers not heard from since a time (the one parameter) that no queued or running job names: a worker
# that stopped, was lost or was killed long ago (one that comes back registers again at its next heartbeat).
GONE_WORKERS = (
    "heartbeat_at < ? AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.worker = workers.id"
    " AND j.status IN ('queued', 'running'))"
)

# A heartbeat's change of a worker judged `lost` that is heard from again: `running` again (its lost jobs stay ended).
REVIVE = (
    "stopped_at = CASE WHEN state = 'lost' THEN NULL ELSE stopped_at END,"
    " state = CASE WHEN state = 'lost' THEN 'running' ELSE state END"
)

# The queue's depth by agent and labels (relay_queue_depth): one scan of the queued jobs' index entries.
QUEUE_DEPTH = (
    "SELECT agent, labels, count(*), min(created_at) FROM jobs"
    " WHERE status = 'queued' AND worker IS NULL AND kind = 'cli' GROUP BY agent, labels"
)


@dataclass(frozen=True)
class WorkerInfo:
    """A process that runs jobs: `relay worker`, or a `relay serve` that runs its own (the embedded default)."""

    id: str
    name: str
    host: str
    pid: int
    start_ticks: int | None
    boot_id: str | None
    agents: tuple[str, ...] | None  # None: every agent it knows
    labels: tuple[str, ...]
    slots: int
    lease_s: float


@dataclass(frozen=True)
class WorkerRecord:
    id: str
    name: str
    host: str
    pid: int
    start_ticks: int | None
    boot_id: str | None
    agents: list[str] | None
    labels: list[str]
    slots: int
    lease_s: float
    started_at: float
    heartbeat_at: float
    stopped_at: float | None
    state: str
    ran: int
    running: int


def worker_row(info: WorkerInfo, now: float) -> tuple[Any, ...]:
    """The workers row of `info` as both stores insert it (id ... lease_s, started_at, heartbeat_at)."""
    agents = json.dumps(list(info.agents)) if info.agents is not None else None
    labels = json.dumps(list(info.labels))
    return (
        info.id,
        info.name,
        info.host,
        info.pid,
        info.start_ticks,
        info.boot_id,
        agents,
        labels,
        info.slots,
        info.lease_s,
        now,
        now,
    )


def _worker(r: tuple[Any, ...]) -> WorkerRecord:
    agents, labels = (json.loads(r[6]) if r[6] else None), json.loads(r[7] or "[]")
    return WorkerRecord(*r[:6], agents, labels, *r[8:])  # pyright: ignore[reportCallIssue]


class Claims:
    """The claim half of the SQLite store (mixed into `Store`, which provides the connection and its lock)."""

    _db: sqlite3.Connection

    def _running(self, sql: str, params: Sequence[Any]) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    @contextmanager
    def _immediate(self) -> Generator[sqlite3.Connection]:
        """One write transaction taken at its start: the claimers of every process run one after another."""
        with self._running("BEGIN IMMEDIATE", ()) as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise

    # workers ------------------------------------------------------------------------------

    def register_worker(self, info: WorkerInfo) -> None:
        with self._running("INSERT", ()) as db:
            db.execute(
                "INSERT OR REPLACE INTO workers (id, name, host, pid, start_ticks, boot_id, agents, labels, slots,"
                " lease_s, started_at, heartbeat_at, state) VALUES (?,?,?,?,?,?,?,?,?,?,?,?, 'running')",
                worker_row(info, time.time()),
            )

    def heartbeat(self, worker_id: str, lease_s: float) -> bool:
        """The worker is alive: its row and the lease of every job it holds are renewed (False: it has no row)."""
        now = time.time()
        with self._immediate() as db:
            # A worker judged lost that is heard from again is running again (its jobs' fate is already sealed).
            revive = f"UPDATE workers SET heartbeat_at=?, {REVIVE} WHERE id=?"
            known = db.execute(revive, (now, worker_id)).rowcount == 1
            db.execute(
                "UPDATE jobs SET lease_until=? WHERE worker=? AND status IN ('queued', 'running')",
                (now + lease_s, worker_id),
            )
        return known

    def stop_worker(self, worker_id: str, state: str) -> None:
        """Record a worker's end (`stopping`, `stopped`, `lost`)."""
        stopped = time.time() if state != "stopping" else None
        with self._running("UPDATE", ()) as db:
            db.execute(
                "UPDATE workers SET state=?, stopped_at=COALESCE(?, stopped_at) WHERE id=?", (state, stopped, worker_id)
            )

    def prune_workers(self, older_than: float) -> int:
        """Delete the rows of workers not heard from since `older_than` that no queued or running job names;
        how many went."""
        sql = f"DELETE FROM workers WHERE {GONE_WORKERS}"
        with self._running(sql, ()) as db:
            return db.execute(sql, (older_than,)).rowcount

    def list_workers(self, *, include_stopped: bool = True) -> list[WorkerRecord]:
        """Workers, the most recently alive first, with how many jobs each holds now."""
        return self._workers("" if include_stopped else " WHERE w.state IN ('running', 'stopping')", ())

    def get_worker(self, worker_id: str) -> WorkerRecord | None:
        found = self._workers(" WHERE w.id = ?", (worker_id,))
        return found[0] if found else None

    def _workers(self, where: str, params: Sequence[Any]) -> list[WorkerRecord]:
        sql = (
            "SELECT w.id, w.name, w.host, w.pid, w.start_ticks, w.boot_id, w.agents, w.labels, w.slots, w.lease_s,"
            " w.started_at, w.heartbeat_at, w.stopped_at, w.state, w.ran,"
            f" (SELECT count(*) FROM jobs j WHERE j.worker = w.id AND j.{HOLDS_SLOT.replace(' AND ', ' AND j.')})"
            f" FROM workers w{where} ORDER BY w.heartbeat_at DESC"
        )
        with self._running(sql, params) as db:
            rows = db.execute(sql, params).fetchall()
        return [_worker(tuple(r)) for r in rows]

    # claims ------------------------------------------------------------------------------

    def claim(
        self,
        worker: WorkerInfo,
        *,
        free: int,
        max_total: int,
        per_agent: Callable[[str], int],
        only: Sequence[str] = (),
    ) -> list[tuple[str, str, int]]:
        """Claim up to `free` queued jobs this worker can run, oldest first, within the limits counted over
        every worker; returns (job id, agent, epoch) of each. `only`: consider just these jobs."""
        if free <= 0:
            return []
        now = time.time()
        won: list[tuple[str, str, int]] = []
        with self._immediate() as db:
            counts = db.execute(f"SELECT agent, count(*) FROM jobs WHERE {HOLDS_SLOT} GROUP BY agent").fetchall()
            held: dict[str, int] = {str(r[0]): int(r[1]) for r in counts}
            total = sum(held.values())
            if total >= max_total:
                return []
            where, params = "status = 'queued' AND worker IS NULL AND kind = 'cli'", list[str]()
            if only:
                where += f" AND id IN ({','.join('?' * len(only))})"
                params += list(only)
            if worker.agents is not None:
                where += f" AND agent IN ({','.join('?' * len(worker.agents))})"
                params += list(worker.agents)
            rows = db.execute(
                f"SELECT id, agent, labels FROM jobs WHERE {where} ORDER BY created_at, id LIMIT {CLAIM_WINDOW}",
                params,
            ).fetchall()
            mine = set(worker.labels)
            for job_id, agent, labels in rows:
                if len(won) >= free or total >= max_total:
                    break
                if held.get(agent, 0) >= per_agent(agent) or not set(json.loads(labels or "[]")) <= mine:
                    continue
                epoch = db.execute(
                    "UPDATE jobs SET worker=?, lease_until=?, epoch=epoch+1, owner_pid=?, owner_start_ticks=?"
                    " WHERE id=? AND status='queued' AND worker IS NULL RETURNING epoch",
                    (worker.id, now + worker.lease_s, worker.pid, worker.start_ticks, job_id),
                ).fetchone()
                if epoch is None:
                    continue
                won.append((job_id, agent, int(epoch[0])))
                held[agent] = held.get(agent, 0) + 1
                total += 1
            if won:
                db.execute("UPDATE workers SET ran = ran + ? WHERE id=?", (len(won), worker.id))
        return won

    def take_over(self, job_id: str, epoch: int, worker: WorkerInfo) -> int | None:
        """Take a claimed job over from a worker that is gone (only if its claim is still `epoch`): the new
        epoch, or None when another worker took it first or it ended."""
        with self._immediate() as db:
            row = db.execute(
                "UPDATE jobs SET worker=?, lease_until=?, epoch=epoch+1, owner_pid=?, owner_start_ticks=?"
                " WHERE id=? AND epoch=? AND status IN ('queued', 'running') RETURNING epoch",
                (worker.id, time.time() + worker.lease_s, worker.pid, worker.start_ticks, job_id, epoch),
            ).fetchone()
        return int(row[0]) if row is not None else None

    def unclaim(self, job_id: str, epoch: int, *, requeue_running: bool = False) -> bool:
        """Hand a claim back (a worker stopping before it started the job; a lost worker's job that asked
        to be retried): the job is queued again for any worker, under a new epoch."""
        statuses = "('queued', 'running')" if requeue_running else "('queued')"
        with self._immediate() as db:
            cur = db.execute(
                "UPDATE jobs SET worker=NULL, lease_until=NULL, epoch=epoch+1, status='queued', owner_pid=NULL,"
                " owner_start_ticks=NULL, pid=NULL, pid_start_ticks=NULL, started_at=NULL"
                f" WHERE id=? AND epoch=? AND status IN {statuses}",
                (job_id, epoch),
            )
            if cur.rowcount == 1 and requeue_running:  # the run starts over: the lost one's events and output go
                db.execute("DELETE FROM events WHERE job_id=?", (job_id,))
                db.execute("DELETE FROM outputs WHERE job_id=?", (job_id,))
            return cur.rowcount == 1

    def expired_leases(self, now: float | None = None) -> list[tuple[str, str, int, str | None, str | None]]:
        """Claimed jobs whose lease ran out: (job id, worker, epoch, status, retry) of each."""
        sql = (
            "SELECT id, worker, epoch, status, retry FROM jobs WHERE status IN ('queued', 'running')"
            " AND worker IS NOT NULL AND lease_until < ?"
        )
        with self._running(sql, ()) as db:
            return [tuple(r) for r in db.execute(sql, (now if now is not None else time.time(),)).fetchall()]  # pyright: ignore[reportReturnType]

    def claim_states(self, job_ids: Sequence[str]) -> dict[str, tuple[str | None, int, str, bool]]:
        """(worker, epoch, status, cancel requested) of each job: whether a claim is still ours, and what to do."""
        if not job_ids:
            return {}
        sql = (
            f"SELECT id, worker, epoch, status, cancel_requested FROM jobs WHERE id IN ({','.join('?' * len(job_ids))})"
        )
        with self._running(sql, job_ids) as db:
            rows = db.execute(sql, list(job_ids)).fetchall()
        return {str(r[0]): (r[1], int(r[2]), str(r[3]), bool(r[4])) for r in rows}

    def place_job(self, job_id: str, request: dict[str, Any], cwd: str, *, epoch: int | None) -> bool:
        """The folder a claimed job was placed in by its worker (a job by repository URL: its worktree there), and
        its request saying so; only under the claim of `epoch` (else False)."""
        sql = "UPDATE jobs SET request=?, cwd=? WHERE id=?" + (" AND epoch=?" if epoch is not None else "")
        params = (json.dumps(request), cwd, job_id, *(() if epoch is None else (epoch,)))
        with self._running(sql, params) as db:
            return db.execute(sql, params).rowcount == 1

    def queue_version(self) -> int:
        """A number that changes whenever another connection commits (SQLite's data_version): a cheap way to
        tell that nothing was queued or cancelled since the last look."""
        with self._running("PRAGMA data_version", ()) as db:
            return int(db.execute("PRAGMA data_version").fetchone()[0])

    def clock(self) -> float:
        """The store's time now (seconds since the epoch): SQLite's is its one host's clock."""
        return time.time()

    def has_queued(self) -> bool:
        """Whether any CLI job waits for a claim."""
        sql = "SELECT 1 FROM jobs WHERE status='queued' AND worker IS NULL AND kind='cli' LIMIT 1"
        with self._running(sql, ()) as db:
            return db.execute(sql).fetchone() is not None

    def queue_depth(self) -> list[tuple[str, str | None, int, float]]:
        """(agent, labels JSON, how many, oldest created_at) of the CLI jobs that wait for a claim (/metrics)."""
        with self._running(QUEUE_DEPTH, ()) as db:
            return [(str(r[0]), r[1], int(r[2]), float(r[3])) for r in db.execute(QUEUE_DEPTH).fetchall()]
