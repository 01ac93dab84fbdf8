"""A real `git daemon` serving the bare repositories of a folder, on 127.0.0.1 or any address of this host."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

# How long a git daemon may take to say it listens.
READY_TIMEOUT_S = 10.0
# Attempts at a free port (another process may take the one picked before the daemon binds it).
PORT_ATTEMPTS = 3


@dataclass
class GitDaemon:
    host: str
    port: int
    base: Path
    proc: subprocess.Popen[str]
    log: list[str] = field(default_factory=list[str])

    def url(self, name: str) -> str:
        return f"git://{self.host}:{self.port}/{name}"


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _wait_ready(proc: subprocess.Popen[str], log: list[str]) -> bool:
    """Read the daemon's stderr until it says it listens (True) or exits (False); bounded by READY_TIMEOUT_S."""
    assert proc.stderr is not None
    deadline = time.monotonic() + READY_TIMEOUT_S
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stderr, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if not sel.select(left):
                break
            line = proc.stderr.readline()
            if not line:
                return False
            log.append(line)
            if "Ready to rumble" in line:
                return True
    raise AssertionError(f"git daemon did not start within {READY_TIMEOUT_S} s: {''.join(log)}")


def _drain(proc: subprocess.Popen[str], log: list[str]) -> None:
    assert proc.stderr is not None
    for line in proc.stderr:
        log.append(line)


@contextlib.contextmanager
def git_daemon(base: Path, host: str = "127.0.0.1", *, push: bool = True) -> Iterator[GitDaemon]:
    """Serve every repository under `base` at git://host:port/<name> (pushes too when `push`); stopped at the end."""
    log: list[str] = []
    for _ in range(PORT_ATTEMPTS):
        port = free_port(host)
        argv = [
            "git",
            "daemon",
            "--verbose",
            "--reuseaddr",
            "--export-all",
            f"--base-path={base}",
            f"--listen={host}",
            f"--port={port}",
        ]
        if push:
            argv.insert(2, "--enable=receive-pack")
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        try:
            if _wait_ready(proc, log):
                break
        except BaseException:
            _stop(proc)
            raise
        proc.wait(timeout=READY_TIMEOUT_S)
    else:
        raise AssertionError(f"git daemon did not start: {''.join(log)}")
    threading.Thread(target=_drain, args=(proc, log), daemon=True).start()
    try:
        yield GitDaemon(host=host, port=port, base=base, proc=proc, log=log)
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen[str]) -> None:
    """The daemon and the children it forked for connections (its process group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=READY_TIMEOUT_S)


def bare_repo(base: Path, name: str, source: Path) -> Path:
    """A bare copy of the checkout `source` as `base/name` (every branch and tag)."""
    target = base / name
    subprocess.run(["git", "clone", "--quiet", "--bare", str(source), str(target)], check=True, capture_output=True)
    return target
