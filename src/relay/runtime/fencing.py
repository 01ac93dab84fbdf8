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

# The longest fence file written over in place: one page (a write within it is whole once a killed writer is gone).
IN_PLACE_BYTES = 4096
# How long a keeper asked to stop may take before it is killed.
KEEPER_STOP_S = 2.0


def write_fence(path: Path, deadline: float, jobs: Iterable[Path]) -> None:
    """Write the fence file: the deadline (time.monotonic()) and the folders of the jobs it guards, its check line
    first (_fence_keeper.read_fence). Within a page, over the file in place, padded to its length: one write a
    killed writer cannot leave half done (a file made and renamed per write cost a job two new files); longer,
    replaced whole as before."""
    folders = [str(j) for j in jobs]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        data = fence_bytes(deadline, folders, os.fstat(fd).st_size)
        if len(data) <= IN_PLACE_BYTES:
            os.pwrite(fd, data, 0)
            return
    finally:
        os.close(fd)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(fence_bytes(deadline, folders))
    os.replace(tmp, path)


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
