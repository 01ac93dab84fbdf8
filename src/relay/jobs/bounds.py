"""What grows in a relay process as it runs jobs, and how far: each pool named, each with its bound.

A relay that has run 10 jobs and one that has run 10,000 hold the same things: whatever grows with
use is one of these pools, and each stops at its bound (the soak test in
`tests/reliability/test_load.py` counts descriptors and threads against `growth_bound`). Everything
else relay holds is fixed at start: its SQLite connections (one per store service, each the database,
its `-wal` and `-shm`), the audit log, the spawn helper's pipes and sockets, and a few named threads
(the spares' receiver, the audit views' renderer, the stdio reader).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import anyio

from relay.config import Settings
from relay.runtime.folders import SPARES
from relay.runtime.spares import MAX_SPARES

# Worker threads (anyio's `to_thread` pool, shared by every part of the process): a job's end written
# to the store, spare folders made, git status read, the dashboard's queries. A thread idle for 10 s
# exits (anyio's own rule). Set explicitly so the bound does not move with anyio's default.
WORKER_THREADS = 40
# Descriptors a running job holds in relay: the reader of its stdout, its exit notice (the spare's
# socket, or a pidfd), and the file of its end while that is written.
FDS_PER_RUNNING_JOB = 3

Holds = Literal["fds", "threads", "folders"]


@dataclass(frozen=True)
class Pool:
    """One thing that grows with use, what it holds, and the most it ever holds."""

    name: str
    holds: Holds
    bound: int
    why: str


def spare_folders(settings: Settings) -> int:
    """How many job folders to keep made ahead: as many as may start at once, so a burst finds them made."""
    return max(SPARES, settings.max_concurrent)


def pools(settings: Settings) -> tuple[Pool, ...]:
    """The pools of a relay process with these settings."""
    return (
        Pool(
            "spare shims",
            "fds",
            MAX_SPARES,
            "runtime/spares.py: a socket each; starts at MIN_SPARES, grows when a job finds none, "
            "shrinks one per job taken after SHRINK_AFTER_S without a miss",
        ),
        Pool(
            "running jobs",
            "fds",
            settings.max_concurrent * FDS_PER_RUNNING_JOB,
            "FDS_PER_RUNNING_JOB for each job holding a slot (jobs.max_concurrent); queued jobs hold none",
        ),
        Pool(
            "worker threads",
            "threads",
            WORKER_THREADS,
            "anyio's to_thread pool, its limiter set to WORKER_THREADS when the job engine starts",
        ),
        Pool(
            "spare job folders",
            "folders",
            spare_folders(settings) + 1,
            "runtime/folders.py: job folders made ahead of need under RELAY_HOME/jobs (one per job slot), "
            "and the one a job is taking at that instant (jobs are submitted one at a time, on the event loop)",
        ),
    )


def growth_bound(settings: Settings, holds: Holds) -> int:
    """How many more `holds` than at start a relay process can ever hold: the sum of its pools' bounds."""
    return sum(p.bound for p in pools(settings) if p.holds == holds)


def limit_worker_threads() -> None:
    """Cap the running event loop's worker-thread pool at WORKER_THREADS (call from inside the loop)."""
    anyio.to_thread.current_default_thread_limiter().total_tokens = WORKER_THREADS
