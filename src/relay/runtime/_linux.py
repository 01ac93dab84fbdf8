"""The Linux runtime: process identity from /proc, exits seen through a pidfd, a subreaper shim.

A pid is only "ours" if its start time (clock ticks since boot) and the boot id match what we
recorded. Selected by `runtime.choice` when the platform offers os.pidfd_open, /proc and prctl.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio

from relay.runtime.seam import descendants as descendants_of

_PROC = Path("/proc")


def boot_id() -> str:
    """This boot's id (read once: it cannot change while this process lives)."""
    global _boot_id
    if _boot_id is None:
        try:
            _boot_id = (_PROC / "sys/kernel/random/boot_id").read_text().strip()
        except OSError:
            return ""
    return _boot_id


_boot_id: str | None = None


def _stat_fields(pid: int) -> list[str] | None:
    try:
        fd = os.open(f"/proc/{int(pid)}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except (OSError, ValueError, OverflowError):
        return None
    try:
        raw = os.read(fd, 4096).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)
    # The command name (field 2) may contain spaces and parentheses; fields resume after the last ')'.
    return raw[raw.rfind(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """The process start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def is_alive(pid: int, expected_start: int | None, expected_boot: str | None = None) -> bool:
    """True if `pid` runs, is not a zombie, and is the same process that started at `expected_start`."""
    if expected_boot and expected_boot != boot_id():
        return False
    fields = _stat_fields(pid)
    if not fields or fields[0] in ("Z", "X"):
        return False
    return expected_start is None or int(fields[19]) == expected_start


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is `pgid`."""
    members: list[int] = []
    try:
        entries = os.listdir(_PROC)
    except OSError:
        return members
    for name in entries:
        if not name.isdigit():
            continue
        fields = _stat_fields(int(name))
        if fields and len(fields) > 2 and fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            members.append(int(name))
    return members


def job_processes(leader: int, *, descendants: bool = True) -> list[int]:
    """Live processes of a job other than its leader: its group's members and (if asked) the leader's descendants.

    A descendant that called setsid() has left the group but stays under the leader (a child
    subreaper), so one walk over /proc finds it. Ask for descendants only while the leader is
    known to be alive: a reused pid's children are not the job's.
    """
    parent: dict[int, int] = {}
    in_group: list[int] = []
    try:
        entries = os.listdir(_PROC)
    except OSError:
        return []
    for name in entries:
        if not name.isdigit():
            continue
        fields = _stat_fields(int(name))
        if not fields or len(fields) <= 2 or fields[0] in ("Z", "X"):
            continue
        pid = int(name)
        parent[pid] = int(fields[1])
        if int(fields[2]) == leader:
            in_group.append(pid)
    found = {pid for pid in in_group if pid != leader}
    if descendants:
        found |= descendants_of(leader, parent)
    return sorted(found)


def start_epoch(pid: int) -> float | None:
    """When `pid` started, in Unix time (boot time + start ticks)."""
    ticks = start_ticks(pid)
    if ticks is None:
        return None
    try:
        for line in (_PROC / "stat").read_text().splitlines():
            if line.startswith("btime "):
                return int(line.split()[1]) + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return None
    return None


def reads_boot_id(boot: str) -> bool:
    """Whether `boot` is a boot id this runtime writes (the kernel's uuid), so it can be compared."""
    return not boot.startswith("btime:")


class PidfdWatch:
    """An exit seen at once: a pidfd becomes readable when its process exits."""

    def __init__(self, pidfd: int) -> None:
        self._pidfd: int | None = pidfd

    async def wait(self, timeout: float) -> bool:
        if self._pidfd is None:
            return True
        with anyio.move_on_after(timeout):
            await anyio.wait_readable(self._pidfd)
            return True
        return False

    def close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


class LinuxRuntime:
    """pidfd, /proc and PR_SET_CHILD_SUBREAPER: nothing a job starts can outlive it."""

    name = "linux"
    subreaper = True

    def check_spawn(self) -> None:
        """Nothing to refuse: CLI jobs run here."""

    boot_id = staticmethod(boot_id)
    reads_boot_id = staticmethod(reads_boot_id)
    start_ticks = staticmethod(start_ticks)
    start_epoch = staticmethod(start_epoch)
    is_alive = staticmethod(is_alive)
    group_members = staticmethod(group_members)
    job_processes = staticmethod(job_processes)

    def watch_exit(self, pid: int, start_ticks: int | None) -> PidfdWatch | None:
        """A watch on `pid`'s exit, or None if it is already gone."""
        try:
            return PidfdWatch(os.pidfd_open(pid))
        except OSError:
            return None
