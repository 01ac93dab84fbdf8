"""Recovery after a restart: re-attach to jobs still running, finalize those that ended, re-queue the rest.

Either way a recovered job's output is parsed again from its start, past the events already stored, and that
replay writes its transcript again from the output (publish.py): a relay killed between storing events and writing
their lines leaves no line missing, none twice.
"""

from __future__ import annotations

import time
from dataclasses import replace

from relay.agents import get_adapter
from relay.errors import ErrorCode, RelayError
from relay.events import AgentResult
from relay.jobs.lifecycle import SPAWN_MARKER, Lifecycle
from relay.jobs.state import JobState, Live, mtime
from relay.runtime import procinfo, supervisor
from relay.runtime.fencing import FENCED_MARK
from relay.store import JobRecord

# How long a restarted relay waits for a job's shim to record its pid (the spawn marker says a
# spawn was under way) before concluding the spawn never happened.
SPAWN_SETTLE_S = 2.0
# How much later than its pid file's mtime a shim's start time may read and still be the process that wrote it (the
# two clocks' rounding). A shim starts before it writes its pid file, a spare shim (runtime/spares.py) long before;
# a process that took the pid over once the shim ended started after the file was written.
PID_FILE_SLACK_S = 2.0


class Recovery:
    """Adopts jobs whose relay died; also finalizes ended jobs for readers (the CLI) without adopting any."""

    def __init__(self, state: JobState, lifecycle: Lifecycle) -> None:
        self._state = state
        self._lifecycle = lifecycle

    def recover(self) -> list[str]:
        """Adopt the claimed jobs of a worker of this host that died: re-attach live processes, finalize ended
        ones, hand back the ones it never started. (A worker of another host is judged by its lease: tending.py.)"""
        state = self._state
        adopted: list[str] = []
        if not state.settings.runs_jobs:
            return adopted  # a front that runs no jobs adopts none: this host's workers do
        # Read from the store: only this host's claimed jobs and running ones of no worker (neither the queue's
        # waiting jobs nor another host's: its lease says whether it lives).
        for rec in state.store.active_jobs_of_host(state.worker.boot_id):
            if rec.id in state.live:
                continue  # ours
            if state.owner_alive(rec):
                continue
            # Its owner is provably dead; another relay may have seen that too: only one take-over wins.
            epoch = state.store.take_over(rec.id, rec.epoch, state.worker)
            if epoch is None:
                continue
            adopted.append(rec.id)
            # A run its earlier worker fenced (its processes killed past that one's lease) is this claim's to end.
            (state.files(rec.id).dir / FENCED_MARK).unlink(missing_ok=True)
            state.epochs[rec.id] = epoch
            rec = replace(rec, epoch=epoch, worker=state.worker.id)
            if rec.kind != "cli":
                err = RelayError(
                    ErrorCode.INTERRUPTED, "relay stopped while this job ran in its process", "run it again"
                )
                self._lifecycle.finisher.store_result(rec, "interrupted", AgentResult(ok=False, error=err), err, None)
                state.epochs.pop(rec.id, None)
                continue
            if rec.status == "queued":
                started = self._started_before_recorded(rec)
                if started is None:
                    state.epochs.pop(rec.id, None)
                    state.store.unclaim(rec.id, epoch)  # never started: back in the queue for any worker
                    continue
                rec = started
            self.reattach_or_finalize(rec)
        self._lifecycle.pump()
        return adopted

    def _started_before_recorded(self, rec: JobRecord) -> JobRecord | None:
        """A `queued` job whose shim already ran (relay died between spawn and recording it).

        Running it again would run the agent twice; record it as running instead, with the pid the
        shim wrote if that process is still the shim (it started before the pid file was written: a spare
        shim, runtime/spares.py, long before).
        """
        state = self._state
        files = state.files(rec.id)
        pid = files.read_pid()
        if pid is None and (files.dir / SPAWN_MARKER).exists():
            # Spawned (or about to be) when relay died: give the shim a moment to record its pid.
            deadline = time.monotonic() + SPAWN_SETTLE_S
            while pid is None and files.read_exit_code() is None and time.monotonic() < deadline:
                time.sleep(0.02)
                pid = files.read_pid()
        if pid is None and files.read_exit_code() is None:
            return None
        ticks: int | None = None
        if pid is not None:
            started = procinfo.start_epoch(pid)
            written = mtime(files.pid)
            if started is not None and started - written <= PID_FILE_SLACK_S:
                ticks = procinfo.start_ticks(pid)
        state.store.mark_running(
            rec.id,
            pid=pid if ticks is not None else None,
            pid_start_ticks=ticks,
            boot_id=procinfo.boot_id(),
            owner_pid=state.my_pid,
            owner_start_ticks=state.my_start,
            deadline_at=rec.created_at + float(rec.request.get("timeout_s") or state.settings.job_timeout_s),
            idle_timeout_s=float(rec.request.get("idle_timeout_s") or state.settings.idle_timeout_s),
            epoch=rec.epoch,
        )
        return state.get(rec.id)

    def reconcile(self) -> list[str]:
        """Finalize jobs of this host whose relay died and whose process has ended (for CLI readers; adopts nothing
        alive). Another host's jobs are its own to judge (their pids mean nothing here): by their lease."""
        state = self._state
        finalized: list[str] = []
        for rec in state.store.active_jobs_of_host(state.worker.boot_id):
            if rec.status != "running" or rec.kind != "cli" or rec.id in state.live or state.owner_alive(rec):
                continue
            if rec.pid is not None and procinfo.is_alive(rec.pid, rec.pid_start_ticks, rec.boot_id):
                continue
            self.reattach_or_finalize(rec)
            finalized.append(rec.id)
        return finalized

    def reattach_or_finalize(self, rec: JobRecord) -> None:
        """Watch the job's process again if it is alive (and this engine runs); else finalize it from its files."""
        state = self._state
        lifecycle = self._lifecycle
        files = state.files(rec.id)
        try:
            adapter = get_adapter(rec.agent, state.settings)
        except RelayError as err:
            lifecycle.finisher.fail(rec, err)
            return
        alive = rec.pid is not None and procinfo.is_alive(rec.pid, rec.pid_start_ticks, rec.boot_id)
        if alive and rec.pid is not None and state.tg is not None:
            proc = supervisor.attach(rec.pid, rec.pid_start_ticks, files)
            state.live[rec.id] = Live()
            state.running[rec.id] = rec.agent
            if rec.request.get("repo"):
                lifecycle.pushes.add(rec.id)  # its end pushes its branch: recorded in a worker thread
            last_output = max(mtime(files.stdout), mtime(files.stderr), rec.started_at or 0.0)
            state.tg.start_soon(lifecycle.run_attached, rec, proc, adapter.parser(), last_output)
            return
        # The process ended while no relay watched it: its files hold everything.
        parser = adapter.parser()
        lifecycle.publisher.replay(rec.id, parser)
        lifecycle.finisher.finalize(rec.id, parser, files.read_exit_code(), None)
        state.epochs.pop(rec.id, None)
