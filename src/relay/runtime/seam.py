"""The runtime seam: what the supervisor and the job engine need from the platform, as two protocols.

Three implementations: `_linux.LinuxRuntime` (pidfd, /proc, a subreaper shim),
`_portable.PortableRuntime` (psutil, kqueue or a poll, killpg plus a descendants walk) and, where CLI
jobs cannot run at all (Windows), `_unsupported.UnsupportedRuntime` (every spawn refused with one
clear error, process queries through psutil). `choice` picks one once, at start-up.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


def descendants(leader: int, parent: Mapping[int, int]) -> set[int]:
    """Every process below `leader` in a pid -> parent-pid table (the walk both job runtimes make)."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    stack = list(children.get(leader, ()))
    while stack:
        pid = stack.pop()
        if pid != leader and pid not in found:
            found.add(pid)
            stack.extend(children.get(pid, ()))
    return found


class ExitWatch(Protocol):
    """Sees one process exit."""

    async def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds; True once the process has exited."""
        ...

    def close(self) -> None: ...


class Runtime(Protocol):
    """Process identity, exit waits and the job's process tree on one kind of platform."""

    @property
    def name(self) -> str: ...

    @property
    def subreaper(self) -> bool:
        """Whether a job's shim is a child subreaper (Linux): then nothing its agent orphans escapes it."""
        ...

    def check_spawn(self) -> None:
        """Raise RelayError if CLI jobs cannot run on this runtime (checked before a job exists)."""
        ...

    def boot_id(self) -> str: ...

    def reads_boot_id(self, boot: str) -> bool:
        """Whether `boot` was written by this runtime (another runtime's boot id cannot be compared)."""
        ...

    def start_ticks(self, pid: int) -> int | None:
        """The process's start time as an integer that stays the same for its whole life."""
        ...

    def start_epoch(self, pid: int) -> float | None:
        """When the process started, in Unix time."""
        ...

    def is_alive(self, pid: int, expected_start: int | None, expected_boot: str | None = None) -> bool: ...

    def group_members(self, pgid: int) -> list[int]: ...

    def job_processes(self, leader: int, *, descendants: bool = True) -> list[int]: ...

    def watch_exit(self, pid: int, start_ticks: int | None) -> ExitWatch | None:
        """A watch on `pid`'s exit, or None if it is already gone."""
        ...
