"""A worker's fence keeper: kills the worker's jobs once the lease it last renewed may have run out.

A worker renews its claims in the store every third of a lease. Once it cannot (its link cut, the store
away, the worker itself paused by SIGSTOP or a debugger), the store's lease runs out and another process
ends or re-queues its jobs; the worker's agents must be dead before that, or a job runs twice. The worker
kills them itself when it can (relay.jobs.fence); this small process does it when the worker cannot: it
runs in a session of its own (a signal to the worker's group does not reach it), reads the worker's fence
file every CHECK_S and, once the file's deadline (CLOCK_MONOTONIC, shared by every process of the machine)
has passed, SIGKILLs the process group of every job folder listed there and leaves a `fenced` mark in
each. It exits when its worker is gone (a worker that died leaves its jobs to the next one of this host:
relay.jobs.recovery, and the sweep of relay.jobs.fence).

Run as `python -I -S _fence_keeper.py FENCE_FILE WORKER_PID`; standard library only (no relay import).
The fence file is a line with the CRC-32 and byte length of the JSON that follows, {"deadline": monotonic
seconds, "jobs": [job folder, ...]}, padded with spaces to the file's length and written over it in one write
within the file's first page (no new file per write: making one costs a disk more than the write; a write within
one page is whole once a killed writer is gone), or replaced whole when longer. A read caught in the middle of a
write fails the check and counts as no read, till the next look.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
import zlib
from pathlib import Path

# How often the keeper reads the fence file: the most a fence may be late.
CHECK_S = 0.1
# The mark left in a job's folder whose group the fence killed: nothing of that run is recorded after it.
FENCED_MARK = "fenced"


def kill_jobs(folders: list[str]) -> list[str]:
    """SIGKILL the process group of each job folder whose shim still runs (its pid file names the group's
    leader; a folder with an exit status has ended); mark each folder `fenced`. The folders acted on.

    The kill comes first: the mark is a file written on a disk that may be slow (another process's fsync), and a
    process must not outlive its lease waiting on it. A folder with no pid yet is marked first, and looked at again
    after: the mark stops a spawn under way from being recorded, and a spawn that recorded its pid meanwhile dies."""
    killed: list[str] = []
    for folder in folders:
        path = Path(folder)
        if (path / FENCED_MARK).exists():
            continue
        pid = _leader(path)
        if pid is not None:
            _kill_group(pid)
        with contextlib.suppress(OSError):
            (path / FENCED_MARK).write_text(f"{time.time()}\n")
        if pid is None and (pid := _leader(path)) is not None:
            _kill_group(pid)
        killed.append(folder)
    return killed


def _leader(folder: Path) -> int | None:
    """The pid of the job's shim (its group's leader), from its pid file; None before it is spawned."""
    try:
        return int((folder / "pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _kill_group(pid: int) -> None:
    with contextlib.suppress(OSError):
        if os.getpgid(pid) == pid:  # still the leader of the job's group (a reused pid leads none)
            os.killpg(pid, signal.SIGKILL)


# The check line: the CRC-32 (8 hex digits) and the length (8 digits) of the JSON that follows it.
CHECK_LINE = len("00000000 00000000\n")


def fence_bytes(deadline: float, jobs: list[str], width: int = 0) -> bytes:
    """The fence file's content: its check line, then the JSON, padded with spaces to `width` bytes in all (what
    the file held before: written over it in place, it covers all of it)."""
    body = json.dumps({"deadline": deadline, "jobs": jobs}).encode()
    body += b" " * max(0, width - CHECK_LINE - len(body))
    return f"{zlib.crc32(body):08x} {len(body):08d}\n".encode() + body


def read_fence(path: Path) -> tuple[float, list[str]] | None:
    """The deadline and job folders of the fence file; None when there is none or it is caught mid-write."""
    try:
        check, _, body = path.read_bytes().partition(b"\n")
        crc, size = check.split()
        if int(size) != len(body) or int(crc, 16) != zlib.crc32(body):
            return None
        data = json.loads(body)
        return float(data["deadline"]), [str(j) for j in data["jobs"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (the worker ended, its parent has not reaped it yet) is gone too.
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


def keep(fence: Path, worker_pid: int) -> int:
    while _alive(worker_pid):
        found = read_fence(fence)
        if found is not None and time.monotonic() > found[0]:
            kill_jobs(found[1])
        time.sleep(CHECK_S)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(keep(Path(sys.argv[1]), int(sys.argv[2])))
