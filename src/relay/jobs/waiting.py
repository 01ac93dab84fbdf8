"""Waiting: block until any or all jobs are final, and follow one job's events as they come."""

from __future__ import annotations

from typing import Literal

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from relay.errors import invalid
from relay.events import Event
from relay.jobs.state import JobState
from relay.store import JobRecord

# How often a waiter re-reads the store for jobs run by another relay process (the CLI, another
# client's server); jobs of this process wake waiters at once.
REMOTE_POLL_S = 0.25
# Buffer of events per progress listener; a slow listener misses events rather than stalling a job.
LISTENER_BUFFER = 256
# Longest a single wait call may block, whatever the caller asks.
MAX_WAIT_S = 3600.0


class Waiting:
    """Waits on jobs of this process through change notices, on others by polling the store."""

    def __init__(self, state: JobState) -> None:
        self._state = state

    def subscribe(self, job_id: str) -> MemoryObjectReceiveStream[tuple[int, Event]]:
        send, receive = anyio.create_memory_object_stream[tuple[int, Event]](LISTENER_BUFFER)
        live = self._state.live.get(job_id)
        if live is None or live.done.is_set():
            send.close()
        else:
            live.listeners.append(send)
        return receive

    async def wait(self, job_ids: list[str], mode: Literal["any", "all"], timeout: float) -> list[JobRecord]:
        state = self._state
        if not job_ids:
            raise invalid("job_ids is empty", "pass the ids returned by delegate")
        if timeout < 0:
            raise invalid("timeout must be >= 0", "pass seconds to wait, e.g. 30")
        ids = [j if j in state.live else state.get(j).id for j in job_ids]  # a job of this process: no read
        final: set[str] = set()
        with anyio.move_on_after(min(timeout, MAX_WAIT_S)):
            while True:
                changed = state.changed
                if self._satisfied(ids, mode, final):
                    break
                remote = any(not state.runs_here(j) and j not in final for j in ids)
                with anyio.move_on_after(REMOTE_POLL_S if remote else MAX_WAIT_S):
                    await changed.wait()
        return [state.get(j) for j in ids]

    def _satisfied(self, ids: list[str], mode: Literal["any", "all"], final: set[str]) -> bool:
        """Whether any/all of the jobs are final; `final` collects those found so (they stay final).

        A job this process runs (holds a claim on) cannot be final before its `done` is set, so it is read
        from the store only once it is done: many jobs ending one after another do not each cost a read of every record.
        """
        live = self._state.live
        for job_id in ids:
            if job_id not in final:
                entry = live.get(job_id)
                running_here = entry is not None and not entry.done.is_set() and self._state.runs_here(job_id)
                if not running_here and self._state.get(job_id).is_final:
                    final.add(job_id)
                elif mode == "all":
                    return False
            if mode == "any" and job_id in final:
                return True
        return mode == "all"

    async def wait_one(self, job_id: str, timeout: float) -> JobRecord:
        live = self._state.live.get(job_id)
        if live is not None and self._state.runs_here(job_id):
            with anyio.move_on_after(timeout):
                await live.done.wait()
            return self._state.get(job_id)
        return (await self.wait([job_id], "all", timeout))[0]
