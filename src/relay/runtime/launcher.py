"""Start a job's shim as a child subreaper, in its own session, fast.

The shim must call prctl(PR_SET_CHILD_SUBREAPER) between fork and exec so that every process its
agent orphans (even one that left the job's process group with setsid()) re-parents to the shim and
dies with the job. Python's only hook there is preexec_fn, which turns the cheap vfork spawn into a
full fork of relay's process (milliseconds each in a large server). So relay keeps one small helper
process (`_zygote.py`) that forks cheaply and does the prctl; until that helper has started, or if
it breaks, relay spawns directly with a preexec_fn (slower, same result). Either way the pid comes
back only once the shim has exec'd in its own session (the helper waits on a close-on-exec pipe, as
Popen does), so the job's process group exists before relay can signal it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import select
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

PR_SET_CHILD_SUBREAPER = 36
ZYGOTE = Path(__file__).with_name("_zygote.py")
# How long relay waits for the helper's reply to a spawn request before giving up on the helper
# (above the helper's own bound on a child's exec, _zygote.CHILD_START_S = 8 s).
ZYGOTE_REPLY_S = 10.0
# A helper that keeps dying is not restarted past this many starts: relay then always spawns directly.
ZYGOTE_MAX_STARTS = 3
# How long to wait for a discarded helper to go after SIGKILL.
ZYGOTE_KILL_WAIT_S = 5.0


@dataclass(frozen=True)
class Launch:
    """What to start: argv with its environment and cwd; the three streams as paths (stdin None: /dev/null)."""

    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: str | None
    stdin: Path | None
    stdout: Path
    stderr: Path


# Resolved once here: the forked child of a threaded process must not dlopen or look symbols up.
# None where there is no prctl (macOS, the BSDs): the portable runtime never asks for a subreaper.
_prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)


def _prctl_subreaper() -> None:
    if _prctl is not None:
        _prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def spawn_direct(launch: Launch, *, subreaper: bool = True) -> subprocess.Popen[bytes]:
    """Spawn from this process (fork + prctl in the child): always works, costs a full fork.

    Without `subreaper` (the portable runtime) no preexec_fn runs, so the spawn stays cheap.
    """
    with contextlib.ExitStack() as stack:
        stdin: IO[bytes] | int = (
            stack.enter_context(launch.stdin.open("rb")) if launch.stdin is not None else subprocess.DEVNULL
        )
        out = stack.enter_context(launch.stdout.open("ab"))
        err = stack.enter_context(launch.stderr.open("ab"))
        return subprocess.Popen(
            list(launch.argv),
            stdin=stdin,
            stdout=out,
            stderr=err,
            cwd=launch.cwd,
            env=dict(launch.env),
            start_new_session=True,
            close_fds=True,
            preexec_fn=_prctl_subreaper if subreaper else None,
        )


class _Zygote:
    """The helper process, started on first use; `None` from spawn means: not ready, spawn directly."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._ready = False
        self._starts = 0
        self._broken = not sys.executable or not ZYGOTE.exists()

    def _start(self) -> None:
        self._starts += 1
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(ZYGOTE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C at relay's terminal must not reach it
            close_fds=True,
        )
        self._ready = False

    def _readline(self, timeout: float) -> dict[str, Any] | None:
        proc = self._proc
        if proc is None or proc.stdout is None:
            return None
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = proc.stdout.readline()
        return json.loads(line) if line else None

    def _discard(self) -> None:
        proc, self._proc, self._ready = self._proc, None, False
        if proc is not None:
            with contextlib.suppress(OSError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(ZYGOTE_KILL_WAIT_S)
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()

    def spawn(self, launch: Launch) -> int | None:
        with self._lock:
            if self._broken:
                return None
            try:
                return self._spawn(launch)
            except _Unsure:
                # The helper may have started the job before it failed: never spawn it a second time.
                self._discard()
                raise OSError("relay's spawn helper stopped answering") from None
            except (OSError, ValueError):
                self._discard()
                return None

    def _spawn(self, launch: Launch) -> int | None:
        if self._proc is not None and self._proc.poll() is not None:
            self._discard()
        if self._proc is None:
            if self._starts >= ZYGOTE_MAX_STARTS:
                self._broken = True
                return None
            self._start()
            return None  # starting takes a Python startup: this spawn goes direct, the next ones here
        if not self._ready:
            hello = self._readline(0)
            if hello is None:
                return None
            self._ready = bool(hello.get("ready"))
        proc = self._proc
        if proc.stdin is None:
            return None
        request = {
            "argv": list(launch.argv),
            "env": dict(launch.env),
            "cwd": launch.cwd,
            "stdin": str(launch.stdin) if launch.stdin is not None else None,
            "stdout": str(launch.stdout),
            "stderr": str(launch.stderr),
        }
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        proc.stdin.flush()
        try:
            reply = self._readline(ZYGOTE_REPLY_S)
        except (OSError, ValueError):
            reply = None
        if reply is None:
            raise _Unsure
        if "pid" in reply:
            return int(reply["pid"])
        raise _SpawnFailed(int(reply.get("errno") or 0), str(reply.get("error", "spawn failed")))


class _Unsure(Exception):
    """The request reached the helper but no answer came back: whether the job started is unknown."""


class _SpawnFailed(Exception):
    """The helper could not start the shim (bad cwd, unreadable file, failed exec): the failure a direct spawn gives."""

    def __init__(self, errno: int, message: str) -> None:
        super().__init__(message)
        self.errno = errno


_zygote = _Zygote()


def spawn(launch: Launch, *, subreaper: bool = True) -> tuple[int, subprocess.Popen[bytes] | None]:
    """Start `launch`; returns its pid and, when relay forked it itself, the Popen to reap it with.

    Without `subreaper` (the portable runtime) there is nothing for the helper to do: spawn directly.
    """
    if not subreaper:
        popen = spawn_direct(launch, subreaper=False)
        return popen.pid, popen
    try:
        pid = _zygote.spawn(launch)
    except _SpawnFailed as exc:
        raise OSError(exc.errno, str(exc)) from None
    if pid is not None:
        return pid, None
    popen = spawn_direct(launch)
    return popen.pid, popen
