"""A small helper process that starts job shims as child subreapers, cheaply.

Making the shim a subreaper takes a prctl() between fork and exec. Python can only do that through
a preexec_fn, which forces a real fork() of the calling process: in relay's large server process
that costs milliseconds per job. This helper is small, so its fork is cheap. relay starts it once,
sends one JSON request per line on its stdin ({argv, env, cwd, stdin, stdout, stderr}: paths for
the three streams, stdin null for /dev/null; argv[0] an absolute path) and reads one JSON reply per
line: {"pid": N} as soon as the child is forked (relay does not wait for its exec), or
{"errno": N, "error": "..."} when the spawn failed (a missing cwd, an unopenable file). It exits when relay closes its stdin; the jobs
it started keep running in their own sessions. Run as `python -I -S _zygote.py`; stdlib only.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import signal
import sys
from types import FrameType
from typing import Any

PR_SET_CHILD_SUBREAPER = 36
# Upper bound of the descriptors a child closes before exec (only 0, 1 and 2 reach the job).
MAX_FD = 65536

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


def _exec_child(req: dict[str, Any], fds: tuple[int, int, int]) -> None:
    """In the forked child: become the subreaper, lead a new session, wire the streams, exec. Never returns."""
    try:
        become_subreaper()
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, MAX_FD)
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)  # Python's own dispositions must not reach the job
        if req["cwd"]:
            os.chdir(req["cwd"])
        argv: list[str] = req["argv"]
        os.execve(argv[0], argv, req["env"])
    except BaseException as exc:  # the child must never return into the helper's loop
        with contextlib.suppress(OSError):
            os.write(2, f"relay: could not start {req.get('argv', ['?'])[0]}: {exc}\n".encode())
    finally:
        os._exit(127)


def _spawn(req: dict[str, Any]) -> dict[str, Any]:
    """Fork and exec one job; reply with its pid at once (what can fail is checked before the fork)."""
    opened: list[int] = []
    try:
        argv = req["argv"]
        if not argv or not os.path.isabs(argv[0]):
            raise ValueError("argv[0] must be an absolute path")
        if req["cwd"] and not os.path.isdir(req["cwd"]):
            raise FileNotFoundError(errno.ENOENT, "no such directory", req["cwd"])
        opened.append(os.open(req["stdin"] or os.devnull, os.O_RDONLY | os.O_CLOEXEC))
        for key in ("stdout", "stderr"):
            opened.append(os.open(req[key], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644))
        pid = os.fork()
        if pid == 0:
            _exec_child(req, (opened[0], opened[1], opened[2]))
        return {"pid": pid}
    except OSError as exc:
        return {"errno": exc.errno or 0, "error": str(exc)}
    except (KeyError, TypeError, ValueError) as exc:
        return {"errno": 0, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        for fd in opened:
            os.close(fd)


def main() -> int:
    signal.signal(signal.SIGCHLD, _reap)
    out = sys.stdout.buffer
    out.write(b'{"ready": true}\n')
    out.flush()
    for line in sys.stdin.buffer:
        try:
            req = json.loads(line)
        except ValueError as exc:
            reply: dict[str, Any] = {"errno": 0, "error": f"bad request: {exc}"}
        else:
            reply = _spawn(req)
        out.write(json.dumps(reply).encode() + b"\n")
        out.flush()
        _reap()
    return 0


if __name__ == "__main__":
    sys.exit(main())
