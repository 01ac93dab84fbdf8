"""Process identity: a pid is only "ours" if its start time (and boot) match what we recorded.

Answered by the runtime chosen at start-up (`choice`): /proc on Linux, psutil elsewhere. The
identity a runtime records is its own: a boot id written by the other runtime (a relay restarted
with another RELAY_RUNTIME) is not compared, the start time still is.
"""

from __future__ import annotations

from relay.runtime import choice


def boot_id() -> str:
    return choice.active().runtime.boot_id()


def start_ticks(pid: int) -> int | None:
    """The process's start time as an integer that stays the same for its whole life."""
    return choice.active().runtime.start_ticks(pid)


def is_alive(pid: int, expected_start: int | None, expected_boot: str | None = None) -> bool:
    """True if `pid` runs, is not a zombie, and is the same process that started at `expected_start`."""
    runtime = choice.active().runtime
    if expected_boot and not runtime.reads_boot_id(expected_boot):
        expected_boot = None
    return runtime.is_alive(pid, expected_start, expected_boot)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is `pgid`."""
    return choice.active().runtime.group_members(pgid)


def job_processes(leader: int, *, descendants: bool = True) -> list[int]:
    """Live processes of a job other than its leader: its group's members and (if asked) the leader's descendants.

    Ask for descendants only while the leader is known to be alive: a reused pid's children are not the job's.
    """
    return choice.active().runtime.job_processes(leader, descendants=descendants)


def start_epoch(pid: int) -> float | None:
    """When `pid` started, in Unix time."""
    return choice.active().runtime.start_epoch(pid)


def host_id() -> str:
    """What tells this host's processes from another host's: the boot id, and on Linux the pid namespace too
    (containers of one machine share its boot id, but a pid of one container means nothing in another)."""
    import os

    try:
        namespace = os.readlink("/proc/self/ns/pid")  # e.g. pid:[4026531836]
    except OSError:
        return boot_id()
    return f"{boot_id()}/{namespace}"
