"""Tending: this process's place in the store's queue while its engine runs.

Every third of a lease its heart (jobs/fence.py: a thread) renews its claims, and tries again every half
second while the store is away; past the lease it last renewed, its own jobs are killed before anyone
else may judge it lost. Every third of a lease the loop here ends the jobs of workers that were lost
(another host's worker whose lease ran out: `interrupted`, naming it, or queued again when the job
asked `retry: "on_lost_worker"`), adopts the jobs of a worker of this host that died (recovery.py),
stops the jobs whose claim another worker took over, and once an hour deletes the rows of workers
gone for longer than `[queue] worker_retention_days`. In between it watches the store for what
other processes did: a cancel of a job it runs, work queued while it has free slots.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

import anyio

from relay.errors import ErrorCode, RelayError
from relay.jobs.fence import Heart, store_down, sweep
from relay.jobs.lifecycle import SPAWN_MARKER, Lifecycle
from relay.jobs.recovery import Recovery
from relay.jobs.state import LEASE_LOST, JobState
from relay.jobs.waiting import Waiting
from relay.runtime import procinfo, supervisor
from relay.store import JobRecord, WorkerRecord
from relay.telemetry import metrics

# How often a SQLite store is looked at for other processes' cancels and queued work (PRAGMA data_version:
# a read of shared memory that does nothing unless another process committed since).
WATCH_S = 0.1
# A store that announces changes (PostgreSQL) wakes the loop when one comes; else it turns this often at
# least (for the heartbeat), asking the database nothing.
NOTICE_WAIT_S = 1.0
# How often one process deletes the rows of workers gone for longer than `[queue] worker_retention_days`.
PRUNE_WORKERS_S = 3600.0

logger = logging.getLogger(__name__)

# What to do about a job whose worker was lost.
LOST_HINT = (
    "the job was not run again (an agent's work has side effects): run it again, or submit it with "
    "retry='on_lost_worker' to have another worker run it"
)


class Tending:
    def __init__(self, state: JobState, lifecycle: Lifecycle, recovery: Recovery) -> None:
        self._state = state
        self._lifecycle = lifecycle
        self._recovery = recovery
        self._seen_version = -1
        self._next_prune = 0.0  # time.monotonic() of the next prune of the workers table
        self._next_dead_check = 0.0  # time.monotonic() of the next look for this host's dead workers

    @property
    def beat_s(self) -> float:
        """Every third of a lease: the heartbeat, and the look at others' leases."""
        return max(self._state.settings.lease_s / 3, 0.1)

    async def run(self) -> None:
        """The loop; cancelled with the engine's task group."""
        state = self._state
        beat = self.beat_s
        next_beat = time.monotonic() + beat
        target = state.settings.store_target
        down = (lambda: store_down(str(target))) if state.store.spans_hosts else None
        heart = Heart(state.fence, self.renew, beat, down)
        heart.start()  # the fence's keeper runs already: the engine started it (keep_fence) before any claim
        try:
            self.sweep()
            # A store that announces changes (PostgreSQL's NOTIFY) wakes the loop at once; SQLite's is looked at.
            woken: Callable[[int, float], bool] | None = getattr(state.store, "wait_queue_change", None)
            while True:
                if woken is None:
                    await anyio.sleep(WATCH_S)
                else:
                    wait = min(NOTICE_WAIT_S, max(next_beat - time.monotonic(), 0.01))
                    await anyio.to_thread.run_sync(woken, self._seen_version, wait, abandon_on_cancel=True)
                self.enforce_fence()
                # A store that cannot be written now (disk full, lock held) is tried again at the next turn.
                with contextlib.suppress(RelayError):
                    self.watch()
                    if time.monotonic() >= next_beat:
                        next_beat = time.monotonic() + beat
                        self.beat()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(heart.stop)
            state.fence.close()

    def keep_fence(self) -> None:
        """Start the fence's keeper (once): the engine does before its first claim, since a worker stopped right after
        its first spawn (before this loop ran) must still have that job killed at its deadline."""
        if self._state.fence.timed:
            self._state.fence.start_keeper()

    def renew(self) -> bool:
        """The heart's call (a thread): renew this worker's leases; a front checks that the store answers."""
        state = self._state
        if not state.settings.runs_jobs:
            state.store.clock()
            return True
        if not state.store.heartbeat(state.worker.id, state.settings.lease_s):
            state.store.register_worker(state.worker)  # the store could not take it as the engine started
        metrics.lease_renewed()
        return True

    def enforce_fence(self) -> list[str]:
        """Past the lease this worker last renewed: kill its jobs' processes (the keeper may have already) and stop
        their monitors, which record nothing more of them; their ids."""
        state = self._state
        if not state.fence.passed():
            return []
        killed = state.fence.enforce()
        for job_id in state.fence.guarded():
            live = state.live.get(job_id)
            if live is not None and not live.stop.is_set():
                live.stop_reason = LEASE_LOST
                live.stop.set()
        if killed:
            logger.warning("lease not renewed in time: the processes of jobs %s were killed", ", ".join(killed))
        return killed

    def sweep(self) -> list[str]:
        """Kill what an earlier life of a worker of this home left running (its fence file remains, its process is
        gone), unless it was adopted again (jobs/recovery.py); the job folders killed."""
        state = self._state
        if not state.settings.runs_jobs:
            return []
        live = {state.files(job_id).dir for job_id in state.live}
        try:
            killed = sweep(state.settings.home, state.fence.path, lambda folder: folder in live)
        except OSError:
            return []
        if killed:
            logger.warning("stopped jobs an earlier worker of this home left running: %s", [f.name for f in killed])
        return [f.name for f in killed]

    def beat(self) -> None:
        state = self._state
        # A process that was away from the store judges no lease until it has heard from it steadily for a beat:
        # the workers that were away with it get their turn to renew first.
        if state.fence.steady(self.beat_s):
            self.judge_lost()
            self.end_fenced()
        if state.settings.runs_jobs:  # a front that runs no jobs has no claims to renew, none to adopt
            self._recovery.recover()
        self.mark_dead_workers()
        self.prune_workers()

    def mark_dead_workers(self) -> list[str]:
        """At most once a lease: this host's workers whose process is gone while their row still says running or
        stopping (killed: nothing said so; recover() took their jobs over) are marked `lost`; their ids."""
        state = self._state
        if time.monotonic() < self._next_dead_check:
            return []
        self._next_dead_check = time.monotonic() + state.settings.lease_s
        lost: list[str] = []
        now = state.store.clock()  # "last heard from" by the store's clock, as it stamped the heartbeat
        for w in state.store.list_workers(include_stopped=False):
            if w.id == state.worker.id or w.boot_id != state.worker.boot_id or now - w.heartbeat_at <= w.lease_s:
                continue  # ours, another host's (its lease tells: judge_lost), or heard from within its lease
            if not procinfo.is_alive(w.pid, w.start_ticks):  # same host: its pid and start time tell
                state.store.stop_worker(w.id, "lost")
                lost.append(w.id)
        return lost

    def prune_workers(self) -> int:
        """At most once per PRUNE_WORKERS_S: delete the workers not heard from for the retention that no active
        job names (store.prune_workers); how many went."""
        if time.monotonic() < self._next_prune:
            return 0
        state = self._state
        gone = state.store.prune_workers(time.time() - state.settings.worker_retention_s)
        self._next_prune = time.monotonic() + PRUNE_WORKERS_S
        return gone

    def watch(self) -> None:
        """Act on what other processes wrote since the last look: cancels of our jobs, claims taken over, work."""
        state = self._state
        version = state.store.queue_version()
        if version == self._seen_version:
            return
        self._seen_version = version
        # Judged against one read of the store: nothing here claims meanwhile (a job let go is let go after).
        here = {job_id for job_id in state.live if state.runs_here(job_id)}
        elsewhere: list[str] = []
        for job_id, (worker, epoch, status, cancel) in state.store.claim_states(list(state.live)).items():
            live = state.live.get(job_id)
            if live is None or live.stop.is_set():
                continue
            if job_id not in here:
                if status not in ("queued", "running") or worker is not None:
                    elsewhere.append(job_id)  # queued here, claimed (or ended) elsewhere: not ours to keep
                continue
            # An in-process task holds no claim; a CLI job's claim may have been taken over by another worker, or
            # ended by one that judged this one lost (its lease ran out while it was cut off from the store).
            final = status not in ("queued", "running")
            if final and job_id in state.tasks:
                continue
            taken = job_id not in state.tasks and (
                final or worker != state.worker.id or epoch != state.epochs.get(job_id)
            )
            if taken or cancel:
                live.stop_reason = LEASE_LOST if taken else "cancelled"
                live.stop.set()
        for job_id in elsewhere:
            self._lifecycle.job_ended(job_id)
        if state.settings.runs_jobs and len(state.running) < state.worker.slots and state.store.has_queued():
            self._lifecycle.pump()
        state.notify()  # waiters on jobs of other processes look again

    def end_fenced(self) -> list[str]:
        """The jobs this worker fenced (it could not renew their lease in time) and no one has ended yet: ended now
        as a lost worker's are (`interrupted`, or queued again when they asked for a retry), under their claim.
        Without this a worker back from a long outage would renew the leases of its dead jobs for good."""
        state = self._state
        ended: list[str] = []
        for job_id, epoch in list(state.fence.lost_claims.items()):
            rec = state.store.get_job(job_id)
            state.fence.lost_claims.pop(job_id, None)
            if rec is None or rec.is_final or rec.epoch != epoch:
                continue  # ended, or taken over, by another process first
            folder = state.files(job_id).dir
            # Spawned, though its start may not have reached the store: its end, not a second run.
            spawned = (folder / "pid").exists() or (folder / SPAWN_MARKER).exists()
            err = RelayError(
                ErrorCode.INTERRUPTED,
                f"worker {state.worker.name} (host {state.worker.host}, pid {state.worker.pid}) could not renew its"
                f" lease of {state.settings.lease_s:g} s while it ran this job (the store was out of its reach), so"
                " it stopped the job before the lease ran out",
                LOST_HINT,
            )
            self._end_claim(job_id, epoch, "running" if spawned else rec.status, rec.request.get("retry"), err)
            ended.append(job_id)
        if ended:
            state.notify()
        return ended

    def _end_claim(self, job_id: str, epoch: int, status: str, retry: object, err: RelayError) -> tuple[str, bool]:
        """End a lost claim: a job never started, or one that asked for it, is queued again; else `interrupted`.
        What became of it, and whether this write took effect."""
        state = self._state
        if status == "queued" or retry == "on_lost_worker":
            return "requeued", state.store.unclaim(job_id, epoch, requeue_running=True)
        took = state.store.finish_job(
            job_id,
            "interrupted",
            exit_code=None,
            result=None,
            error=err.to_dict(),
            session_id=None,
            model=None,
            epoch=epoch,
            fence=True,
        )
        return "interrupted", took

    def judge_lost(self) -> None:
        """End the claims of workers of other hosts whose lease ran out (this host's dead ones: recover())."""
        state = self._state
        expired = state.store.expired_leases()
        if not expired:
            return
        workers = {w: state.store.get_worker(w) for w in {worker_id for _, worker_id, _, _, _ in expired}}
        for job_id, worker_id, epoch, status, retry in expired:
            worker = workers.get(worker_id)
            if worker is not None and worker.boot_id == state.worker.boot_id:
                continue  # this host's: alive (only late), or adopted by recover() once its pid is gone
            outcome, took = self._end_claim(job_id, epoch, str(status), retry, lost_worker_error(worker, worker_id))
            metrics.lease_expired(outcome, took)  # counted by the process whose write took effect
            if worker is not None and worker.state == "running":
                state.store.stop_worker(worker_id, "lost")
        state.notify()

    async def cancel_elsewhere(self, rec: JobRecord, waiting: Waiting) -> None:
        """Cancel a job this process does not run (its cancel is already requested in the store)."""
        state = self._state
        grace = state.settings.kill_grace_s + supervisor.KILL_CONFIRM_S
        worker = state.store.get_worker(rec.worker) if rec.worker else None
        if worker is not None and worker.boot_id != state.worker.boot_id:
            # Another host's worker: it sees the request at its next look at the store and kills the job there.
            await waiting.wait([rec.id], "all", grace + 2 * WATCH_S + 1)
            return
        if rec.pid is not None and procinfo.is_alive(rec.pid, rec.pid_start_ticks, rec.boot_id):
            proc = supervisor.attach(rec.pid, rec.pid_start_ticks, state.files(rec.id))
            with anyio.CancelScope(shield=True):
                await proc.kill_group(state.settings.kill_grace_s)
            proc.close()
        if rec.status == "queued" or not state.owner_alive(rec):
            if rec.status == "queued":
                self._lifecycle.finisher.finish_without_process(rec)
            else:
                fresh = state.store.get_job(rec.id)
                if fresh is not None:
                    self._recovery.reattach_or_finalize(fresh)
            state.notify()
        else:
            await waiting.wait([rec.id], "all", grace)


def lost_worker_error(worker: WorkerRecord | None, worker_id: str) -> RelayError:
    """The error of a job whose worker was lost: which worker, and since when it was not heard from."""
    if worker is None:
        who, since = f"worker {worker_id}", "it is not in the workers table"
    else:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(worker.heartbeat_at))
        who = f"worker {worker.name} (host {worker.host}, pid {worker.pid})"
        since = f"its last heartbeat was at {when} and its lease of {worker.lease_s:g} s ran out"
    return RelayError(ErrorCode.INTERRUPTED, f"{who} was lost while it ran this job: {since}", LOST_HINT)
