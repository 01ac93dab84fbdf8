"""How deep in a chain of delegations a relay is: a job's children see its depth, and relay refuses past the limit."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from relay.config import Settings
from relay.errors import ErrorCode, RelayError
from relay.runtime import procinfo
from relay.store import JobStore


def check_depth(settings: Settings) -> None:
    if settings.depth >= settings.max_depth:
        raise RelayError(
            ErrorCode.LIMIT_REACHED,
            f"delegation depth {settings.depth} reached the limit of {settings.max_depth}",
            "do the work yourself instead of delegating further, or raise RELAY_MAX_DEPTH",
        )


# How many parents up a relay looks for the job it runs under (a job's tree is never this deep).
MAX_ANCESTRY = 64


def _ancestors(pid: int) -> set[int]:
    """The pids of this process's parent, grandparent ... up to init (read from /proc)."""
    found: set[int] = set()
    for _ in range(MAX_ANCESTRY):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat[stat.rfind(")") + 2 :].split()[1])
        if pid <= 1 or pid in found:
            break
        found.add(pid)
    return found


def with_inherited_depth(settings: Settings, store: JobStore) -> Settings:
    """Settings whose depth is at least one more than the depth relay recorded for the job this process runs under.

    The job is found from the RELAY_JOB_ID token relay gives its children and from this process's
    ancestry (a job's process is recorded with its pid), so a child that resets RELAY_DEPTH=0 or
    drops the token in its own environment still gets the depth relay counted for it.
    """
    token = settings.environ.get("RELAY_JOB_ID")
    ancestors = _ancestors(os.getpid())
    try:
        running = store.list_jobs(statuses=("running",), limit=10_000)
    except RelayError:
        return settings  # the store cannot answer now: submitting will say why
    depth = settings.depth
    for rec in running:
        under = rec.pid is not None and rec.pid in ancestors and procinfo.is_alive(rec.pid, rec.pid_start_ticks)
        if under or rec.id == token:
            depth = max(depth, int(rec.request.get("depth") or 0) + 1)
    return settings if depth == settings.depth else replace(settings, depth=depth)
