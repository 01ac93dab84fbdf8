"""A job's life in this process: spawn, monitor (parse and publish, deadlines, stop), end of job.

In-process jobs (model API calls) live here too: same statuses, same stop and end of job.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Awaitable, Callable

import anyio

from relay.agents.base import Invocation, Parser
from relay.errors import ErrorCode, RelayError
from relay.events import AgentResult, Event
from relay.jobs.admission import Admission
from relay.jobs.finish import STORE_STOP, Finisher, storage_failure
from relay.jobs.gitprobe import git_status
from relay.jobs.mirror import Mirror
from relay.jobs.output import LineReader
from relay.jobs.publish import Publisher
from relay.jobs.request import JobRequest, Prepared, check_cwd_unchanged
from relay.jobs.settle import RETRIED, end_when_store_back, fail_row, store_events_left
from relay.jobs.state import LEASE_LOST, JobState, Live
from relay.runtime import procinfo, supervisor
from relay.runtime.folders import MARKER, mark_spawning
from relay.runtime.supervisor import JobFiles, JobProcess
from relay.store import JobRecord
from relay.store.health import release_reserve
from relay.store.jobwrite import JobWrite, Pending
from relay.telemetry import job as telemetry

# Starts a job's process; called on the event loop or in a worker thread.
SpawnFn = Callable[[Invocation, JobFiles], JobProcess]
# An in-process job (a model API call): it reports events through `emit` and returns the result.
TaskFn = Callable[[Callable[[Event], None]], Awaitable[AgentResult]]
ReadmitFn = Callable[[JobRecord, JobRequest | None], Prepared]
"""Admits a stored job again where it runs (relay.jobs.door): its record, and the request placed in its folder."""

# How often the end of a job is tried again when the store could not take it (disk full, lock held).
FINISH_RETRY_S = 1.0

# From this many jobs holding a slot (this one included), a job's end is recorded in a worker thread.
FINALIZE_IN_THREAD_WHEN_RUNNING = 2


# A file written just before a job's process is spawned (see recovery: a restarted relay must not
# run a job twice whose spawn it did not see recorded).
SPAWN_MARKER = MARKER


class _SpawnError(Exception):
    """The agent's process could not be started (the cause says why)."""


class Lifecycle:
    """Starts admitted jobs, watches them to their end, records the end and frees the slot."""

    def __init__(self, state: JobState, admission: Admission, *, spawn: SpawnFn, readmit: ReadmitFn) -> None:
        self._state = state
        self._readmit = readmit
        self._admission = admission
        self._spawn = spawn
        self.spawns_for_real = spawn is supervisor.spawn  # not a test's stand-in
        self.publisher = Publisher(state)
        self.finisher = Finisher(state)
        self._enders = (self.publisher, self.finisher)
        # Jobs whose end runs git (a worktree's seal, a push of the branch to a repository URL): recorded in a
        # worker thread, off the event loop.
        self.pushes: set[str] = set()
        # Requests validated at submit, kept until the job starts (prepared again after a restart).
        self.prepared: dict[str, Prepared] = {}
        # Jobs admitted whose process is not spawned yet.
        self._starting: set[str] = set()

    # CLI jobs -----------------------------------------------------------------------------

    def start(self, job_id: str) -> None:
        """Run an admitted job (its slot is already taken) in the engine's task group."""
        self._state.task_group().start_soon(self._run_job, job_id)
        self._starting.add(job_id)

    def pump(self) -> None:
        """Claim queued jobs for the free slots. A store that cannot take the claim now (lock held, disk full)
        leaves them queued: the next look at the queue (tending.py) claims them."""
        with contextlib.suppress(RelayError):
            self._admission.pump(self.start)

    async def _run_job(self, job_id: str) -> None:
        try:
            await self._run_job_guarded(job_id)
        finally:
            self._starting.discard(job_id)
            self.job_ended(job_id)

    def job_ended(self, job_id: str) -> None:
        """Free the job's slot, wake its waiters and listeners, and start what was queued behind it."""
        state = self._state
        state.running.pop(job_id, None)
        state.epochs.pop(job_id, None)
        state.tasks.discard(job_id)
        self.pushes.discard(job_id)
        # Forgotten once ended (its waiters hold it): what this process keeps per job lasts as long as the job.
        live = state.live.pop(job_id, None)
        if live is not None:
            live.done.set()
            for listener in live.listeners:
                listener.close()
        state.notify()
        if state.tg is not None:
            self.pump()
            state.refill_spares()

    async def _run_job_guarded(self, job_id: str) -> None:
        """Run one job; a bug or a storage failure fails this job instead of taking the server down."""
        try:
            await self._start_and_monitor(job_id)
        except Exception as exc:
            await self.fail_unexpected(job_id, exc)

    async def fail_unexpected(self, job_id: str, exc: Exception) -> None:
        """Fail a job whose run raised; if even that cannot be written (disk full), retry until it can."""
        state = self._state
        err = storage_failure(exc, state.settings.home)
        if err is None:
            err = RelayError(ErrorCode.INTERNAL, f"{type(exc).__name__}: {exc}", "report this as a relay bug")
        if err.code is ErrorCode.STORE_UNAVAILABLE and await end_when_store_back(state, *self._enders, job_id):
            return  # its end waited for the store instead of failing the job (jobs/settle.py)
        while True:
            try:
                rec = state.store.get_job(job_id)
                if rec is not None and not rec.is_final:
                    store_events_left(state, self.publisher, rec)  # its last look's events rode with the end
                    self.finisher.fail(rec, err)
                return
            except Exception as again:
                failure = storage_failure(again, state.settings.home)
                if failure is None:
                    raise
                if failure.code not in RETRIED:  # a write that can never succeed: the row says so, once
                    return fail_row(state, job_id, failure)
                if failure.code is ErrorCode.DISK_FULL and release_reserve(state.settings.home):
                    continue  # the space relay set aside for this moment: try again at once
            # The store cannot take the write now (disk full, lock held): the server keeps answering and
            # the job's end is written as soon as it can be.
            await anyio.sleep(FINISH_RETRY_S)

    async def _start_and_monitor(self, job_id: str) -> None:
        state = self._state
        live = state.live.setdefault(job_id, Live())
        rec = state.store.get_job(job_id)
        if rec is None or rec.is_final:
            return
        telemetry.claimed(job_id, rec.agent, rec.request, rec.created_at, state.worker.name)  # its wait, its span
        if live.stop_reason:  # cancelled before it started (or its claim lost: then it is not ours to end)
            return None if live.stop_reason == LEASE_LOST else self.finisher.finish_without_process(rec)
        prepared = self.prepared.pop(job_id, None)
        try:
            if rec.request.get("repo"):  # a job by repository URL: fetched and placed here (a thread: it waits on git)
                place, epoch = self.finisher.workspaces.place, state.epochs.get(job_id)
                req = await anyio.to_thread.run_sync(place, rec, epoch, live.stop.is_set)  # CANCELLED when stopped
                self.pushes.add(job_id)
                prepared = self._readmit(rec, req)  # through the one door, in the folder it was placed in
            elif prepared is None:  # admitted again after a restart: what allowed it at its submit still holds
                prepared = self._readmit(rec, None)
            if prepared.in_worktree:  # its end seals the branch (git add, commit): finalized off the loop
                self.pushes.add(job_id)
                await anyio.to_thread.run_sync(self.finisher.workspaces.make_ready, job_id, live.stop.is_set)  # setup
            # Creating a process takes milliseconds (more on a loaded machine). A job starting alone
            # spawns right here: no thread hop on its way, and its process is recorded before anything
            # else runs. Jobs starting together spawn in worker threads: in parallel, and without
            # holding up the event loop (replies to other calls, the other jobs' output).
            if len(self._starting) > 1:
                proc, deadline = await anyio.to_thread.run_sync(self._launch, job_id, live, prepared)
            else:
                proc, deadline = self._launch(job_id, live, prepared)
        except RelayError as err:
            if live.stop.is_set():  # cancelled while its repository was fetched (and placed: that was undone)
                self.finisher.finish_without_process(rec)
            else:
                self.finisher.fail(rec, err)
            return
        except (_SpawnError, OSError, ValueError) as exc:
            self.finisher.fail(
                rec,
                RelayError(
                    ErrorCode.AGENT_FAILED,
                    f"could not start {rec.agent}: {exc.__cause__ or exc}",
                    "check the agent's command in config.toml",
                ),
            )
            return
        state.notify()
        telemetry.spawned(job_id, proc.pid)
        await self.monitor(job_id, proc, prepared.adapter.parser(), deadline, prepared.idle_timeout_s, fresh=True)

    def _launch(self, job_id: str, live: Live, prepared: Prepared) -> tuple[JobProcess, float]:
        """`git status` before the job, the spawn marker, the spawn, the running row (thread-safe)."""
        state = self._state
        files = state.files(job_id)
        # Checked again at the point of use: a queued job's directory may have been swapped (a symlink
        # out of the allowed roots) since it was validated at submit.
        check_cwd_unchanged(state.settings, prepared.invocation.cwd)
        # A worktree job's files_changed is its branch's diff (finish.py), not a before/after status.
        if not prepared.in_worktree:
            live.git_before = git_status(prepared.invocation.cwd)
        # Mark the spawn before it happens: a relay killed between here and the shim writing
        # its pid must not run the job a second time after a restart.
        try:
            try:
                mark_spawning(files.dir)
            except FileNotFoundError:  # the folder made at submit is gone: make it again
                files.dir.mkdir(parents=True, exist_ok=True)
                mark_spawning(files.dir)
            proc = self._spawn(prepared.invocation, files)
        except (OSError, ValueError) as exc:
            raise _SpawnError from exc
        # Recorded at once (not after a hop back to the event loop): a relay killed now knows the process it started.
        deadline = time.time() + prepared.timeout_s
        recorded = state.store.mark_running(
            job_id, pid=proc.pid, pid_start_ticks=proc.start_ticks, boot_id=procinfo.boot_id(), owner_pid=state.my_pid,
            owner_start_ticks=state.my_start, deadline_at=deadline, idle_timeout_s=prepared.idle_timeout_s,
            epoch=state.epochs.get(job_id),
        )  # fmt: skip
        if not recorded:  # its claim was taken over meanwhile: the process is stopped, the job is not ours
            live.stop_reason = LEASE_LOST
            live.stop.set()
        self._starting.discard(job_id)
        return proc, deadline

    async def run_attached(self, rec: JobRecord, proc: JobProcess, parser: Parser, last_output: float) -> None:
        """Watch a job an earlier relay started (re-attached after a restart) to its end."""
        settings = self._state.settings
        try:
            await self.monitor(
                rec.id,
                proc,
                parser,
                rec.deadline_at or (time.time() + settings.job_timeout_s),
                rec.idle_timeout_s or settings.idle_timeout_s,
                last_output=last_output,
            )
        except Exception as exc:
            await self.fail_unexpected(rec.id, exc)
        finally:
            self.job_ended(rec.id)

    async def monitor(
        self,
        job_id: str,
        proc: JobProcess,
        parser: Parser,
        deadline: float,
        idle_timeout_s: float,
        last_output: float | None = None,
        *,
        fresh: bool = False,
    ) -> None:
        """Parse and publish output as it comes, enforce deadlines and stop requests, finalize at exit.

        `fresh`: the process was just spawned, so no event of it is stored yet (a re-attached job
        resumes after the events already stored).
        """
        state = self._state
        files = state.files(job_id)
        live = state.live.setdefault(job_id, Live())
        reader = LineReader(files.stdout)
        epoch, spans = state.epochs.get(job_id), state.store.spans_hosts  # other hosts page the job's copy
        mirror = Mirror(state.store, job_id, files, fresh=fresh, epoch=epoch, fence=state.fence) if spans else None
        stored_seq = -1 if fresh else state.store.max_event_seq(job_id)
        seq = -1
        last_output = last_output or time.time()
        stop_reason: str | None = None
        store_stop: str | None = None
        try:
            while True:
                exited = await proc.wait_exit(supervisor.POLL_INTERVAL_S)
                # What this look finds goes in one write: its events, its output; at the process's end, its end too.
                pending = Pending(JobWrite(job_id, epoch), [live.written])
                try:
                    seq, active = self.publisher.consume(job_id, live, reader, parser, seq, stored_seq, exited, pending)
                    if not exited:
                        if mirror is not None:
                            mirror.sync(into=pending)
                        pending.send(state.store)
                except (OSError, RelayError) as exc:
                    # The job's output cannot be kept (disk full, read-only home): stop it, it ends failed.
                    failure = storage_failure(exc, state.settings.home)
                    if failure is None:
                        raise
                    active = False
                    if failure.code is ErrorCode.STORE_UNAVAILABLE:
                        # A store across the network is away (PostgreSQL restarting): the agent goes on, its
                        # output stays in its files, and what is written once the store is back lands.
                        continue
                    store_stop = f"{STORE_STOP}{failure.code.value}"
                    if stop_reason is None and not live.stop.is_set():
                        live.stop_reason = store_stop
                        live.stop.set()
                now = time.time()
                if active:
                    last_output = now
                    telemetry.output(job_id)  # the first time: the first_output span
                if exited:
                    break
                if stop_reason is None:
                    if live.stop.is_set():
                        stop_reason = live.stop_reason or "cancelled"
                    elif now >= deadline:
                        stop_reason = "timed_out:wall"
                    elif now - last_output >= idle_timeout_s:
                        stop_reason = "timed_out:idle"
                    if stop_reason is not None and stop_reason != LEASE_LOST:
                        with contextlib.suppress(RelayError):  # the store may be what failed: kill anyway
                            state.store.set_stop_reason(job_id, stop_reason)
                    if stop_reason is not None:
                        with anyio.CancelScope(shield=True):
                            await proc.kill_group(state.settings.kill_grace_s)
            proc.reap_group()
            if stop_reason == LEASE_LOST:
                return  # the job is another worker's now: its end is not this one's to record
            args = (job_id, parser, proc.exit_code(), stop_reason or store_stop, pending, mirror)
            if len(state.running) >= FINALIZE_IN_THREAD_WHEN_RUNNING or job_id in self.pushes:
                # Other jobs run too, and many may end together: this one's end (the parser's result, a
                # `git status` in a repository, the result file, the final row) is recorded in a worker
                # thread, so the event loop goes on seeing the others' exits and answering calls. A job
                # running alone is finalized right here: no thread hop on the way to its reply.
                await anyio.to_thread.run_sync(self.finisher.finalize, *args)
            else:
                self.finisher.finalize(*args)
        finally:
            proc.close()

    # in-process jobs ----------------------------------------------------------------------

    def start_task(self, job_id: str, task: TaskFn, timeout_s: float) -> None:
        live = self._state.live[job_id] = Live()
        self._state.tasks.add(job_id)
        self._state.task_group().start_soon(self._run_task, job_id, live, task, timeout_s)

    async def _run_task(self, job_id: str, live: Live, task: TaskFn, timeout_s: float) -> None:
        state = self._state
        deadline = time.time() + timeout_s
        state.store.mark_running(
            job_id,
            pid=None,
            pid_start_ticks=None,
            boot_id=None,
            owner_pid=state.my_pid,
            owner_start_ticks=state.my_start,
            deadline_at=deadline,
            idle_timeout_s=None,
        )
        state.notify()
        seq = -1
        outcome: AgentResult | None = None
        stop: str | None = None
        stdout = state.files(job_id).stdout

        def emit(event: Event) -> None:
            nonlocal seq
            seq += 1
            with stdout.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps({"type": event.type, **event.data}, default=str) + "\n")
            self.publisher.publish(job_id, live, [(seq, event)])

        try:
            async with anyio.create_task_group() as inner:

                async def watch_stop() -> None:
                    await live.stop.wait()
                    inner.cancel_scope.cancel()

                inner.start_soon(watch_stop)
                with anyio.move_on_after(timeout_s) as scope:
                    try:
                        outcome = await task(emit)
                    except RelayError as err:
                        outcome = AgentResult(ok=False, error=err)
                    except Exception as exc:  # translate at the edge: nothing escapes untranslated
                        outcome = AgentResult(
                            ok=False,
                            error=RelayError(
                                ErrorCode.INTERNAL,
                                f"{type(exc).__name__}: {exc}",
                                "report this as a relay bug",
                            ),
                        )
                if scope.cancelled_caught:
                    stop = "timed_out:wall"
                inner.cancel_scope.cancel()
        finally:
            if live.stop.is_set():
                stop = live.stop_reason or "cancelled"
            rec = state.store.get_job(job_id)
            if rec is not None and not rec.is_final:
                self.finisher.end_task(rec, stop, outcome)
            self.job_ended(job_id)
