"""A job's end that the store could not take: wait for a store that is away, refuse to loop on a write that cannot be.

- The store away (PostgreSQL restarting, the link to it cut) when a job ends: the job's output and its agent's
  exit status are in its folder (the shim wrote them), so its end waits for the store, at most FINISH_WAIT_S and
  never past this worker's fence (jobs/fence.py), and is then written from those files as if read back after a
  restart. The job is not failed `STORE_UNAVAILABLE` because the store was away while its agent succeeded. An
  agent still running is watched here to its end first (killed if the job is stopped): nothing runs unwatched.
- A write that can never succeed (a job folder that is not there, a file the home refuses for a reason that is
  not a full disk or a read-only mount): the job's row is ended `failed` with that error, once, not retried.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

import anyio

from relay.agents import get_adapter
from relay.errors import ErrorCode, RelayError
from relay.jobs.finish import Finisher
from relay.jobs.publish import Publisher
from relay.jobs.state import JobState
from relay.runtime import procinfo
from relay.store import JobRecord

# How long a job's end waits for a store that is away (a worker's fence may end the wait sooner).
FINISH_WAIT_S = 60.0
# How often the store is asked again meanwhile.
STORE_RETRY_S = 0.5
# Failures worth trying again (the space may be freed, the lock let go, the store come back, the mount fixed).
RETRIED = frozenset({ErrorCode.DISK_FULL, ErrorCode.STORE_BUSY, ErrorCode.STORE_UNAVAILABLE, ErrorCode.STORE_READONLY})


async def end_when_store_back(state: JobState, publisher: Publisher, finisher: Finisher, job_id: str) -> bool:
    """Write the end of a job whose end met the store away, once it is back; False: the wait ran out (the caller
    fails the job as before). True also when the worker's fence passed meanwhile: nothing more is its to write."""
    files = state.files(job_id)
    deadline = time.monotonic() + FINISH_WAIT_S
    while time.monotonic() < deadline:
        if state.fence.cut(job_id, files.dir):
            return True
        try:
            rec = await anyio.to_thread.run_sync(state.store.get_job, job_id)
        except RelayError as err:
            if err.code is not ErrorCode.STORE_UNAVAILABLE:
                return False
            await anyio.sleep(STORE_RETRY_S)
            continue
        if rec is None or rec.is_final:
            return True
        await _until_ended(state, job_id, rec.deadline_at)
        try:
            parser = get_adapter(rec.agent, state.settings).parser()
            publisher.replay(job_id, parser)
            await anyio.to_thread.run_sync(finisher.finalize, job_id, parser, files.read_exit_code(), None)
        except RelayError as err:
            if err.code is not ErrorCode.STORE_UNAVAILABLE:
                return False
            await anyio.sleep(STORE_RETRY_S)  # away again: the next turn writes it from the files again
            continue
        return True
    return False


async def _until_ended(state: JobState, job_id: str, deadline_at: float | None) -> None:
    """An agent still running when its monitor gave up: watched here until it ends (its output stays in its files,
    read at its end); killed when the job is stopped (a cancel, its fence) or runs past its deadline."""
    files = state.files(job_id)
    pid = files.read_pid()
    while pid is not None and files.read_exit_code() is None and procinfo.is_alive(pid, None):
        live = state.live.get(job_id)
        stopped = live is not None and live.stop.is_set()
        if stopped or state.fence.cut(job_id, files.dir) or (deadline_at is not None and time.time() > deadline_at):
            with contextlib.suppress(OSError):
                if os.getpgid(pid) == pid:
                    os.killpg(pid, signal.SIGKILL)
            return
        await anyio.sleep(STORE_RETRY_S)


def fail_row(state: JobState, job_id: str, err: RelayError) -> None:
    """End the job's row `failed` with `err`, nothing else written (its files could not be): no retry loop."""
    with contextlib.suppress(RelayError):
        state.store.finish_job(
            job_id,
            "failed",
            exit_code=None,
            result=None,
            error=err.to_dict(),
            session_id=None,
            model=None,
            epoch=state.epochs.get(job_id),
        )


def store_events_left(state: JobState, publisher: Publisher, rec: JobRecord) -> None:
    """Store the events of a job's stdout the store does not hold yet: a job whose end failed before its write (a full
    disk at its result file, a seal that failed) loses no event, though its last look's events rode with that end."""
    if rec.kind != "cli":
        return
    with contextlib.suppress(RelayError, OSError):
        publisher.replay(rec.id, get_adapter(rec.agent, state.settings).parser())
