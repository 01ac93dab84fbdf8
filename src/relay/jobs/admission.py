"""Admission: a queued job starts only under a claim won in the store (store/claims.py).

The queue is the store's: every process that uses it (relays serving clients, `relay worker`s) claims
from one list, and the global and per-agent limits are counted over all of them. This process runs
what it claims, up to its own slots.
"""

from __future__ import annotations

from collections.abc import Callable

from relay.jobs.state import JobState, Live
from relay.store.claims import ClaimAsk


class Admission:
    """Claims queued jobs for this process's free slots; a job holds its slot from its claim to its end."""

    def __init__(self, state: JobState) -> None:
        self._state = state
        self._held = 0  # slots a claim in flight off the loop may fill (jobs/inserts.py): not free meanwhile

    def enqueue(self, job_id: str) -> None:
        """A job queued by this process: its waiters and listeners find it here until it is claimed and ends."""
        self._state.live.setdefault(job_id, Live())

    def dequeue(self, job_id: str) -> bool:
        """Whether `job_id` is queued and no worker has claimed it (a cancel then ends it without a process)."""
        rec = self._state.store.get_job(job_id)
        return rec is not None and rec.kind == "cli" and rec.status == "queued" and rec.worker is None

    def agent_limit(self, agent: str) -> int:
        settings = self._state.settings
        return settings.agent(agent).max_concurrent or settings.max_concurrent_per_agent

    def ask(self) -> ClaimAsk | None:
        """The claim this process would make for its free slots now (None: it takes no job now)."""
        state = self._state
        state.task_group()
        worker = state.worker
        if not state.settings.runs_jobs or state.draining:
            return None
        free = worker.slots - len(state.running) - self._held
        if free <= 0:
            return None
        return ClaimAsk(worker, free, state.settings.max_concurrent, self.agent_limit)

    def hold(self, ask: ClaimAsk | None, *, held: bool = True) -> None:
        """The slots of `ask`, a claim sent off the loop, are not free until it is answered (`held=False`)."""
        if ask is not None:
            self._held += ask.free if held else -ask.free

    def pump(self, start: Callable[[str], None]) -> None:
        """Claim queued jobs for this process's free slots, oldest first; `start(job_id)` runs each one won."""
        ask = self.ask()
        if ask is None:
            return
        won = self._state.store.claim(ask.worker, free=ask.free, max_total=ask.max_total, per_agent=ask.per_agent)
        self.took(won, start)

    def took(self, won: list[tuple[str, str, int]], start: Callable[[str], None]) -> None:
        """The jobs a claim won (job id, agent, epoch): each holds a slot from now, and `start` runs it."""
        state = self._state
        for job_id, agent, epoch in won:
            state.running[job_id] = agent
            state.epochs[job_id] = epoch
            state.live.setdefault(job_id, Live())
            start(job_id)
