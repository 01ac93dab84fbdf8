"""Process supervision: spawn a job in its own process group with output to files, wait, kill the group.

A job runs under a one-line `sh` shim that writes the agent's exit status to a file, so the status
survives relay being killed; relay re-attaches to a still-running job by pid and start time.
On Linux the shim is a child subreaper (see launcher.py): whatever its agent orphans, even a process
that left the job's group with setsid(), re-parents to the shim, and nothing outlives the job. The
portable runtime (macOS, the BSDs; see _portable.py) has no subreaper: its shim kills its whole
group once the agent has exited, and a stop also signals the shim's descendants found by psutil.
Which runtime serves is chosen once, at start-up (`choice`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Protocol

import anyio

from relay.errors import ErrorCode, RelayError
from relay.runtime import choice, launcher, procinfo, spares
from relay.runtime.invocation import Invocation
from relay.runtime.seam import ExitWatch

# How often a waiting loop wakes to read new output and check deadlines. Exit itself is seen at
# once through a pidfd (kqueue, or a short poll, on the portable runtime); this only bounds how
# stale progress and timeout checks can be.
POLL_INTERVAL_S = 0.1
# After SIGKILL, how long to wait for the kernel to remove the group before giving up.
KILL_CONFIRM_S = 5.0
# Step between checks that a signalled group has gone.
GROUP_CHECK_INTERVAL_S = 0.02
# Once nothing but the shim is left, how long it may take to finish (it may start a Python to kill
# and reap what its agent left behind) before it is SIGKILLed too.
SHIM_FINISH_S = 2.0

# `$1` is the job's folder, `$2 $3` the Python and the reaper script, the rest is the agent's argv.
# The shim records its pid (so a relay killed right after spawning still knows the job started),
# runs the agent, and writes the agent's exit status whoever is watching. It traps SIGTERM (its
# agent does not inherit that) so a signal meant for the job never ends the shim before its agent.
# If processes are left under it (the kernel's children list is not empty) it execs the reaper,
# which kills them all; `exit $e` / the reaper's exit status make its own status the agent's.
# The exit file is written in place (one short write, no `mv` process on every job's way out): it is
# read only once the shim has ended, and an empty one reads as "no status", like a missing one.
SHIM = (
    'd=$1; p=$2; r=$3; shift 3; trap : TERM; echo $$ > "$d/pid"; "$@"; e=$?; '
    'echo "$e" > "$d/exit"; '
    "k=; read -r k < /proc/$$/task/$$/children 2>/dev/null || [ -e /proc/$$/task/$$/children ] || k=unknown; "
    '[ -z "$k" ] || exec "$p" -I -S "$r" "$e"; exit "$e"'
)
# The portable runtime's shim (no subreaper, no /proc): same arguments, same files. Once the agent's
# status is written, `kill -s KILL 0` ends the job's whole group, the shim included, so nothing left
# in the group outlives the job (its own exit status is then the signal's; the exit file holds the
# agent's). POSIX sh only.
PORTABLE_SHIM = (
    'd=$1; shift 3; trap : TERM; echo $$ > "$d/pid"; "$@"; e=$?; echo "$e" > "$d/exit"; kill -s KILL 0; exit "$e"'
)
REAPER = Path(__file__).with_name("_reaper.py")


@dataclass(frozen=True)
class JobFiles:
    """Where a job's process writes: everything under RELAY_HOME/jobs/<id>/."""

    dir: Path

    @cached_property
    def stdout(self) -> Path:
        return self.dir / "stdout"

    @cached_property
    def stderr(self) -> Path:
        return self.dir / "stderr"

    @cached_property
    def exit(self) -> Path:
        return self.dir / "exit"

    @cached_property
    def pid(self) -> Path:
        return self.dir / "pid"

    def read_pid(self) -> int | None:
        try:
            text = self.pid.read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    @cached_property
    def stdin(self) -> Path:
        return self.dir / "stdin"

    @cached_property
    def result(self) -> Path:
        return self.dir / "result.txt"

    def read_exit_code(self) -> int | None:
        try:
            text = self.exit.read_text().strip()
        except OSError:
            return None
        return int(text) if text.lstrip("-").isdigit() else None

    def stderr_tail(self, limit: int = 16_384) -> str:
        try:
            with self.stderr.open("rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                fh.seek(max(0, size - limit))
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""


class JobProcess(Protocol):
    """A running job's process, as the engine sees it (real, re-attached, or a test fake)."""

    pid: int
    start_ticks: int | None

    async def wait_exit(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds; True once the process has exited."""
        ...

    def exit_code(self) -> int | None: ...

    async def kill_group(self, grace: float) -> None:
        """SIGTERM the whole group, wait `grace`, SIGKILL what is left; bounded."""
        ...

    def reap_group(self) -> None:
        """After the leader exited: SIGKILL anything left in its group (a grandchild holding on)."""
        ...

    def close(self) -> None: ...


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
    except OSError as exc:
        if exc.errno == errno.ESRCH:
            return False
        raise
    return True


async def _wait_group_gone(pgid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while procinfo.group_members(pgid):
        if time.monotonic() >= deadline:
            return False
        await anyio.sleep(GROUP_CHECK_INTERVAL_S)
    return True


class _ShimProcess:
    """Shared logic: exit seen through the runtime's watch (pidfd, kqueue or poll), group killed by pgid (the shim's pid)."""

    def __init__(self, pid: int, start_ticks: int | None, files: JobFiles) -> None:
        self.pid = pid
        self.start_ticks = start_ticks
        self.files = files
        self._subreaper = choice.active().runtime.subreaper
        self._watch: ExitWatch | None = choice.active().runtime.watch_exit(pid, start_ticks)
        self._exited = self._watch is None

    async def wait_exit(self, timeout: float) -> bool:
        if self._exited:
            return True
        if self._watch is None or not await self._watch.wait(timeout):
            return False
        self._exited = True
        self._on_exit()
        if not self._subreaper:
            # The portable shim's last act killed its group; let the kernel finish removing it (bounded).
            await _wait_group_gone(self.pid, SHIM_FINISH_S)
        return True

    def _on_exit(self) -> None:
        pass

    def exit_code(self) -> int | None:
        return self.files.read_exit_code()

    def _signal_job(self, sig: int) -> bool:
        """Signal every process of the job but the shim (its descendants and group); False if there were none.

        The shim is spared so it stays alive as the subreaper that collects what its agent orphans;
        it exits by itself once its agent has ended and nothing is left under it.
        """
        shim_alive = procinfo.is_alive(self.pid, self.start_ticks)
        pids = procinfo.job_processes(self.pid, descendants=shim_alive)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return bool(pids)

    async def kill_group(self, grace: float) -> None:
        self._signal_job(signal.SIGTERM)
        if await _wait_group_gone(self.pid, grace):
            return
        now = time.monotonic()
        deadline, shim_deadline = now + KILL_CONFIRM_S, now + SHIM_FINISH_S
        while procinfo.group_members(self.pid):
            if not self._signal_job(signal.SIGKILL) and time.monotonic() >= shim_deadline:
                _signal_group(self.pid, signal.SIGKILL)  # only the shim is left, and it is stuck
            if time.monotonic() >= deadline:
                return
            await anyio.sleep(GROUP_CHECK_INTERVAL_S)

    def reap_group(self) -> None:
        # The group id stays reserved while any member lives, so this reaches only our leftovers.
        _signal_group(self.pid, signal.SIGKILL)

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None


class SpawnedProcess(_ShimProcess):
    """A job process this relay started: its child when spawned directly (`popen`), else the helper's.

    Started by a spare (`notice`), its end is heard on the spare's socket, before the spare has gone:
    with nothing left under the spare the job is over then, and its status is the one told.
    """

    def __init__(
        self, pid: int, popen: subprocess.Popen[bytes] | None, files: JobFiles, notice: spares.Notice | None = None
    ) -> None:
        self.popen = popen
        self._notice = notice
        self.via_spare = notice is not None
        super().__init__(pid, procinfo.start_ticks(pid), files)
        self._returncode: int | None = None

    async def wait_exit(self, timeout: float) -> bool:
        notice = self._notice
        if notice is None or self._exited:
            return await super().wait_exit(timeout)
        deadline = time.monotonic() + timeout
        with anyio.move_on_after(timeout):
            while not notice.ended:
                await anyio.wait_readable(notice.fileno())
                notice.read()
        if not notice.ended:
            return False
        if notice.code is not None and notice.clean:
            self._exited = True
            return True
        self._notice = None  # processes were left (the reaper ends them) or the spare said nothing: its exit
        return await super().wait_exit(max(0.0, deadline - time.monotonic()))

    def reap_group(self) -> None:
        if self._notice is not None and self._notice.clean:
            return  # nothing was left under the spare, which has written the exit file and only goes
        super().reap_group()

    def _on_exit(self) -> None:
        # Reap the shim so it does not linger as a zombie (the spawn helper reaps its own).
        if self.popen is not None:
            self._returncode = self.popen.poll()

    def exit_code(self) -> int | None:
        if self._notice is not None and self._notice.code is not None:
            return self._notice.code
        code = self.files.read_exit_code()
        if code is not None or self.popen is None:
            return code
        rc = self._returncode if self._returncode is not None else self.popen.poll()
        if rc is None:
            return None
        return 128 - rc if rc < 0 else rc

    async def kill_group(self, grace: float) -> None:
        await super().kill_group(grace)
        if self.popen is not None:
            self.popen.poll()

    def close(self) -> None:
        if self.popen is not None:
            self.popen.poll()
        if self._notice is not None:
            self._notice.close()
        super().close()


class AttachedProcess(_ShimProcess):
    """A job process started by an earlier relay, found alive after a restart."""


def spawn(invocation: Invocation, files: JobFiles) -> SpawnedProcess:
    """Start the invocation in a new session (its own process group) under the runtime's shim, output to files.

    RelayError (UNSUPPORTED_PLATFORM) where the runtime cannot run CLI jobs (Windows); RelayError
    (CWD_NOT_ALLOWED) if the process, once in `invocation.cwd`, found itself in another directory (a
    symlink swapped into the path after relay checked it): it never exec'd, so neither did the agent.
    """
    runtime = choice.active().runtime
    runtime.check_spawn()
    subreaper = runtime.subreaper
    files.dir.mkdir(parents=True, exist_ok=True)
    if invocation.stdin_text is not None:
        files.stdin.write_text(invocation.stdin_text, encoding="utf-8")
    try:
        pid, popen, notice = _launch(invocation, files, subreaper)
    except launcher.CwdChanged as exc:
        raise cwd_swapped(exc) from None
    return SpawnedProcess(pid, popen, files, notice)


def warm() -> None:
    """Start the runtime's spawn helper now (it makes the spare shims) rather than at the first job."""
    if choice.active().runtime.subreaper:
        launcher.warm()


def cwd_swapped(exc: launcher.CwdChanged) -> RelayError:
    """The error of a job whose process was not in the directory relay checked (it did not start)."""
    found = repr(exc.actual) if exc.actual else "a directory that had been removed"
    return RelayError(
        ErrorCode.CWD_NOT_ALLOWED,
        f"cwd {exc.expected!r} changed between relay's check and the job's start: the job's process found "
        f"itself in {found}, so the agent was not started",
        "something replaced the directory (a symlink or a move) after relay checked it against the allowed "
        "roots; make sure nothing rewrites that path, then submit the job again",
    )


def _launch(
    invocation: Invocation, files: JobFiles, subreaper: bool
) -> tuple[int, subprocess.Popen[bytes] | None, spares.Notice | None]:
    agent = launcher.Launch(
        argv=invocation.argv,
        env=invocation.env,
        cwd=invocation.cwd,
        stdin=files.stdin if invocation.stdin_text is not None else None,
        stdout=files.stdout,
        stderr=files.stderr,
    )
    if subreaper:
        # A spare shim made ahead (spares.py) does the `sh` shim's work with no exec of its own.
        started = launcher.start_job(files.dir, agent)
        if started is not None:
            return started[0], None, started[1]
    shim = [
        "/bin/sh",
        "-c",
        SHIM if subreaper else PORTABLE_SHIM,
        "relay-job",
        str(files.dir),
        sys.executable,
        str(REAPER),
        *invocation.argv,
    ]
    pid, popen = launcher.spawn(dataclasses.replace(agent, argv=shim), subreaper=subreaper)
    return pid, popen, None


def attach(pid: int, start_ticks: int | None, files: JobFiles) -> AttachedProcess:
    return AttachedProcess(pid, start_ticks, files)
