"""The fence file a worker keeps and the keeper process that acts on it (see _fence_keeper.py)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from relay.runtime import _fence_keeper
from relay.runtime._fence_keeper import FENCED_MARK, kill_jobs, read_fence

__all__ = ["FENCED_MARK", "kill_jobs", "read_fence", "start_keeper", "stop_keeper", "write_fence"]

# How long a keeper asked to stop may take before it is killed.
KEEPER_STOP_S = 2.0


def write_fence(path: Path, deadline: float, jobs: Iterable[Path]) -> None:
    """Replace the fence file whole: the deadline (time.monotonic()) and the folders of the jobs it guards."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({"deadline": deadline, "jobs": [str(j) for j in jobs]}))
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
