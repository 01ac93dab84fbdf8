"""The fence file a worker keeps and the keeper process that acts on it (see _fence_keeper.py)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from relay.runtime import _fence_keeper
from relay.runtime._fence_keeper import FENCED_MARK, fence_bytes, kill_jobs, read_fence

__all__ = ["FENCED_MARK", "fence_bytes", "kill_jobs", "read_fence", "start_keeper", "stop_keeper", "write_fence"]

# How long a keeper asked to stop may take before it is killed.
KEEPER_STOP_S = 2.0


def write_fence(path: Path, deadline: float, jobs: Iterable[Path]) -> None:
    """Write the fence file over: the deadline (time.monotonic()) and the folders of the jobs it guards. In place,
    its check line first (_fence_keeper.read_fence): a file made and renamed per write cost a job two new files."""
    data = fence_bytes(deadline, [str(j) for j in jobs])
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def start_keeper(fence: Path) -> subprocess.Popen[bytes]:
    """The keeper of this process's fence file, in a session of its own (relay's own script, fixed argv)."""
    argv = [sys.executable, "-I", "-S", _fence_keeper.__file__, str(fence), str(os.getpid())]
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


def stop_keeper(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        proc.wait(KEEPER_STOP_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(KEEPER_STOP_S)
