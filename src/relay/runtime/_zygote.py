"""A small helper process that starts job shims as child subreapers, cheaply.

Making the shim a subreaper takes a prctl() between fork and exec. Python can only do that through
a preexec_fn, which forces a real fork() of the calling process: in relay's large server process
that costs milliseconds per job. This helper is small, so its fork is cheap. relay starts it once,
sends one JSON request per line on its stdin ({argv, env, cwd, stdin, stdout, stderr}: paths for
the three streams, stdin null for /dev/null; argv[0] an absolute path) and reads one JSON reply per
line: {"pid": N} once the child has exec'd, {"errno": N, "error": "..."} when the spawn failed (a
missing cwd, an unopenable file, an exec that failed), or {"cwd_now": "...", "error": "..."} when the
child, once in `cwd`, was not in that directory (getcwd() named another: a symlink was swapped into
the path after relay checked it) and so did not exec. `cwd` is the path relay resolved and checked;
getcwd() names the directory the child holds, found from that directory and not by a lookup of the
path, so the answer cannot be raced (launcher.py says more). The pid is never sent before the child leads
its own session: relay may signal the job's group (killpg) as soon as it has the pid, so the group
must exist by then. The child tells through a pipe whose write end is close-on-exec: EOF means it
exec'd (after prctl and setsid), bytes are the errno and message of what failed; the wait is bounded
(CHILD_START_S), and a child that has not exec'd by then is killed and reported as failed. It exits
when relay closes its stdin; the jobs it started keep running in their own sessions. Run as
`python -I -S _zygote.py`; stdlib only.

Several requests may be in flight: each carries an `id` its reply repeats, and the helper reads the
next request while earlier children are still on their way to exec (a burst of 20 jobs no longer
waits for 20 execs one after another). Replies come in the order the children exec or fail.

Spares (`--spares FD`, a SOCK_SEQPACKET socket): for each byte relay sends there, the helper forks a
spare shim ahead of any job and sends relay `{"pid": N}` with the spare's end of a fresh socket pair
attached (SCM_RIGHTS). A spare is a job's shim made ahead: already a child subreaper leading its own
session, ignoring SIGTERM, waiting for one job on that socket. Given `{dir, argv, env, cwd, stdin,
stdout, stderr}` (one JSON line) it does what the `sh` shim does, with no exec of its own on the
job's way in: enters the cwd (checked as above), records its pid in `dir/pid`, spawns the agent
(posix_spawn: a vfork of this small process), answers `{"pid": N}` (its own pid, the job's), waits for
the agent, writes its exit status to `dir/exit`, tells relay that status on the socket, and execs
the reaper if anything is left under it.
A spare whose socket reaches EOF before a job came (relay went, or dropped it) exits. It never runs
a second job.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import gc
import json
import os
import select
import signal
import socket
import sys
import time
from types import FrameType
from typing import Any

PR_SET_CHILD_SUBREAPER = 36
# Upper bound of the descriptors a child closes before exec (only 0, 1 and 2 reach the job).
MAX_FD = 65536
# How long a forked child may take to exec before it is killed and the spawn reported as failed
# (relay waits ZYGOTE_REPLY_S = 10 s for the whole reply; this must stay below that).
CHILD_START_S = 8.0
# What a child writes to its `ready` pipe, before where it is, when that is not the cwd it was asked for.
CWD_CHANGED = b"cwd\0"

_prctl = ctypes.CDLL(None, use_errno=True).prctl


def become_subreaper() -> None:
    """Runs in the child between fork and exec; the setting survives exec."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _reap(_signum: int = 0, _frame: FrameType | None = None) -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _exec_child(req: dict[str, Any], fds: tuple[int, int, int], ready: int) -> None:
    """In the forked child: become the subreaper, lead a new session, wire the streams, exec. Never returns.

    `ready` is the close-on-exec write end of the pipe the helper waits on: the exec closes it (EOF:
    started), a failure writes "errno:message" to it first.
    """
    try:
        become_subreaper()
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, ready)
        os.closerange(ready + 1, MAX_FD)
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)  # Python's own dispositions must not reach the job
        here = _enter(req["cwd"])
        if here is not None:
            os.write(ready, CWD_CHANGED + os.fsencode(here))
            return  # no exec: the job never runs outside the directory relay checked
        argv: list[str] = req["argv"]
        os.execve(argv[0], argv, req["env"])
    except BaseException as exc:  # the child must never return into the helper's loop
        code = exc.errno if isinstance(exc, OSError) and exc.errno else 0
        with contextlib.suppress(OSError):
            os.write(ready, f"{code}:{exc}".encode(errors="replace")[:4000])
    finally:
        os._exit(127)


def _enter(cwd: str | None) -> str | None:
    """Change into `cwd` (if given); None once there, else where this process found itself ("" if nowhere).

    getcwd() names the directory this process is in, computed by the kernel from that directory; ""
    when it was removed since the chdir (it has no path any more).
    """
    if not cwd:
        return None
    os.chdir(cwd)
    try:
        here = os.getcwd()
    except OSError:
        here = ""
    return None if here == cwd else here


def _open_streams(req: dict[str, Any], opened: list[int]) -> None:
    """Open the job's stdin (/dev/null when none), stdout and stderr (appended to), onto `opened` in that order."""
    opened.append(os.open(req["stdin"] or os.devnull, os.O_RDONLY | os.O_CLOEXEC))
    for key in ("stdout", "stderr"):
        opened.append(os.open(req[key], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644))


class Starting:
    """A child forked for request `rid`, until it exec'd (EOF on `ready`) or failed (bytes on it), bounded."""

    def __init__(self, rid: Any, pid: int, ready: int) -> None:
        self.rid = rid
        self.pid = pid
        self.ready = ready
        self.deadline = time.monotonic() + CHILD_START_S
        self._report = b""

    def feed(self, chunk: bytes) -> dict[str, Any] | None:
        """What the child wrote (b"": EOF); the reply once the child is done with its pipe, else None."""
        if chunk:
            self._report += chunk
            return None
        if not self._report:
            return {"pid": self.pid}
        if self._report.startswith(CWD_CHANGED):
            here = os.fsdecode(self._report[len(CWD_CHANGED) :])
            return {"cwd_now": here, "error": f"the job's process found itself in {here or 'a removed directory'!r}"}
        code, _, message = self._report.decode(errors="replace").partition(":")
        return {"errno": int(code) if code.isdigit() else 0, "error": message or "the job's process could not start"}

    def expire(self) -> dict[str, Any]:
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)  # not started yet: it has no children, its pid is still ours
        return {"errno": errno.ETIMEDOUT, "error": f"the job's process did not start within {CHILD_START_S:g} s"}


def _spawn(req: dict[str, Any]) -> Starting | dict[str, Any]:
    """Fork one job; the child on its way to exec (its reply comes once it exec'd), or what failed at once."""
    opened: list[int] = []
    try:
        argv = req["argv"]
        if not argv or not os.path.isabs(argv[0]):
            raise ValueError("argv[0] must be an absolute path")
        if req["cwd"] and not os.path.isdir(req["cwd"]):
            raise FileNotFoundError(errno.ENOENT, "no such directory", req["cwd"])
        _open_streams(req, opened)
        ready_r, ready_w = os.pipe()  # both close-on-exec (PEP 446)
        opened.append(ready_w)
        try:
            pid = os.fork()
        except OSError:
            os.close(ready_r)
            raise
        if pid == 0:
            _exec_child(req, (opened[0], opened[1], opened[2]), ready_w)
        return Starting(req.get("id"), pid, ready_r)  # the write end is closed below: only the child holds it
    except OSError as exc:
        return {"errno": exc.errno or 0, "error": str(exc)}
    except (KeyError, TypeError, ValueError) as exc:
        return {"errno": 0, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        for fd in opened:
            os.close(fd)


# How long after relay asks the spares are made: a spare is asked for as one is taken, and making
# its replacement right then would race the job just handed over for the CPU.
SPARE_DELAY_S = 0.03
# Signals a job's agent gets at their default disposition, whatever the shim's own are.
AGENT_SIGDEF = (signal.SIGTERM, signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD, signal.SIGHUP)
# The longest job request a spare accepts (argv and env of an agent; relay's are a few KB).
SPARE_REQUEST_MAX = 16 * 1024 * 1024
REAPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_reaper.py")


def _spare(sock: socket.socket) -> None:
    """In a forked child: become a job's shim, wait for its job, run it (see the module doc). Never returns."""
    code = 127
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the helper's reaper must not take the agent's status
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a TERM meant for the job never ends its shim first
        become_subreaper()
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):
            os.dup2(null, target)
        keep = sorted((null, sock.fileno()))
        os.closerange(3, keep[0])
        os.closerange(keep[0] + 1, keep[1])
        os.closerange(keep[1] + 1, MAX_FD)
        os.close(null)
        _rehearse()
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(1 << 20)
            if not chunk or len(data) > SPARE_REQUEST_MAX:
                os._exit(0)  # relay went (or dropped this spare) before a job came
            data += chunk
        code = _run_job(json.loads(data), sock)
    except BaseException as exc:  # the child must never return into the helper's loop
        _tell(sock, {"errno": getattr(exc, "errno", 0) or 0, "error": str(exc)})
    finally:
        os._exit(code)


def _rehearse() -> None:
    """Touch, ahead of the job, what running it will touch: the pages this fork shares with the helper
    are copied on first write (refcounts, allocator pools), a cost that would otherwise fall on the
    job's way in. The collector is off for good: a collection would write to every object's header."""
    gc.disable()
    sample = json.dumps({"dir": "/", "argv": ["x"], "env": {"PATH": os.defpath}, "cwd": None, "stdin": None})
    json.loads(sample)
    _which("sh", os.defpath)
    os.getcwd()
    _anything_left()


def _run_job(req: dict[str, Any], sock: socket.socket) -> int:
    """The shim's work for one job; the exit status to end with (it execs the reaper if processes are left)."""
    opened: list[int] = []
    _open_streams(req, opened)
    here = _enter(req["cwd"])
    if here is not None:
        _tell(sock, {"cwd_now": here, "error": "not in the checked cwd"})
        return 127
    me = os.getpid()
    argv: list[str] = req["argv"]
    env: dict[str, str] = req["env"]
    path = argv[0] if "/" in argv[0] else _which(argv[0], env.get("PATH", os.defpath))
    status = 0
    try:
        try:
            agent = _posix_spawn(path, argv, env, opened)
        except OSError as exc:
            if exc.errno != errno.ENOEXEC:
                raise
            agent = _posix_spawn("/bin/sh", ["/bin/sh", path, *argv[1:]], env, opened)  # a script with no #! line
    except OSError as exc:
        # What `sh` does when the agent cannot be executed: a message on stderr, 126 or 127.
        os.write(opened[2], f"relay-job: {argv[0]}: {exc.strerror}\n".encode(errors="replace"))
        agent, status = 0, 126 if exc.errno in (errno.EACCES, errno.ENOEXEC) else 127
    for fd in opened:
        os.close(fd)
    _tell(sock, {"pid": me})
    _write_small(os.path.join(req["dir"], "pid"), me)  # after the answer: relay has the pid by then
    if agent:
        _, raw = os.waitpid(agent, 0)
        status = os.waitstatus_to_exitcode(raw)
        status = 128 - status if status < 0 else status  # killed by a signal: what `sh` reports
    left = _anything_left()
    # The status on disk first (whoever reads the job's folder once relay calls it done finds it
    # there), then relay hears the end, without waiting for this process to go. With nothing left
    # under this process, nothing can appear: the job is over.
    _write_small(os.path.join(req["dir"], "exit"), status)
    _tell(sock, {"exit": status, "left": left})
    sock.close()
    if left:
        os.execv(sys.executable, [sys.executable, "-I", "-S", REAPER, str(status)])
    return status


def _anything_left() -> bool:
    """Whether any process is left under this one (its children list; True when it cannot be read)."""
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children", encoding="ascii") as fh:
            return bool(fh.read().strip())
    except OSError:
        return True


def _tell(sock: socket.socket, message: dict[str, Any]) -> None:
    """Send relay one line; relay may be gone (the job goes on: its files say what happened)."""
    with contextlib.suppress(OSError):
        sock.sendall(json.dumps(message).encode() + b"\n")


def _posix_spawn(path: str, argv: list[str], env: dict[str, str], fds: list[int]) -> int:
    return os.posix_spawn(
        path,
        argv,
        env,
        file_actions=[(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(fds)],
        setsigdef=AGENT_SIGDEF,
        setsigmask=(),
    )


def _which(name: str, search: str) -> str:
    """Where `sh` would find command `name` on `search` (the job's PATH); `name` itself if nowhere."""
    for folder in search.split(":"):
        candidate = os.path.join(folder or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return name


def _write_small(path: str, number: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, b"%d\n" % number)
    finally:
        os.close(fd)


def _make_spare(channel: socket.socket) -> None:
    """Fork one spare and send relay its pid with the relay end of its socket (see the module doc)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        pid = os.fork()
        if pid == 0:
            ours.close()
            channel.close()
            _spare(theirs)
        theirs.close()
        socket.send_fds(channel, [json.dumps({"pid": pid}).encode()], [ours.fileno()])
    finally:
        ours.close()
        theirs.close()


def _send(out: Any, reply: dict[str, Any]) -> None:
    out.write(json.dumps(reply).encode() + b"\n")
    out.flush()


def _request(line: bytes) -> Starting | dict[str, Any]:
    try:
        req = json.loads(line)
    except ValueError as exc:
        return {"errno": 0, "error": f"bad request: {exc}"}
    if not isinstance(req, dict):
        return {"errno": 0, "error": "bad request: not an object"}
    started = _spawn(req)  # pyright: ignore[reportUnknownArgumentType]
    if isinstance(started, dict):
        started["id"] = req.get("id")  # pyright: ignore[reportUnknownMemberType]
    return started


def _lines(data: bytes) -> tuple[list[bytes], bytes]:
    """The complete lines in `data` and what is left after the last newline."""
    *lines, rest = data.split(b"\n")
    return lines, rest


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGCHLD, _reap)
    out = sys.stdout.buffer
    channel: socket.socket | None = None
    if len(argv) == 2 and argv[0] == "--spares" and argv[1].isdigit():
        channel = socket.socket(fileno=int(argv[1]))
    _send(out, {"ready": True})
    pending: bytes = b""
    owed, spares_due = 0, 0.0  # spares asked for and not made yet; when to make them
    starting: dict[int, Starting] = {}
    reading = True
    while reading or starting:
        deadlines = [s.deadline for s in starting.values()] + ([spares_due] if owed and channel is not None else [])
        soonest = min(deadlines, default=None)
        timeout = None if soonest is None else max(0.0, soonest - time.monotonic())
        watched = ([0] if reading else []) + ([channel.fileno()] if channel is not None and reading else [])
        readable: list[int] = select.select(watched + list(starting), [], [], timeout)[0]
        for fd in readable:
            if channel is not None and fd == channel.fileno():
                asked = channel.recv(64)
                if not asked:
                    channel.close()
                    channel = None
                    continue
                if not owed:
                    spares_due = time.monotonic() + SPARE_DELAY_S
                owed += len(asked)
                continue
            if fd == 0:
                chunk = os.read(0, 65536)
                reading = bool(chunk)
                lines, pending = _lines(pending + chunk)
                for line in lines:
                    started = _request(line)
                    if isinstance(started, Starting):
                        starting[started.ready] = started
                    else:
                        _send(out, started)
                continue
            child = starting[fd]
            reply = child.feed(os.read(fd, 4096))
            if reply is not None:
                del starting[fd]
                os.close(fd)
                _send(out, reply | {"id": child.rid})
        now = time.monotonic()
        if owed and channel is not None and now >= spares_due:
            for _ in range(owed):
                with contextlib.suppress(OSError):
                    _make_spare(channel)
            owed = 0
        for fd, child in list(starting.items()):
            if now >= child.deadline:
                del starting[fd]
                os.close(fd)
                _send(out, child.expire() | {"id": child.rid})
        _reap()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
