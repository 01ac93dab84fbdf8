"""The portable POSIX runtime (macOS, the BSDs): identity through psutil, exits through kqueue or a poll.

What it keeps from the Linux runtime: the shim, the job's files, its own process group (killed with
killpg), the re-attach after a restart. What it does without:

- /proc: a process's start time and the boot time come from psutil. The start time is the one
  psutil itself identifies a process by (on a clock no wall-clock change moves: seconds since
  boot on Linux, the kernel's recorded start on macOS), kept as an integer in clock ticks, so a
  pid is "ours" only while that number matches, as on Linux (where it equals /proc's ticks).
- pidfd: an exit is seen at once through kqueue (EVFILT_PROC / NOTE_EXIT) where `select.kqueue`
  exists, else by a bounded poll of the process's identity.
- PR_SET_CHILD_SUBREAPER (Linux only): a process a job's agent orphans re-parents to init, not to
  the shim, so the shim cannot collect it. Two things cover that instead. The shim ends by killing
  its whole group (`kill -s KILL 0`) once the agent has exited and its status is written, so
  nothing left in the group outlives the job. And a cancel or a timeout signals, besides the
  group, every descendant of the shim found through psutil's parent links, which reaches a process
  that left the group with setsid() as long as the chain of parents to the shim is alive. What
  stays out of reach: a process that both left the group and lost its parent before the job was
  stopped (a daemon that double-forked and called setsid()).
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import time
import uuid

import anyio
import psutil

from relay.runtime.seam import ExitWatch
from relay.runtime.seam import descendants as descendants_of

# psutil's start times are floats; kept as integer ticks of this many per second (the common
# Linux USER_HZ), fine enough that two processes with one pid never share a start time.
TICKS_PER_S = 100
# macOS moves the boot time it reports when the wall clock is set; a boot time that moved less
# than this is the same boot. (A reboot also changes every start time, which is the real check.)
BOOT_TIME_SLACK_S = 60.0
# Without kqueue, how often a waiter checks whether its process has exited.
EXIT_POLL_S = 0.02

_BOOT_PREFIX = "btime:"


def _ticks(proc: psutil.Process) -> int:
    # psutil's own process identity (what its is_running() compares): the start time on a clock no
    # wall-clock change moves where the platform has one (Linux, macOS, NetBSD), else create_time().
    # Private, so psutil is pinned exactly in pyproject.toml; a test checks it stays stable.
    ident = getattr(proc, "_get_ident", None)
    started = float(ident()[1]) if ident is not None else proc.create_time()
    return round(started * TICKS_PER_S)


def boot_id() -> str:
    try:
        return f"{_BOOT_PREFIX}{round(psutil.boot_time())}"
    except (OSError, RuntimeError):
        return ""


def reads_boot_id(boot: str) -> bool:
    """Whether `boot` can be compared here: anything but the Linux runtime's boot id (the kernel's uuid)."""
    try:
        uuid.UUID(boot)
    except ValueError:
        return True
    return False


def _same_boot(expected: str) -> bool:
    current = boot_id()
    try:
        return abs(float(expected[len(_BOOT_PREFIX) :]) - float(current[len(_BOOT_PREFIX) :])) <= BOOT_TIME_SLACK_S
    except ValueError:
        return False


def _live(proc: psutil.Process) -> bool:
    return proc.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)


def start_ticks(pid: int) -> int | None:
    try:
        return _ticks(psutil.Process(pid))
    except (psutil.Error, OSError):
        return None


def start_epoch(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, OSError):
        return None


def is_alive(pid: int, expected_start: int | None, expected_boot: str | None = None) -> bool:
    """True if `pid` runs, is not a zombie, and is the same process that started at `expected_start`."""
    if expected_boot and not _same_boot(expected_boot):
        return False
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            return _live(proc) and (expected_start is None or _ticks(proc) == expected_start)
    except (psutil.Error, OSError):
        return False


def _table() -> tuple[dict[int, int], dict[int, int]]:
    """Every live process: pid -> parent pid, and pid -> process group."""
    parent: dict[int, int] = {}
    group: dict[int, int] = {}
    for proc in psutil.process_iter(["ppid", "status"]):
        info = proc.info
        if info.get("status") in (None, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            continue
        try:
            group[proc.pid] = os.getpgid(proc.pid)
        except OSError:
            continue
        parent[proc.pid] = int(info.get("ppid") or 0)
    return parent, group


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is `pgid`."""
    _, group = _table()
    return sorted(pid for pid, g in group.items() if g == pgid)


def job_processes(leader: int, *, descendants: bool = True) -> list[int]:
    """Live processes of a job other than its leader: its group's members and (if asked) the leader's descendants."""
    parent, group = _table()
    found = {pid for pid, g in group.items() if g == leader and pid != leader}
    if descendants:
        found |= descendants_of(leader, parent)
    return sorted(found)


class PollWatch:
    """An exit seen by checking the process's identity every EXIT_POLL_S; every wait bounded."""

    def __init__(self, pid: int, start: int | None) -> None:
        self._pid = pid
        self._start = start

    async def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while is_alive(self._pid, self._start):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await anyio.sleep(min(EXIT_POLL_S, left))
        return True

    def close(self) -> None:
        pass


if sys.platform != "linux" and sys.platform != "win32":

    class KqueueWatch:
        """An exit seen at once: a kqueue with EVFILT_PROC / NOTE_EXIT on the pid becomes readable."""

        def __init__(self, kq: select.kqueue) -> None:
            self._kq: select.kqueue | None = kq

        async def wait(self, timeout: float) -> bool:
            kq = self._kq
            if kq is None:
                return True
            with anyio.move_on_after(timeout):
                await anyio.wait_readable(kq.fileno())
                kq.control(None, 1, 0)
                return True
            return False

        def close(self) -> None:
            if self._kq is not None:
                self._kq.close()
                self._kq = None

    def kqueue_watch(pid: int, start: int | None) -> ExitWatch | None:
        """Register NOTE_EXIT for `pid`; None if it is gone already (ESRCH, or exited meanwhile)."""
        kq = select.kqueue()
        event = select.kevent(
            pid,
            filter=select.KQ_FILTER_PROC,
            flags=select.KQ_EV_ADD | select.KQ_EV_ONESHOT,
            fflags=select.KQ_NOTE_EXIT,
        )
        try:
            kq.control([event], 0, 0)
        except OSError:
            kq.close()
            return None
        if not is_alive(pid, start):  # exited between the caller's check and the registration
            kq.close()
            return None
        return KqueueWatch(kq)


class PortableRuntime:
    """psutil for identity, kqueue (or a bounded poll) for exits, killpg plus a descendants walk for kills."""

    name = "portable"
    subreaper = False

    def check_spawn(self) -> None:
        """Nothing to refuse: CLI jobs run here."""

    def __init__(self, *, kqueue: bool) -> None:
        self.kqueue = kqueue

    boot_id = staticmethod(boot_id)
    reads_boot_id = staticmethod(reads_boot_id)
    start_ticks = staticmethod(start_ticks)
    start_epoch = staticmethod(start_epoch)
    is_alive = staticmethod(is_alive)
    group_members = staticmethod(group_members)
    job_processes = staticmethod(job_processes)

    def watch_exit(self, pid: int, start_ticks: int | None) -> ExitWatch | None:
        """A watch on `pid`'s exit, or None if it is already gone."""
        if not is_alive(pid, start_ticks):
            return None
        if self.kqueue and sys.platform != "linux" and sys.platform != "win32":
            with contextlib.suppress(OSError):  # no kqueue left (EMFILE): poll this one
                return kqueue_watch(pid, start_ticks)
        return PollWatch(pid, start_ticks)
