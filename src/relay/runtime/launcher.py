"""Start a job's shim as a child subreaper, in its own session, fast.

The shim must call prctl(PR_SET_CHILD_SUBREAPER) between fork and exec so that every process its
agent orphans (even one that left the job's process group with setsid()) re-parents to the shim and
dies with the job. Python's only hook there is preexec_fn, which turns the cheap vfork spawn into a
full fork of relay's process (milliseconds each in a large server). So relay keeps one small helper
process (`_zygote.py`) that forks cheaply and does the prctl; until that helper has started, or if
it breaks, relay spawns directly with a preexec_fn (slower, same result). Either way the pid comes
back only once the shim has exec'd in its own session (the helper waits on a close-on-exec pipe, as
Popen does), so the job's process group exists before relay can signal it.

The job's directory is checked where it is used. relay resolves a job's cwd and checks it against
the allowed roots, then hands the resolved path here; a symlink swapped into that path in between
would have the job start outside the roots. So the process about to exec (the helper's child, or
relay's own child through a preexec_fn) changes into the path, asks the kernel where it actually is
(`os.getcwd()`) and execs only if that is exactly the path relay checked; otherwise it reports where
it is and exits, and the spawn fails with `CwdChanged`. That answer is race-free: getcwd() is
computed from the directory the process holds (its working directory), not by looking a path up,
so nothing swapped into the path before or after the chdir can make another directory report the
checked path, and the path it reports has no symlink in it. (Comparing st_dev/st_ino with a stat
relay made would not be: that stat is one more lookup of the path, which can itself race with the
check.) The portable runtime's spawn has no preexec_fn (it would turn Popen's vfork into a full fork
on Linux), so there relay holds the directory open, asks the kernel the path of the directory it
holds (/proc/self/fd/N: computed from the directory, as getcwd() is) and the child enters that very
directory through the descriptor; without /proc (macOS, the BSDs, where Popen forks anyway when it is
given a cwd) a preexec_fn checks getcwd(). No extra process, no extra round trip: the check rides on
the exec report each spawn already waits for.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import json
import os
import socket
import subprocess
import sys
import threading
import time
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from relay.runtime import spares

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
    """What to start: argv with its environment and cwd; the three streams as paths (stdin None: /dev/null).

    `cwd` is a resolved path (no symlink in it, as relay checked it): the process starts there and
    nowhere else (CwdChanged).
    """

    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: str | None
    stdin: Path | None
    stdout: Path
    stderr: Path

    def fields(self) -> dict[str, Any]:
        """As the spawn helper and the spare shims read it (JSON): stdin None means /dev/null."""
        return {
            "argv": list(self.argv),
            "env": dict(self.env),
            "cwd": self.cwd,
            "stdin": str(self.stdin) if self.stdin is not None else None,
            "stdout": str(self.stdout),
            "stderr": str(self.stderr),
        }


# Resolved once here: the forked child of a threaded process must not dlopen or look symbols up.
# None where there is no prctl (macOS, the BSDs): the portable runtime never asks for a subreaper.
_prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)


class CwdChanged(Exception):
    """The job's process, once in its cwd, was not in the directory relay checked: it did not exec.

    `actual` is where it was (getcwd()), "" if that directory no longer had a path (removed).
    """

    def __init__(self, expected: str, actual: str) -> None:
        super().__init__(f"the job's process found itself in {actual or 'a removed directory'!r}, not in {expected!r}")
        self.expected = expected
        self.actual = actual


def where_am_i() -> str:
    """This process's working directory as the kernel names it ("" once it was removed). See the module doc."""
    try:
        return os.getcwd()
    except OSError:
        return ""


def same_place(expected: str, here: str) -> bool:
    """Whether getcwd()'s `here` names the directory relay checked as `expected`.

    On macOS the usual volumes ignore case and Unicode normalization and getcwd() gives the names as
    stored, so a cwd typed `~/Work/Projet` (NFC) may come back as `~/work/Projet` (NFD): compared
    folded there. Elsewhere the names must match exactly.
    """
    if here == expected:
        return True
    if sys.platform != "darwin" or not here:
        return False
    return unicodedata.normalize("NFD", here).casefold() == unicodedata.normalize("NFD", expected).casefold()


def _prctl_subreaper() -> None:
    if _prctl is not None:
        _prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


# Where the kernel lists this process's open files (Linux): a directory held open can be entered as
# `/proc/self/fd/N` (in the child too, which inherits the descriptor), with no lookup of its own path.
_FD_LINKS = "/proc/self/fd"
_HAS_FD_LINKS = os.path.isdir(_FD_LINKS)
# Opens a directory to enter it, without needing read permission on it (Linux), as chdir() does.
_O_DIR = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC


def spawn_direct(launch: Launch, *, subreaper: bool = True) -> subprocess.Popen[bytes]:
    """Spawn from this process, in `launch.cwd` only if that is the directory relay checked (else CwdChanged).

    With `subreaper` (the Linux runtime, before its helper is up) a preexec_fn does the prctl and the
    cwd check in the child: a full fork. Without it (the portable runtime) on Linux, relay opens the
    directory, asks the kernel the path of the directory it holds (computed from the directory, as
    getcwd() is: race-free) and the child enters exactly that directory through /proc/self/fd/N: no
    preexec_fn, so Popen keeps its cheap vfork. Where there is no /proc (macOS, the BSDs: Popen
    forks there anyway when given a cwd) a preexec_fn does the check.
    """
    cwd = launch.cwd
    if cwd is None:
        return _popen(launch, None, _prctl_subreaper if subreaper else None)
    if not subreaper and _HAS_FD_LINKS:
        held = os.open(cwd, _O_DIR)
        try:
            here = os.readlink(f"{_FD_LINKS}/{held}")  # "<path> (deleted)" once removed: never equal
            if here != cwd:
                raise CwdChanged(cwd, here)
            return _popen(launch, f"{_FD_LINKS}/{held}", None)
        finally:
            os.close(held)
    return _checked_in_the_child(launch, cwd, subreaper)


def _checked_in_the_child(launch: Launch, cwd: str, subreaper: bool) -> subprocess.Popen[bytes]:
    """Popen with a preexec_fn that (after Popen's chdir, before the exec) does the prctl and checks the cwd.

    On a cwd that is not the one relay checked it writes where it is to `report` and raises: Popen
    then fails with SubprocessError (it carries no detail from a preexec_fn), which becomes CwdChanged.
    """
    report_r, report_w = os.pipe()  # close-on-exec both (PEP 446): only a failing child writes to it

    def in_the_child() -> None:
        if subreaper:
            _prctl_subreaper()
        here = where_am_i()
        if not same_place(cwd, here):
            os.write(report_w, b"@" + os.fsencode(here))
            raise CwdChanged(cwd, here)

    try:
        return _popen(launch, cwd, in_the_child)
    except subprocess.SubprocessError:
        # Popen returns only once the child is done with it: what it wrote is there now.
        os.set_blocking(report_r, False)
        try:
            said = os.read(report_r, 65536)
        except BlockingIOError:
            said = b""
        if said.startswith(b"@"):
            raise CwdChanged(cwd, os.fsdecode(said[1:])) from None
        raise
    finally:
        os.close(report_r)
        os.close(report_w)


def _popen(launch: Launch, cwd: str | None, preexec: Callable[[], None] | None) -> subprocess.Popen[bytes]:
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
            cwd=cwd,
            env=dict(launch.env),
            start_new_session=True,
            close_fds=True,
            preexec_fn=preexec,
        )


class _Zygote:
    """The helper process, started on first use; `None` from spawn means: not ready, spawn directly.

    Several spawns may be in flight (jobs starting together spawn from worker threads): each request
    carries an id its reply repeats. Whoever waits reads the replies while no one else does and hands
    each to its waiter (no thread of its own: a lone spawn reads its own reply, with no hop).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the helper's state and its stdin
        self._replies = threading.Condition()  # replies by id, and who reads them
        self._proc: subprocess.Popen[bytes] | None = None
        self._ready = False
        self._starts = 0
        self._broken = not sys.executable or not ZYGOTE.exists()
        self._ids = itertools.count(1)
        self._got: dict[int, dict[str, Any]] = {}
        self._reading = False
        self._buffers: dict[int, bytes] = {}  # what was read of each helper's replies past the last line
        self._gone: set[int] = set()  # helpers (by pid) whose replies stopped: their waiters give up
        self._spares: spares.Pool | None = None

    def _start(self) -> None:
        self._starts += 1
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(ZYGOTE), "--spares", str(theirs.fileno())],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C at relay's terminal must not reach it
                close_fds=True,
                pass_fds=(theirs.fileno(),),
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._spares = spares.Pool(ours)
        self._ready = False

    def start_job(self, job_dir: Path, launch: Launch) -> tuple[int, spares.Notice] | None:
        """Start `launch` under a spare shim (see spares.py): the job's pid and where its end will be told, or None when no spare is ready.

        CwdChanged as spawn(); OSError when the agent could not be started or the spare gave no answer
        (it may have started the job: never spawn it a second time).
        """
        with self._lock:
            pool = None if self._broken else self._spares
        request = {"dir": str(job_dir), **launch.fields()}
        while True:
            spare = pool.take() if pool is not None else None
            if spare is None:
                return None
            try:
                reply = spare.run(request)
                break
            except spares.SpareGone:
                continue  # it went before reading the job (killed while idle): the job did not start
            except spares.SpareLost:
                raise OSError("relay's spare job shim stopped answering") from None
        if "pid" in reply:
            return int(reply["pid"]), spares.Notice(spare.sock)
        if "cwd_now" in reply:
            raise CwdChanged(launch.cwd or "", str(reply["cwd_now"]))
        raise OSError(int(reply.get("errno") or 0), str(reply.get("error", "the job's shim could not start")))

    @property
    def spares(self) -> spares.Pool | None:
        return self._spares

    def warm(self) -> None:
        """Start the helper now (it makes spares) rather than on the first job."""
        with self._lock:
            if self._proc is None and not self._broken and self._starts < ZYGOTE_MAX_STARTS:
                self._start()

    def _read_line(self, proc: subprocess.Popen[bytes], timeout: float) -> bytes | None:
        """One reply line of `proc` within `timeout` (None: none yet); b"" once it can send no more."""
        assert proc.stdout is not None
        deadline = time.monotonic() + timeout
        line, self._buffers[proc.pid] = spares.read_line(
            proc.stdout.fileno(), deadline, self._buffers.get(proc.pid, b"")
        )
        return line

    def _discard(self) -> None:
        proc, self._proc, self._ready = self._proc, None, False
        pool, self._spares = self._spares, None
        if pool is not None:
            pool.close()
        if proc is not None:
            with self._replies:
                self._gone.add(proc.pid)
                self._replies.notify_all()
            with contextlib.suppress(OSError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(ZYGOTE_KILL_WAIT_S)
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
            # Its stdout is closed when the Popen goes (a waiter may be reading it right now).

    def spawn(self, launch: Launch) -> int | None:
        with self._lock:
            if self._broken:
                return None
            try:
                sent = self._send(launch)
            except (OSError, ValueError):
                self._discard()
                return None
        if sent is None:
            return None
        proc, rid = sent
        try:
            reply = self._await_reply(proc, rid)
        except _Unsure:
            # The helper may have started the job before it failed: never spawn it a second time.
            with self._lock:
                if self._proc is proc:
                    self._discard()
            raise OSError("relay's spawn helper stopped answering") from None
        if "pid" in reply:
            return int(reply["pid"])
        if "cwd_now" in reply:
            raise CwdChanged(launch.cwd or "", str(reply["cwd_now"]))
        raise _SpawnFailed(int(reply.get("errno") or 0), str(reply.get("error", "spawn failed")))

    def _send(self, launch: Launch) -> tuple[subprocess.Popen[bytes], int] | None:
        """Write the request (under the lock); the helper and the request's id, or None to spawn directly."""
        if self._proc is not None and self._proc.poll() is not None:
            self._discard()
        if self._proc is None:
            if self._starts >= ZYGOTE_MAX_STARTS:
                self._broken = True
                return None
            self._start()
            return None  # starting takes a Python startup: this spawn goes direct, the next ones here
        proc = self._proc
        if not self._ready:
            with self._replies:
                if self._reading:
                    return None
                hello = self._read_line(proc, 0)
            if not hello:
                return None
            self._ready = bool(json.loads(hello).get("ready"))
        if proc.stdin is None:
            return None
        rid = next(self._ids)
        request = {"id": rid, **launch.fields()}
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        proc.stdin.flush()
        return proc, rid

    def _await_reply(self, proc: subprocess.Popen[bytes], rid: int) -> dict[str, Any]:
        """The reply to request `rid`: read by this thread unless another is reading; _Unsure past the bound."""
        deadline = time.monotonic() + ZYGOTE_REPLY_S
        with self._replies:
            while True:
                if rid in self._got:
                    return self._got.pop(rid)
                left = deadline - time.monotonic()
                if proc.pid in self._gone or left <= 0:
                    raise _Unsure
                if self._reading:
                    self._replies.wait(left)
                    continue
                self._reading = True
                self._replies.release()  # others may queue their replies' ids meanwhile
                try:
                    line = self._read_line(proc, left)
                except (OSError, ValueError):
                    line = b""
                finally:
                    self._replies.acquire()
                    self._reading = False
                    self._replies.notify_all()
                if line == b"":
                    self._gone.add(proc.pid)
                    raise _Unsure
                if line is not None:
                    try:
                        reply = json.loads(line)
                        self._got[int(reply["id"])] = reply
                    except (ValueError, KeyError, TypeError):
                        self._gone.add(proc.pid)  # not the helper's protocol: trust none of it
                        raise _Unsure from None


class _Unsure(Exception):
    """The request reached the helper but no answer came back: whether the job started is unknown."""


class _SpawnFailed(Exception):
    """The helper could not start the shim (bad cwd, unreadable file, failed exec): the failure a direct spawn gives."""

    def __init__(self, errno: int, message: str) -> None:
        super().__init__(message)
        self.errno = errno


_zygote = _Zygote()


def start_job(job_dir: Path, launch: Launch) -> tuple[int, spares.Notice] | None:
    """Start a job's agent under a spare shim that writes `job_dir/pid` and `job_dir/exit`; None: no spare ready.

    `launch.argv` is the agent's own (the spare is the shim). Linux runtime only (it needs the subreaper).
    """
    return _zygote.start_job(job_dir, launch)


def warm() -> None:
    """Start the spawn helper ahead of the first job (a server about to take requests)."""
    _zygote.warm()


def spares_ready() -> int:
    """How many spare shims wait for a job right now (0 before the helper is up)."""
    pool = _zygote.spares
    return pool.ready() if pool is not None else 0


def spawn(launch: Launch, *, subreaper: bool = True) -> tuple[int, subprocess.Popen[bytes] | None]:
    """Start `launch`; returns its pid and, when relay forked it itself, the Popen to reap it with.

    Without `subreaper` (the portable runtime) there is nothing for the helper to do: spawn directly.
    CwdChanged if the process, once in `launch.cwd`, was somewhere else (it did not exec).
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
