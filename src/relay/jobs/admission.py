"""Admission: the queue of submitted jobs and the global and per-agent concurrency limits."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from relay.jobs.state import JobState, Live


class Admission:
    """Decides which queued job starts next; a job holds a slot from its start to its end."""

    def __init__(self, state: JobState) -> None:
        self._state = state
        self.queue: deque[str] = deque()
        self._agents: dict[str, str] = {}

    def enqueue(self, job_id: str, agent: str) -> None:
        self._state.live.setdefault(job_id, Live())
        self.queue.append(job_id)
        self._agents[job_id] = agent

    def dequeue(self, job_id: str) -> bool:
        """Take a job out of the queue before it started; False when it was not queued."""
        if job_id not in self.queue:
            return False
        self.queue.remove(job_id)
        del self._agents[job_id]
        return True

    def agent_limit(self, agent: str) -> int:
        settings = self._state.settings
        return settings.agent(agent).max_concurrent or settings.max_concurrent_per_agent

    def pump(self, start: Callable[[str], None]) -> None:
        """Give free slots to queued jobs, in order; `start(job_id)` runs each one admitted."""
        state = self._state
        state.task_group()
        for job_id in list(self.queue):
            if len(state.running) >= state.settings.max_concurrent:
                return
            agent = self._agents[job_id]
            busy = sum(1 for a in state.running.values() if a == agent)
            if busy >= self.agent_limit(agent):
                continue
            # A job finished meanwhile (cancelled by another relay process) is let go by `start`.
            self.dequeue(job_id)
            state.running[job_id] = agent
            start(job_id)
