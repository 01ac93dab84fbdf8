"""Claims on PostgreSQL: the same API as the SQLite store's (store/claims.py), race-free across hosts.

A claim runs in one transaction that first takes CLAIM_LOCK, an advisory lock held to its end: the
slots every worker holds are then counted from committed rows that no other claim can change before
this one commits, so the global and per-agent limits hold across any number of processes and hosts
(a per-agent count read without it could be read by two claimers at once, each then taking the last
slot). The candidates are read oldest first `FOR UPDATE SKIP LOCKED`: a row another transaction is
changing (a cancel, an end) is passed over instead of waited on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, LiteralString

import psycopg

from relay.store import claims
from relay.store.claims import (
    CLAIM_WINDOW,
    GONE_WORKERS,
    HOLDS_SLOT,
    OF_HOST,
    QUEUE_DEPTH,
    WorkerInfo,
    WorkerRecord,
    worker_row,
)
from relay.store.pg.schema import MIGRATION_LOCK

# The store's clock, in seconds since the epoch: every lease and heartbeat is judged by it, never by a process's
# own (a host whose clock runs ahead or behind would end others' leases early, or its own at once).
NOW: LiteralString = "extract(epoch from clock_timestamp())::float8"

# A worker judged `lost` that is heard from again is `running` again (the jobs it lost stay ended).
REVIVE: LiteralString = (
    "stopped_at = CASE WHEN state = 'lost' THEN NULL ELSE stopped_at END,"
    " state = CASE WHEN state = 'lost' THEN 'running' ELSE state END"
)
assert REVIVE == claims.REVIVE

# Candidates a claim reads beyond twice its free slots (passed over when their agent is at its limit).
WINDOW_SPARE = 16
# The advisory lock every claim holds for its transaction (any constant other than the migrations').
CLAIM_LOCK = MIGRATION_LOCK + 1

Conn = psycopg.Connection[tuple[Any, ...]]

_HOLDS_SLOT: LiteralString = "status IN ('queued', 'running') AND worker IS NOT NULL AND kind = 'cli'"
assert _HOLDS_SLOT == HOLDS_SLOT  # one meaning of "holds a slot" for both backends
# The active jobs of a host (claims.OF_HOST: the same words, but for PostgreSQL's spelling of SQLite's `IS`).
OF_HOST_PG: LiteralString = (
    "status IN ('queued', 'running') AND ((worker IS NULL AND status = 'running')"
    " OR worker IN (SELECT id FROM workers WHERE boot_id IS NOT DISTINCT FROM %s)"
    " OR (worker IS NOT NULL AND worker NOT IN (SELECT id FROM workers)))"
)
assert OF_HOST_PG.replace("IS NOT DISTINCT FROM %s", "IS ?") == OF_HOST
_GONE_WORKERS: LiteralString = (
    "heartbeat_at < %s AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.worker = workers.id"
    " AND j.status IN ('queued', 'running'))"
)
assert _GONE_WORKERS.replace("%s", "?") == GONE_WORKERS
_QUEUE_DEPTH: LiteralString = (
    "SELECT agent, labels, count(*), min(created_at) FROM jobs"
    " WHERE status = 'queued' AND worker IS NULL AND kind = 'cli' GROUP BY agent, labels"
)
assert _QUEUE_DEPTH == QUEUE_DEPTH

# Queued, unclaimed CLI jobs the worker can run, oldest first: of its agents (NULL: any), none of the agents
# already at their limit, every label the job asks for among the worker's; `only` (NULL: any) narrows them.
_CANDIDATES: LiteralString = (
    "SELECT id, agent FROM jobs WHERE status = 'queued' AND worker IS NULL AND kind = 'cli'"
    " AND (%(only)s::text[] IS NULL OR id = ANY(%(only)s::text[]))"
    " AND (%(agents)s::text[] IS NULL OR agent = ANY(%(agents)s::text[])) AND agent <> ALL(%(full)s::text[])"
    " AND (labels IS NULL OR labels::jsonb <@ %(labels)s::jsonb)"
    " ORDER BY created_at, id LIMIT %(window)s FOR UPDATE SKIP LOCKED"
)
# The claim of the picked jobs, and the count of what their worker ran, in one statement.
_TAKE: LiteralString = (
    f"WITH taken AS (UPDATE jobs SET worker=%s, lease_until={NOW} + %s, epoch=epoch+1, owner_pid=%s, owner_start_ticks=%s"
    " WHERE id = ANY(%s::text[]) RETURNING id, epoch),"
    " ran AS (UPDATE workers SET ran = ran + %s WHERE id = %s)"
    " SELECT id, epoch FROM taken"
)
_WORKER_COLUMNS: LiteralString = (
    "w.id, w.name, w.host, w.pid, w.start_ticks, w.boot_id, w.agents, w.labels, w.slots, w.lease_s,"
    " w.started_at, w.heartbeat_at, w.stopped_at, w.state, w.ran"
)


def _worker(r: tuple[Any, ...]) -> WorkerRecord:
    agents, labels = (json.loads(r[6]) if r[6] else None), json.loads(r[7] or "[]")
    return WorkerRecord(*r[:6], agents, labels, *r[8:])  # pyright: ignore[reportCallIssue]


class PgClaims:
    """The claim half of the PostgreSQL store (mixed into `PgStore`, which provides the connections)."""

    def _conn(self) -> AbstractContextManager[Conn]:
        raise NotImplementedError

    def _tx(self) -> AbstractContextManager[Conn]:
        raise NotImplementedError

    # workers ------------------------------------------------------------------------------

    def register_worker(self, info: WorkerInfo) -> None:
        with self._conn() as conn:
            conn.execute(
                "INSERT INTO workers (id, name, host, pid, start_ticks, boot_id, agents, labels, slots, lease_s,"
                f" started_at, heartbeat_at, state) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,{NOW},{NOW}, 'running')"
                " ON CONFLICT (id) DO UPDATE SET name=excluded.name, host=excluded.host, pid=excluded.pid,"
                " start_ticks=excluded.start_ticks, boot_id=excluded.boot_id, agents=excluded.agents,"
                " labels=excluded.labels, slots=excluded.slots, lease_s=excluded.lease_s,"
                " started_at=excluded.started_at, heartbeat_at=excluded.heartbeat_at, stopped_at=NULL,"
                " state='running', ran=0",
                worker_row(info, 0.0)[:-2],
            )

    def heartbeat(self, worker_id: str, lease_s: float) -> bool:
        """The worker is alive: its row and the lease of every job it holds are renewed (False: it has no row)."""
        with self._tx() as conn:
            # A worker judged lost that is heard from again is running again (its jobs' fate is already sealed).
            known = (
                conn.execute(f"UPDATE workers SET heartbeat_at={NOW}, {REVIVE} WHERE id=%s", (worker_id,)).rowcount == 1
            )
            conn.execute(
                f"UPDATE jobs SET lease_until={NOW} + %s WHERE worker=%s AND status IN ('queued', 'running')",
                (lease_s, worker_id),
            )
        return known

    def stop_worker(self, worker_id: str, state: str) -> None:
        """Record a worker's end (`stopping`, `stopped`, `lost`)."""
        stopped = time.time() if state != "stopping" else None
        with self._conn() as conn:
            conn.execute(
                "UPDATE workers SET state=%s, stopped_at=COALESCE(%s, stopped_at) WHERE id=%s",
                (state, stopped, worker_id),
            )

    def prune_workers(self, older_than: float) -> int:
        """Delete the rows of workers not heard from since `older_than` that no queued or running job names;
        how many went."""
        with self._conn() as conn:
            return conn.execute(f"DELETE FROM workers WHERE {_GONE_WORKERS}", (older_than,)).rowcount

    def list_workers(self, *, include_stopped: bool = True) -> list[WorkerRecord]:
        """Workers, the most recently alive first, with how many jobs each holds now."""
        return self._workers("" if include_stopped else " WHERE w.state IN ('running', 'stopping')", ())

    def get_worker(self, worker_id: str) -> WorkerRecord | None:
        found = self._workers(" WHERE w.id = %s", (worker_id,))
        return found[0] if found else None

    def _workers(self, where: LiteralString, params: Sequence[Any]) -> list[WorkerRecord]:
        sql: LiteralString = (
            f"SELECT {_WORKER_COLUMNS}, (SELECT count(*) FROM jobs j WHERE j.worker = w.id"
            " AND j.status IN ('queued', 'running') AND j.kind = 'cli')"
            f" FROM workers w{where} ORDER BY w.heartbeat_at DESC"
        )
        with self._conn() as conn:
            return [_worker(r) for r in conn.execute(sql, params)]

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
        params: dict[str, Any] = {
            "only": list(only) if only else None,
            "agents": list(worker.agents) if worker.agents is not None else None,
            "labels": json.dumps(list(worker.labels)),
            # Each candidate read is locked (FOR UPDATE): a window just larger than the slots to fill.
            "window": min(CLAIM_WINDOW, 2 * free + WINDOW_SPARE),
            "full": [],
        }
        # Pipelined: the lock, the count and the first window go in one round trip, the take and the commit in
        # one more each; the lock is held for as short a time as the network allows.
        with self._conn() as conn, conn.pipeline(), conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (CLAIM_LOCK,))
            counts = conn.execute(f"SELECT agent, count(*) FROM jobs WHERE {_HOLDS_SLOT} GROUP BY agent")
            first = conn.execute(_CANDIDATES, params)
            held = {str(a): int(n) for a, n in counts.fetchall()}
            room = min(free, max_total - sum(held.values()))
            return _take(conn, worker, room, held, per_agent, params, first.fetchall()) if room > 0 else []

    def take_over(self, job_id: str, epoch: int, worker: WorkerInfo) -> int | None:
        """Take a claimed job over from a worker that is gone (only if its claim is still `epoch`): the new
        epoch, or None when another worker took it first or it ended."""
        with self._conn() as conn:
            row = conn.execute(
                f"UPDATE jobs SET worker=%s, lease_until={NOW} + %s, epoch=epoch+1, owner_pid=%s, owner_start_ticks=%s"
                " WHERE id=%s AND epoch=%s AND status IN ('queued', 'running') RETURNING epoch",
                (worker.id, worker.lease_s, worker.pid, worker.start_ticks, job_id, epoch),
            ).fetchone()
        return int(row[0]) if row is not None else None

    def place_job(self, job_id: str, request: dict[str, Any], cwd: str, *, epoch: int | None) -> bool:
        """The folder a claimed job was placed in by its worker (a job by repository URL: its worktree there), and
        its request saying so; only under the claim of `epoch` (else False)."""
        sql = "UPDATE jobs SET request=%s, cwd=%s WHERE id=%s" + (" AND epoch=%s" if epoch is not None else "")
        params = (json.dumps(request), cwd, job_id, *(() if epoch is None else (epoch,)))
        with self._conn() as conn:
            return conn.execute(sql, params).rowcount == 1

    def unclaim(self, job_id: str, epoch: int, *, requeue_running: bool = False) -> bool:
        """Hand a claim back (a worker stopping before it started the job; a lost worker's job that asked
        to be retried): the job is queued again for any worker, under a new epoch."""
        statuses = ["queued", "running"] if requeue_running else ["queued"]
        with self._tx() as conn:
            cur = conn.execute(
                "UPDATE jobs SET worker=NULL, lease_until=NULL, epoch=epoch+1, status='queued', owner_pid=NULL,"
                " owner_start_ticks=NULL, pid=NULL, pid_start_ticks=NULL, started_at=NULL"
                " WHERE id=%s AND epoch=%s AND status = ANY(%s::text[])",
                (job_id, epoch, statuses),
            )
            if cur.rowcount == 1 and requeue_running:  # the run starts over: the lost one's events and output go
                conn.execute("DELETE FROM events WHERE job_id=%s", (job_id,))
                conn.execute("DELETE FROM outputs WHERE job_id=%s", (job_id,))
            return cur.rowcount == 1

    def expired_leases(self, now: float | None = None) -> list[tuple[str, str, int, str | None, str | None]]:
        """Claimed jobs whose lease ran out by the store's clock (or before `now`, when given): (job id, worker,
        epoch, status, retry) of each."""
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT id, worker, epoch, status, retry FROM jobs WHERE status IN ('queued', 'running')"
                f" AND worker IS NOT NULL AND lease_until < COALESCE(%s, {NOW})",
                (now,),
            ).fetchall()
        return [(str(r[0]), str(r[1]), int(r[2]), r[3], r[4]) for r in rows]

    def claim_states(self, job_ids: Sequence[str]) -> dict[str, tuple[str | None, int, str, bool]]:
        """(worker, epoch, status, cancel requested) of each job: whether a claim is still ours, and what to do."""
        if not job_ids:
            return {}
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT id, worker, epoch, status, cancel_requested FROM jobs WHERE id = ANY(%s::text[])",
                (list(job_ids),),
            ).fetchall()
        return {str(r[0]): (r[1], int(r[2]), str(r[3]), bool(r[4])) for r in rows}

    def clock(self) -> float:
        """The store's time now (seconds since the epoch): what leases and heartbeats are judged by."""
        with self._conn() as conn:
            row = conn.execute(f"SELECT {NOW}").fetchone()
        return float(row[0]) if row else time.time()

    def has_queued(self) -> bool:
        """Whether any CLI job waits for a claim."""
        with self._conn() as conn:
            row = conn.execute("SELECT 1 FROM jobs WHERE status='queued' AND worker IS NULL AND kind='cli' LIMIT 1")
            return row.fetchone() is not None

    def queue_depth(self) -> list[tuple[str, str | None, int, float]]:
        """(agent, labels JSON, how many, oldest created_at) of the CLI jobs that wait for a claim (/metrics)."""
        with self._conn() as conn:
            rows = conn.execute(_QUEUE_DEPTH).fetchall()
        return [(str(r[0]), r[1], int(r[2]), float(r[3])) for r in rows]


def _take(
    conn: Conn,
    worker: WorkerInfo,
    room: int,
    held: dict[str, int],
    per_agent: Callable[[str], int],
    params: dict[str, Any],
    rows: list[tuple[Any, ...]],
) -> list[tuple[str, str, int]]:
    """Pick and claim up to `room` candidates oldest first from `rows` (the first window), counting each agent's
    slots in `held` as it goes; a window whose jobs were all of agents at their limit is followed by the next."""
    full = {agent for agent, n in held.items() if n >= per_agent(agent)}
    won: list[tuple[str, str, int]] = []
    while True:
        picked: list[tuple[str, str]] = []
        passed_over = set(params["full"])  # the agents the query of `rows` left out
        for job_id, agent in rows:
            if len(picked) >= room:
                break
            if agent not in full and held.get(agent, 0) >= per_agent(agent):
                full.add(agent)
            if agent in full:
                continue
            picked.append((str(job_id), str(agent)))
            held[agent] = held.get(agent, 0) + 1
        if picked:
            taking = (worker.id, worker.lease_s, worker.pid, worker.start_ticks, [j for j, _ in picked])
            epochs = dict(conn.execute(_TAKE, (*taking, len(picked), worker.id)).fetchall())
            won += [(job_id, agent, int(epochs[job_id])) for job_id, agent in picked]
            room -= len(picked)
        if room <= 0 or len(rows) < params["window"] or (not picked and full == passed_over):
            return won  # full, or the window held every candidate, or nothing new could start
        params = params | {"full": sorted(full)}
        rows = conn.execute(_CANDIDATES, params).fetchall()
