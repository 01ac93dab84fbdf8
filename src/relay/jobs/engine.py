"""The job engine: every delegation is a durable job that can be waited on, cancelled and read back.

`Engine` is the one API the MCP tools, the CLI and the dashboard call. The work is done in rooms,
each one responsibility, dependencies pointing down:

    engine.py     the public API: submit, wait, cancel, queries; wires the rooms together
    inserts.py    an admitted job's folder and row; jobs submitted together recorded in one transaction
    recovery.py   re-attach or finalize jobs after a restart
    paging.py     pages of a job's output, its diff and its land's test
    tending.py    heartbeat, lost workers, other processes' cancels and queued work
    lifecycle.py  spawn, monitor, end of job (CLI jobs and in-process tasks)
    publish.py    output lines -> events: store, transcript, cost cap, progress listeners
    finish.py     final status, error and result, recorded once
    admission.py  claims from the store's queue within the limits; bounds.py  what grows with use, and how far
    waiting.py    wait any/all, subscribe
    workspace.py  worktree jobs: placed in their worktree, sealed at the end, landed, discarded
    door.py       the one admission path: values, then session, model and workspace, then permit, then place
    request.py    JobRequest and the steps of its admission (grants.py: the permission decision; sessions.py:
                  which session it resumes; depth.py: how deep); gitprobe.py  files_changed
    state.py      what the rooms share (settings, store, jobs of this process, change notices)
    known.py      whose each job submitted here is: following or waiting on it reads no row to find it visible
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import AsyncGenerator, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from relay.config import Settings
from relay.errors import RelayError, invalid
from relay.events import Event
from relay.jobs import grants
from relay.jobs.admission import Admission
from relay.jobs.depth import check_depth, with_inherited_depth
from relay.jobs.door import Door
from relay.jobs.envelope import envelope
from relay.jobs.inserts import Queueing
from relay.jobs.known import Known
from relay.jobs.lifecycle import Lifecycle, SpawnFn, TaskFn
from relay.jobs.output import read_bytes_page
from relay.jobs.paging import job_cursor, parse_cursor, read_page
from relay.jobs.recovery import Recovery
from relay.jobs.request import SUBMITTED_VIA, JobRequest
from relay.jobs.state import JobState, new_job_id
from relay.jobs.tending import Tending
from relay.jobs.waiting import Waiting
from relay.jobs.workspace import JobWorkspaces, next_for
from relay.principal import current, visible_to
from relay.runtime import choice, supervisor
from relay.runtime.supervisor import JobFiles
from relay.store import JobRecord, JobStore, SessionRecord, WorkerInfo
from relay.store.open import open_store
from relay.telemetry import job as telemetry

__all__ = ["Engine", "JobRequest", "Mode", "SpawnFn", "TaskFn", "job_cursor", "new_job_id"]

Mode = Literal["sync", "async", "auto"]


class Engine:
    """Runs jobs in a task group it owns; use as `async with Engine(settings) as engine`."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: JobStore | None = None,
        spawn: SpawnFn = supervisor.spawn,
        which: Callable[[str], str | None] = shutil.which,
    ) -> None:
        self.settings = settings
        choice.use(settings.runtime)  # the process runtime, chosen once here at start-up (pidfd or portable)
        self.store = store or open_store(settings.store_target, home=settings.home, pool_size=settings.store_pool_size)
        # A relay started inside a job is one level deeper than that job, whatever its environment says.
        settings = self.settings = with_inherited_depth(settings, self.store)
        self._state = JobState(settings, self.store)
        self._admission = Admission(self._state)
        self._workspaces = JobWorkspaces(self._state)
        self._door = Door(self._state, self._workspaces, which)
        self._lifecycle = Lifecycle(self._state, self._admission, spawn=spawn, readmit=self._door.readmit)
        self._recovery = Recovery(self._state, self._lifecycle)
        self._tending = Tending(self._state, self._lifecycle, self._recovery)
        self._waiting = Waiting(self._state)
        self.known = Known(lambda job_id: self.get(job_id).id)  # whose each job submitted here is: no re-reads
        self._queueing = Queueing(self._state, self._admission, self._lifecycle, self.known)
        self.started_at = time.time()

    # running ------------------------------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncGenerator[Engine]:
        slots = self._state.worker.slots if self.settings.runs_jobs else 0
        shown = telemetry.watching(self.running_count, slots, self.store.queue_depth)  # on /metrics while it runs
        async with anyio.create_task_group() as tg, shown:
            self._state.open(tg)
            self._tending.keep_fence()  # before anything is claimed: a worker stopped at once still has its keeper
            if self.settings.runs_jobs:  # a store busy now: registered at the first heartbeat
                with contextlib.suppress(RelayError):
                    self.store.register_worker(self._state.worker)
            self.recover()
            tg.start_soon(self._tending.run)
            try:
                yield self
            finally:
                # Leaving: monitors stop, processes keep running; the next relay of this host re-attaches.
                tg.cancel_scope.cancel()
                with contextlib.suppress(RelayError):
                    self.store.stop_worker(self._state.worker.id, "stopped")
                self._state.close()

    def make_ready(self) -> None:
        """A server about to take jobs: job folders and spare shims made now, in the background, not by the first jobs."""
        state = self._state
        state.refill_spares()
        if state.tg is not None and self._lifecycle.spawns_for_real:
            state.tg.start_soon(anyio.to_thread.run_sync, supervisor.warm)
        if state.tg is not None and (self.settings.worktrees_dir.is_dir() or self.settings.repos_dir.is_dir()):
            state.tg.start_soon(anyio.to_thread.run_sync, self._prune_quietly)

    def _prune_quietly(self) -> None:
        """The start-up prune: a worktree that cannot be removed now is tried again at the next start."""
        with contextlib.suppress(RelayError, OSError):
            self.prune_worktrees()

    async def __aenter__(self) -> Engine:
        self._cm = self.running()
        return await self._cm.__aenter__()

    async def __aexit__(self, *exc: object) -> None:
        await self._cm.__aexit__(*exc)  # pyright: ignore[reportArgumentType]

    def recover(self) -> list[str]:
        """Adopt jobs whose relay died: re-attach live processes, finalize ended ones, re-queue queued ones."""
        return self._recovery.recover()

    def reconcile(self) -> list[str]:
        """Finalize jobs whose relay died and whose process has ended (for CLI readers; adopts nothing alive)."""
        return self._recovery.reconcile()

    def running_count(self) -> int:
        return len(self._state.running)

    @property
    def worker(self) -> WorkerInfo:
        """This process as a worker of the store's queue."""
        return self._state.worker

    def drain(self) -> int:
        """Claim nothing more (a worker stopping cleanly); returns how many jobs it still runs."""
        self._state.draining = True
        self.store.stop_worker(self._state.worker.id, "stopping")
        return len(self._state.running)

    async def drained(self) -> None:
        """Wait until the jobs this process runs have ended."""
        while self._state.running:
            changed = self._state.changed
            with anyio.move_on_after(1.0):
                await changed.wait()

    # submitting ---------------------------------------------------------------------------

    def files(self, job_id: str) -> JobFiles:
        return self._state.files(job_id)

    def submit(self, req: JobRequest) -> str:
        """Admit (relay.jobs.door), record and queue a job; returns its id. Raises RelayError on bad input."""
        self._state.task_group()
        return self._queueing.queue(self._door.admit(req, new_job_id()))

    async def submit_confirmed(self, req: JobRequest) -> str:
        """`submit`, asking the person first when the job is above its grant; else `PERMISSION_NOT_GRANTED`."""
        self._state.task_group()
        return await self._queueing.queue_together(await self._door.admit_confirmed(req, new_job_id()))

    async def submit_off_loop(self, req: JobRequest) -> str:
        """`submit` with its admission in a worker thread (a worktree made meanwhile): for a caller on the loop."""
        self._state.task_group()
        return await self._queueing.queue_together(await self._door.admit_off_loop(req, new_job_id()))

    async def consent_for(self, req: JobRequest, agents: str | None = None) -> grants.Consent | None:
        """The person's answer now, for jobs like `req` a task submits later (best_of): None within the grant."""
        return await self._door.judge(req, agents)

    def submit_task(
        self,
        agent: str,
        request: dict[str, Any],
        task: TaskFn,
        *,
        model: str | None = None,
        timeout_s: float | None = None,
    ) -> str:
        """Run an in-process job (e.g. a model API call) with the same lifecycle as a CLI job.

        The task gets an `emit(event)` callback and returns an AgentResult; it is cancelled on
        job_cancel and on timeout. It cannot outlive relay: after a restart it is `interrupted`.
        """
        self._state.task_group()
        check_depth(self.settings)
        job_id = new_job_id()
        self._queueing.make_dir(job_id)
        request = {"via": SUBMITTED_VIA.get()} | request
        self.store.insert_jobs([self._state.new_job(job_id, agent, "task", request, model, None)], None)
        self.known.add(job_id, current().name, quiet=True)  # a model call: it asks the person nothing
        self._lifecycle.start_task(job_id, task, timeout_s or self.settings.job_timeout_s)
        return job_id

    # queries (each for the current principal: a `user` finds only the jobs it started) --------

    def get(self, job_id: str) -> JobRecord:
        """A job by id or unique prefix; another principal's answers JOB_NOT_FOUND, as if there were none."""
        return self._state.get(job_id, visible_to())

    def find(self, prefix: str) -> list[JobRecord]:  # jobs whose id starts with `prefix` (at most 5)
        return self.store.find_jobs(prefix, principal=visible_to())

    def sessions(self, *, agent: str | None = None, limit: int = 50) -> list[SessionRecord]:  # last used first
        return self.store.list_sessions(agent=agent, limit=limit, principal=visible_to())

    def envelope(self, job_id: str, rec: JobRecord | None = None) -> dict[str, Any]:
        rec = rec or self.get(job_id)  # `rec`: the caller's record of it, just read (a wait's end)
        state = self._state

        def page(path: Path, offset: int, limit: int) -> tuple[str, int]:
            return state.text_page(rec.id, "result", path, offset, limit)

        env = envelope(rec, self.files(rec.id), self.settings.output_limit_chars, page)
        env["workspace"] = ws = self._workspaces.current(rec)
        if ws is not None and rec.is_final and env["next"] is None:
            env["next"] = next_for(rec.id, ws.get("state"))
        return env

    def list(
        self,
        *,
        statuses: Iterable[str] = (),
        agent: str | None = None,
        since: float | None = None,
        session_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        via: str | None = None,
    ) -> list[JobRecord]:
        """Jobs newest first; `cursor` (from `job_cursor` of the last job of a page) continues after it."""
        before = parse_cursor(cursor) if cursor else None
        return self.store.list_jobs(
            statuses=statuses,
            agent=agent,
            since=since,
            session_id=session_id,
            limit=limit,
            before=before,
            via=via,
            principal=visible_to(),
        )

    def read_output(self, job_id: str, view: str, offset: int, limit: int) -> dict[str, Any]:
        """A page of a job's full output: final text, transcript, raw stdout events, stderr, diff or test."""
        return read_page(self._state, self._workspaces, self.get(job_id), view, offset, limit)

    def read_raw(self, job_id: str, offset: int, limit: int) -> tuple[bytes, int]:
        rec = self.get(job_id)
        return read_bytes_page(self.files(rec.id).stdout, offset, limit)

    def events(self, job_id: str, after_seq: int = -1, limit: int = 1000) -> list[tuple[int, float, Event]]:
        return self.store.events(self.get(job_id).id, after_seq, limit)

    # worktrees ----------------------------------------------------------------------------

    async def land(
        self, job_id: str, *, into: str | None = None, strategy: str = "rebase", test_command: str | None = None
    ) -> dict[str, Any]:
        """Land a worktree job's branch into `into` through the optional test gate (LandError when it does not)."""
        rec = self.get(job_id)
        if not rec.is_final:
            raise invalid(
                f"job {rec.id} is still {rec.status}: a branch lands once its job has ended",
                f"job_wait(job_ids=['{rec.id}']) first",
            )
        if test_command:  # a caller's string about to become a process: a `full` action
            await self.permit_command(
                test_command,
                what="job_land's test command",
                cwd=rec.cwd or "",
                job_id=rec.id,
                instead="land without test_command",
            )
        landed = await anyio.to_thread.run_sync(self._workspaces.land, rec.id, into, strategy, test_command)
        await anyio.to_thread.run_sync(self._workspaces.prune)
        return landed

    async def permit_command(
        self, command: str, *, what: str, cwd: str, job_id: str | None = None, instead: str = "leave it out"
    ) -> grants.Permit:
        """May a caller's test command run? A `full` action (relay.jobs.grants.permit_command): within the grant,
        one the person configured (`[workspaces] test_command`), or with the person's yes; else PERMISSION_NOT_GRANTED."""
        return await grants.permit_command(
            self.settings,
            command,
            what=what,
            cwd=cwd,
            via=SUBMITTED_VIA.get(),
            audit=self.store.audit.record,
            configured=command in self.settings.test_commands,
            instead=instead,
            job_id=job_id,
        )

    async def discard(self, job_id: str) -> dict[str, Any]:
        """Remove a worktree job's worktree and branch."""
        rec = self.get(job_id)
        return await anyio.to_thread.run_sync(self._workspaces.discard, rec.id)

    async def test_worktree(self, job_id: str, command: str, permitted: grants.Permit) -> dict[str, Any]:
        """Run `command` in a worktree job's worktree (bounded like a land's test); {passed, exit_code, output_tail...}.
        `permitted`: what `permit_command` allowed it by (asked while the call that named it could still ask)."""
        return await anyio.to_thread.run_sync(self._workspaces.test, self.get(job_id).id, command)

    def prune_worktrees(self) -> list[str]:
        """Remove worktrees of jobs unlanded past the retention time (and landed ones still on disk), after
        emptying the trash of removed ones; relay runs it as it starts."""
        return self._workspaces.sweep()

    def worktree_usage(self) -> dict[str, Any]:
        return self._state.workspaces.usage()

    # waiting and cancelling ---------------------------------------------------------------

    def subscribe(self, job_id: str) -> MemoryObjectReceiveStream[tuple[int, Event]]:
        return self._waiting.subscribe(self.known.id(job_id))

    async def wait(
        self, job_ids: list[str], mode: Literal["any", "all"] = "any", timeout: float = 30.0
    ) -> list[JobRecord]:
        """Block until any/all of the jobs are final or `timeout` passes; returns their records."""
        return await self._waiting.wait([self.known.id(j) for j in job_ids], mode, timeout)

    async def wait_one(self, job_id: str, timeout: float) -> JobRecord:
        return await self._waiting.wait_one(self.known.id(job_id), timeout)

    async def cancel(self, job_id: str) -> JobRecord:
        """Stop a job: kill its whole process group (SIGTERM, grace, SIGKILL) and mark it cancelled."""
        state = self._state
        rec = self.get(job_id)
        if rec.is_final:
            return rec
        self.store.set_stop_reason(rec.id, "cancelled")
        self.store.request_cancel(rec.id)
        state.post_cancel(rec.id)  # before the SIGTERM below
        live = state.live.get(rec.id)
        if self._admission.dequeue(rec.id):  # queued, claimed by no worker: it ends here, without a process
            self._lifecycle.finisher.finish_without_process(rec)
            self._lifecycle.job_ended(rec.id)
            return self.get(rec.id)
        if live is not None and state.runs_here(rec.id):
            live.stop_reason = "cancelled"
            live.stop.set()
            with (
                anyio.CancelScope(shield=True),
                anyio.move_on_after(self.settings.kill_grace_s + supervisor.KILL_CONFIRM_S + 2),
            ):
                await live.done.wait()
            return self.get(rec.id)
        # Run by another process (or by none): its worker sees the cancel in the store; on this host it is
        # also killed from here.
        await self._tending.cancel_elsewhere(rec, self._waiting)
        return self.get(rec.id)
