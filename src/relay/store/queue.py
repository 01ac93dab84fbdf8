"""Claims: the store decides who runs a job, across every process (and host) that uses it; one body, two dialects.

A job starts only under a claim won in one transaction: on SQLite `BEGIN IMMEDIATE` (claimers of every
process take turns on the database's write lock), on PostgreSQL an advisory lock held to the commit while
the slots every worker holds are counted, and the candidates read oldest first `FOR UPDATE SKIP LOCKED` (a
row another transaction is changing is passed over, not waited on). The claim counts the slots held by
every worker against the global and per-agent limits. A claim is a lease: the worker's id, an expiry renewed
by its heartbeat, and a fencing epoch that every later write of the job's state must match (`epoch=` on
mark_running, add_events, finish_job): a worker whose lease was taken over cannot finish the job a second
time. A job holds a slot while it is queued or running with a worker named.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from relay.store.dialect import Dialect, OverConn, Rows, Step, Tx, marks, timed

# The jobs that hold a slot: claimed and not final. In-process tasks (model calls) take no slot.
HOLDS_SLOT = "status IN ('queued', 'running') AND worker IS NOT NULL AND kind = 'cli'"
# How many queued jobs one claim looks at, at most (oldest first) to find ones its limits let start.
CLAIM_WINDOW = 500
# Candidates a claim reads beyond twice its free slots (passed over when their agent is at its limit).
WINDOW_SPARE = 16
# The workers not heard from since a time (the one parameter) that no queued or running job names: a worker
# that stopped, was lost or was killed long ago (one that comes back registers again at its next heartbeat).
GONE_WORKERS = (
    "heartbeat_at < ? AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.worker = workers.id"
    " AND j.status IN ('queued', 'running'))"
)
# The queue's depth by agent and labels (relay_queue_depth): one scan of the queued jobs' index entries.
QUEUE_DEPTH = (
    "SELECT agent, labels, count(*), min(created_at) FROM jobs"
    " WHERE status = 'queued' AND worker IS NULL AND kind = 'cli' GROUP BY agent, labels"
)
_WORKERS = (
    "SELECT w.id, w.name, w.host, w.pid, w.start_ticks, w.boot_id, w.agents, w.labels, w.slots, w.lease_s,"
    " w.started_at, w.heartbeat_at, w.stopped_at, w.state, w.ran,"
    f" (SELECT count(*) FROM jobs j WHERE j.worker = w.id AND j.{HOLDS_SLOT.replace(' AND ', ' AND j.')})"
    " FROM workers w"
)
# A claim of a job (params: worker, lease_s, pid, start ticks; its lease runs out by the store's clock, `{now}`).
_CLAIM = "UPDATE jobs SET worker=?, lease_until={now} + ?, epoch=epoch+1, owner_pid=?, owner_start_ticks=?"
# A heartbeat's change of a worker judged `lost` that is heard from again: `running` again (its lost jobs stay ended).
REVIVE = (
    "stopped_at = CASE WHEN state = 'lost' THEN NULL ELSE stopped_at END,"
    " state = CASE WHEN state = 'lost' THEN 'running' ELSE state END"
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


@dataclass(frozen=True)
class ClaimAsk:
    """A claim for a worker's free slots (`ClaimsBody.claim`'s arguments), to make with a job's insert (one
    transaction: a front that runs its own jobs claims the one it queues without another round trip)."""

    worker: WorkerInfo
    free: int
    max_total: int
    per_agent: Callable[[str], int]


def worker_row(info: WorkerInfo, now: float) -> tuple[Any, ...]:
    """The workers row of `info` as both dialects insert it (id ... lease_s, started_at, heartbeat_at)."""
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


def _worker(r: Sequence[Any]) -> WorkerRecord:
    agents, labels = (json.loads(r[6]) if r[6] else None), json.loads(r[7] or "[]")
    return WorkerRecord(*r[:6], agents, labels, *r[8:])  # pyright: ignore[reportCallIssue]


class ClaimsBody(OverConn):
    """Workers and claims over `_db` (mixed into each backend's store, which opens `_db`)."""

    # The agents whose jobs this store's claims met in the queue (their limits go with every claim); a store's own
    # once it met one.
    _agents_met: frozenset[str] = frozenset()

    # workers ------------------------------------------------------------------------------

    @timed
    def register_worker(self, info: WorkerInfo) -> None:
        self._db.exec(self._db.dialect.register_worker, worker_row(info, 0.0)[:-2])

    @timed
    def heartbeat(self, worker_id: str, lease_s: float) -> bool:
        """The worker is alive: its row and the lease of every job it holds are renewed by the store's clock (False:
        it has no row). A worker judged lost that is heard from again is running again (its jobs' fate is sealed)."""
        now = self._db.dialect.now
        if self._db.dialect.name == "postgresql":
            # One statement, sent whole: a transaction of two pipelined statements could be left open, its COMMIT
            # unsent, by a worker paused or cut off mid-send, holding its jobs' rows locked so that no other process
            # could end them (a lost worker's lease judged, its `interrupted` waiting on the lock for good).
            row = self._db.exec(
                f"WITH w AS (UPDATE workers SET heartbeat_at={now}, {REVIVE} WHERE id=? RETURNING 1),"
                f" j AS (UPDATE jobs SET lease_until={now} + ? WHERE worker=? AND status IN ('queued', 'running'))"
                " SELECT count(*) FROM w",
                (worker_id, lease_s, worker_id),
            ).fetchone()
            return row is not None and int(row[0]) == 1
        done = self._db.batch(
            [
                Step(f"UPDATE workers SET heartbeat_at={now}, {REVIVE} WHERE id=?", (worker_id,)),
                Step(
                    f"UPDATE jobs SET lease_until={now} + ? WHERE worker=? AND status IN ('queued', 'running')",
                    (lease_s, worker_id),
                ),
            ],
            lock=True,
        )
        return done[0].rowcount == 1

    def flush_marks(self) -> None:
        """Write the newest audit mark now (JobBody's: the store's marks are written behind)."""

    @timed
    def stop_worker(self, worker_id: str, state: str) -> None:
        """Record a worker's end (`stopping`, `stopped`, `lost`), the newest audit mark written first (a worker
        stopping leaves it current)."""
        self.flush_marks()
        stopped = time.time() if state != "stopping" else None
        self._db.exec(
            "UPDATE workers SET state=?, stopped_at=COALESCE(?, stopped_at) WHERE id=?", (state, stopped, worker_id)
        )

    @timed
    def prune_workers(self, older_than: float) -> int:
        """Delete the rows of workers not heard from since `older_than` that no queued or running job names;
        how many went."""
        return self._db.exec(f"DELETE FROM workers WHERE {GONE_WORKERS}", (older_than,)).rowcount

    @timed
    def list_workers(self, *, include_stopped: bool = True) -> list[WorkerRecord]:
        """Workers, the most recently alive first, with how many jobs each holds now."""
        where = "" if include_stopped else " WHERE w.state IN ('running', 'stopping')"
        return [_worker(r) for r in self._db.exec(f"{_WORKERS}{where} ORDER BY w.heartbeat_at DESC")]

    @timed
    def get_worker(self, worker_id: str) -> WorkerRecord | None:
        found = self._db.exec(f"{_WORKERS} WHERE w.id = ?", (worker_id,)).fetchone()
        return _worker(found) if found is not None else None

    # claims ------------------------------------------------------------------------------

    @timed
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
        every worker; returns (job id, agent, epoch) of each. `only`: consider just these jobs.

        On PostgreSQL the lock, the one statement that decides and takes, and the commit go to the server together:
        one round trip, and the lock is held for as short a time as the network allows."""
        seen = self._queue_seen(worker) if not only else None
        if seen is not None and free > 0 and self._nothing_queued == seen:
            return []
        won, any_left, _ = self._claim(worker, free, max_total, per_agent, only)
        if seen is not None and not any_left:
            self._nothing_queued = seen
        return won

    # (worker, what the store had seen of other processes, jobs queued by this one) when that worker's claim last
    # left nothing it could run: the next claim of the same worker finds nothing either while these stay (a job's end
    # claims for the slot it frees, and most often nothing waits).
    _nothing_queued: tuple[Any, ...] | None = None

    def _queue_seen(self, worker: WorkerInfo, ahead: int = 0) -> tuple[Any, ...] | None:
        """What `_nothing_queued` compares (`ahead`: jobs about to be queued by this process), or None when this
        store cannot tell (every claim then asks)."""
        del worker, ahead
        return None

    def _insert_claiming(
        self, job_ids: Sequence[str], inserts: Sequence[Step], ask: ClaimAsk
    ) -> list[tuple[str, str, int]]:
        """Jobs' inserts and a claim for `ask` in one transaction: what the claim won (a job among them when it is
        among the oldest this worker can run)."""
        del job_ids
        return self._insert_and_claim(inserts, ask)[0]

    def _insert_and_claim(
        self, inserts: Sequence[Step], ask: ClaimAsk
    ) -> tuple[list[tuple[str, str, int]], list[Rows]]:
        """`_insert_claiming`'s work: what the claim won, and the inserts' rows (none when they did not run)."""
        seen = self._queue_seen(ask.worker, ahead=len(inserts))
        won, any_left, first = self._claim(ask.worker, ask.free, ask.max_total, ask.per_agent, (), inserts)
        if seen is not None and not any_left:
            self._nothing_queued = seen
        return won, first

    def _claim(
        self,
        worker: WorkerInfo,
        free: int,
        max_total: int,
        per_agent: Callable[[str], int],
        only: Sequence[str],
        before: Sequence[Step] = (),
    ) -> tuple[list[tuple[str, str, int]], bool, list[Rows]]:
        """`claim`'s work, whether a queued job this worker could run may be left (False: it took them all), and
        the rows of `before`: statements run first in the claim's transaction (a job's insert; then `free` > 0)."""
        if free <= 0:
            return [], True, []
        # Each candidate read is locked on PostgreSQL: a window just larger than the slots to fill.
        window = min(CLAIM_WINDOW, 2 * free + WINDOW_SPARE)
        if self._db.dialect.claim_in_one:
            return self._claim_in_one(worker, free, max_total, per_agent, only, window, before)
        with self._db.tx(lock=True) as tx:
            first = [tx.exec(step.sql, step.params) for step in before]
            counts = tx.exec(f"SELECT agent, count(*) FROM jobs WHERE {HOLDS_SLOT} GROUP BY agent")
            where, params = _eligible(self._db.dialect, worker, only)
            rows = _candidates(tx, where, params, (), window).fetchall()
            held = {str(a): int(n) for a, n in counts}
            room = min(free, max_total - sum(held.values()))
            if room <= 0:
                return [], bool(rows), first
            taken = _take(tx, self._db.dialect, worker, room, held, per_agent, (where, params), window, rows)
            count = sum(len(picked) for picked, _ in taken)
            if count:
                tx.exec("UPDATE workers SET ran = ran + ? WHERE id=?", (count, worker.id))
        return _won(taken), not (count == len(rows) < window), first

    def _claim_in_one(
        self,
        worker: WorkerInfo,
        free: int,
        max_total: int,
        per_agent: Callable[[str], int],
        only: Sequence[str],
        window: int,
        before: Sequence[Step],
    ) -> tuple[list[tuple[str, str, int]], bool, list[Rows]]:
        """`_claim` in one statement (`_claim_sql`: it decides, takes and counts what the worker ran), sent with the
        lock and the commit (and `before` ahead of them): one round trip (PostgreSQL).

        A full window that left room because an agent reached its limit is followed by another, which leaves that
        agent out. The statement is given the limits of the agents the worker names, or of those this store met in
        the queue: one it does not know (a new agent's job, for a worker of every agent) stops it before it takes
        anything, and it runs again with that agent's limit."""
        d = self._db.dialect
        lock = [Step(_GENERIC_PLAN), *([Step(d.claim_lock)] if d.claim_lock is not None else [])]
        won: list[tuple[str, str, int]] = []
        first: list[Rows] = []
        while True:
            known = frozenset(worker.agents) if worker.agents is not None else self._agents_met
            sql, params = _claim_sql(d, worker, only, window, {a: per_agent(a) for a in known}, free, max_total)
            done = self._db.batch([*before, *lock, Step(sql, params)], lock=True)
            if before:
                first, before = done[: len(before)], ()
            rows: list[tuple[Any, ...]] = [tuple(r) for r in done[-1].fetchall()]
            *_, candidates, room, left = next(r for r in rows if r[0] == _SUMMARY)
            met = {str(r[2]) for r in rows if r[0] == _UNKNOWN}
            if met - known:  # nothing was taken: again, with their limits
                self._agents_met |= met
                continue
            taken = sorted((r for r in rows if r[0] == _TAKEN), key=lambda r: (r[4], r[1]))
            won += [(str(r[1]), str(r[2]), int(r[3])) for r in taken]
            free -= len(taken)
            if not taken or len(taken) >= int(room) or int(candidates) < window:
                return won, bool(left), first

    @timed
    def take_over(self, job_id: str, epoch: int, worker: WorkerInfo) -> int | None:
        """Take a claimed job over from a worker that is gone (only if its claim is still `epoch`): the new
        epoch, or None when another worker took it first or it ended."""
        claim = _CLAIM.format(now=self._db.dialect.now)
        row = self._db.exec(
            f"{claim} WHERE id=? AND epoch=? AND status IN ('queued', 'running') RETURNING epoch",
            (worker.id, worker.lease_s, worker.pid, worker.start_ticks, job_id, epoch),
        ).fetchone()
        return int(row[0]) if row is not None else None

    @timed
    def unclaim(self, job_id: str, epoch: int, *, requeue_running: bool = False) -> bool:
        """Hand a claim back (a worker stopping before it started the job; a lost worker's job that asked
        to be retried): the job is queued again for any worker, under a new epoch."""
        statuses = "('queued', 'running')" if requeue_running else "('queued')"
        with self._db.tx(lock=True) as tx:
            changed = tx.exec(
                "UPDATE jobs SET worker=NULL, lease_until=NULL, epoch=epoch+1, status='queued', owner_pid=NULL,"
                " owner_start_ticks=NULL, pid=NULL, pid_start_ticks=NULL, started_at=NULL"
                f" WHERE id=? AND epoch=? AND status IN {statuses}",
                (job_id, epoch),
            ).rowcount
            if changed == 1 and requeue_running:  # the run starts over: the lost one's events and output go
                tx.exec("DELETE FROM events WHERE job_id=?", (job_id,))
                tx.exec("DELETE FROM outputs WHERE job_id=?", (job_id,))
        return changed == 1

    @timed
    def expired_leases(self, now: float | None = None) -> list[tuple[str, str, int, str | None, str | None]]:
        """Claimed jobs whose lease ran out by the store's clock (or before `now`, when given): (job id, worker,
        epoch, status, retry) of each."""
        rows = self._db.exec(
            "SELECT id, worker, epoch, status, retry FROM jobs WHERE status IN ('queued', 'running')"
            f" AND worker IS NOT NULL AND lease_until < COALESCE(?, {self._db.dialect.now})",
            (now,),
        )
        return [(str(r[0]), str(r[1]), int(r[2]), r[3], r[4]) for r in rows]

    @timed
    def claim_states(self, job_ids: Sequence[str]) -> dict[str, tuple[str | None, int, str, bool]]:
        """(worker, epoch, status, cancel requested) of each job: whether a claim is still ours, and what to do."""
        if not job_ids:
            return {}
        rows = self._db.exec(
            f"SELECT id, worker, epoch, status, cancel_requested FROM jobs WHERE id IN ({marks(len(job_ids))})",
            list(job_ids),
        )
        return {str(r[0]): (r[1], int(r[2]), str(r[3]), bool(r[4])) for r in rows}

    @timed
    def place_job(self, job_id: str, request: dict[str, Any], cwd: str, *, epoch: int | None) -> bool:
        """The folder a claimed job was placed in by its worker (a job by repository URL: its worktree there), and
        its request saying so; only under the claim of `epoch` (else False)."""
        sql = "UPDATE jobs SET request=?, cwd=? WHERE id=?" + (" AND epoch=?" if epoch is not None else "")
        params = (json.dumps(request), cwd, job_id, *(() if epoch is None else (epoch,)))
        return self._db.exec(sql, params).rowcount == 1

    @timed
    def queue_depth(self) -> list[tuple[str, str | None, int, float]]:
        """(agent, labels JSON, how many, oldest created_at) of the CLI jobs that wait for a claim (/metrics)."""
        return [(str(r[0]), r[1], int(r[2]), float(r[3])) for r in self._db.exec(QUEUE_DEPTH)]

    @timed
    def has_queued(self) -> bool:
        """Whether any CLI job waits for a claim."""
        sql = "SELECT 1 FROM jobs WHERE status='queued' AND worker IS NULL AND kind='cli' LIMIT 1"
        return self._db.exec(sql).fetchone() is not None


def _eligible(d: Dialect, worker: WorkerInfo, only: Sequence[str]) -> tuple[str, list[Any]]:
    """Which jobs the worker can run (a WHERE over `jobs`, and its values): queued, unclaimed CLI jobs of its agents
    (any when it names none), every label the job asks for among the worker's; `only` narrows them."""
    where = "status = 'queued' AND worker IS NULL AND kind = 'cli'"
    params: list[Any] = []
    if only:
        where += f" AND id IN ({marks(len(only))})"
        params += only
    if worker.agents is not None:
        where += f" AND agent IN ({marks(len(worker.agents))})" if worker.agents else " AND false"
        params += worker.agents
    where += f" AND (labels IS NULL OR {d.labels_within})"
    params.append(json.dumps(sorted(worker.labels)))
    return where, params


def _candidates(tx: Tx, where: str, params: list[Any], full: Sequence[str], window: int) -> Rows:
    """The oldest `window` jobs of `where` (`_eligible`), none of the agents in `full`."""
    if full:
        where += f" AND agent NOT IN ({marks(len(full))})"
    sql = f"SELECT id, agent FROM jobs WHERE {where} ORDER BY created_at, id LIMIT ?"
    return tx.exec(sql, (*params, *full, window))


def _take(
    tx: Tx,
    d: Dialect,
    worker: WorkerInfo,
    room: int,
    held: dict[str, int],
    per_agent: Callable[[str], int],
    eligible: tuple[str, list[Any]],
    window: int,
    rows: list[Any],
) -> list[tuple[list[tuple[str, str]], Rows]]:
    """Pick and claim up to `room` candidates oldest first from `rows` (the first window), counting each agent's
    slots in `held` as it goes; a window whose jobs were all of agents at their limit is followed by the next
    (SQLite: the transaction holds the write lock, so every job picked is taken)."""
    full = {agent for agent, n in held.items() if n >= per_agent(agent)}
    passed_over: set[str] = set()  # the agents the query of `rows` left out
    taken: list[tuple[list[tuple[str, str]], Rows]] = []
    while True:
        picked: list[tuple[str, str]] = []
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
            ids = [j for j, _ in picked]
            taking = (worker.id, worker.lease_s, worker.pid, worker.start_ticks, *ids)
            where = f"WHERE id IN ({marks(len(ids))}) AND status = 'queued' AND worker IS NULL RETURNING id, epoch"
            taken.append((picked, tx.exec(f"{_CLAIM.format(now=d.now)} {where}", taking)))
            room -= len(picked)
        if room <= 0 or len(rows) < window or (not picked and full == passed_over):
            return taken  # full, or the window held every candidate, or nothing new could start
        passed_over = set(full)
        rows = _candidates(tx, *eligible, sorted(full), window).fetchall()


def _won(taken: list[tuple[list[tuple[str, str]], Rows]]) -> list[tuple[str, str, int]]:
    """(job id, agent, epoch) of each job taken."""
    won: list[tuple[str, str, int]] = []
    for picked, rows in taken:
        epochs = {str(j): int(e) for j, e in rows}
        won += [(job_id, agent, epochs[job_id]) for job_id, agent in picked if job_id in epochs]
    return won


# The kinds of `_claim_sql`'s rows: one summary (how many candidates, the room in total, whether a job the worker
# could run is left), a job taken (or, where the statement only chooses, chosen), an agent of no limit given.
_SUMMARY, _TAKEN, _UNKNOWN = 0, 1, 2
# The claim's statement is planned once per connection (psycopg prepares it from its fifth run): PostgreSQL would
# plan it again at each run for its values (custom plans: 0.5 ms of its 0.8), and its plan does not depend on them.
_GENERIC_PLAN = "SET LOCAL plan_cache_mode = force_generic_plan"


def _claim_sql(
    d: Dialect, worker: WorkerInfo, only: Sequence[str], window: int, limits: dict[str, int], free: int, max_total: int
) -> tuple[str, list[Any]]:
    """The claim as one statement (PostgreSQL) and its values: rows (kind, job id, agent, epoch, created_at,
    candidates, room, left), `kind` one of _SUMMARY, _TAKEN, _UNKNOWN.

    The window holds the oldest jobs the worker can run, none of an agent already at its limit, locked and
    passing over those another transaction holds; of them are taken, oldest first, those within their agent's room
    (its limit less the slots it holds on every worker) and the room in total (`free`, and `max_total` less every
    slot held), and counted in the worker's `ran`. An agent with no limit in `limits` stops it: nothing is taken."""
    where, eligible = _eligible(d, worker, only)
    pairs = [v for agent, n in sorted(limits.items()) for v in (agent, n)]

    def limit_of(agent: str) -> str:  # the limit of `agent` (a column), NULL for one not in `limits`
        return f"CASE {agent}{' WHEN ? THEN ?::int' * len(limits)} END" if limits else "CAST(NULL AS int)"

    room = f"{d.least}(?, ? - (SELECT COALESCE(sum(n), 0) FROM held))"
    sql = (
        f"WITH held AS (SELECT agent, count(*) AS n FROM jobs WHERE {HOLDS_SLOT} GROUP BY agent),"
        f" cand AS (SELECT id, agent, created_at, {limit_of('agent')} AS cap FROM jobs WHERE {where}"
        f" AND agent NOT IN (SELECT agent FROM held WHERE n >= {limit_of('agent')})"
        f" ORDER BY created_at, id LIMIT ?{d.skip_locked}),"
        " chosen AS (SELECT id FROM (SELECT id, created_at, cap, row_number() OVER (PARTITION BY agent"
        " ORDER BY created_at, id) + COALESCE((SELECT n FROM held WHERE held.agent = cand.agent), 0) AS nth"
        " FROM cand) AS ranked WHERE nth <= cap AND NOT EXISTS (SELECT 1 FROM cand WHERE cap IS NULL)"
        f" ORDER BY created_at, id LIMIT {d.greatest}(0, {room})),"
        f" taken AS ({_CLAIM.format(now=d.now)} FROM chosen WHERE jobs.id = chosen.id"
        " AND jobs.status = 'queued' AND jobs.worker IS NULL RETURNING jobs.id, jobs.agent, jobs.epoch, jobs.created_at),"
        " ran AS (UPDATE workers SET ran = ran + (SELECT count(*) FROM taken) WHERE id = ?"
        " AND EXISTS (SELECT 1 FROM taken))"
        f" SELECT {_SUMMARY}, NULL, NULL, NULL, NULL, (SELECT count(*) FROM cand), {room},"
        # a job left: the oldest not taken (by the queue's index, not a scan of every job's row)
        f" CASE WHEN (SELECT id FROM jobs WHERE {where} AND id NOT IN (SELECT id FROM chosen)"
        " ORDER BY created_at, id LIMIT 1) IS NULL THEN 0 ELSE 1 END"
        f" UNION ALL SELECT {_TAKEN}, id, agent, epoch, created_at, NULL, NULL, NULL FROM taken"
        f" UNION ALL SELECT {_UNKNOWN}, NULL, agent, NULL, NULL, NULL, NULL, NULL FROM cand WHERE cap IS NULL"
    )
    taking = [worker.id, worker.lease_s, worker.pid, worker.start_ticks, worker.id]
    return sql, [
        *pairs, *eligible, *pairs, window,  # held, cand
        free, max_total, *taking,  # chosen, taken, ran
        free, max_total, *eligible,  # the rows
    ]  # fmt: skip
