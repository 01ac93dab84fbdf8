"""Job shims made ahead: a job starts by handing its request to a spare that is already a subreaper.

On the Linux runtime a job's shim is a child subreaper leading its own session (see launcher.py).
Making one costs a fork, a prctl, a setsid and (with the `sh` shim) an exec before the agent's own
spawn can even begin: milliseconds on the way to every reply. The spawn helper (`_zygote.py`) can
instead fork spares ahead of need, each already all of that, waiting on a socket for one job. This
module is relay's side: a pool kept topped up from the helper's spare channel (a SOCK_SEQPACKET
socket; each spare arrives as `{"pid": N}` with its socket attached), and the hand-over of one job to
one spare. The spare does what the `sh` shim does (pid file, exit status file, the reaper when
processes are left), so everything downstream (exit watch, kill, re-attach after a restart) is the
same whichever way a job started.

The pool starts small (MIN_SPARES) and grows when a job finds it empty (a burst of jobs: the next
burst finds spares ready), up to MAX_SPARES, and shrinks back as jobs keep finding it full; an idle
spare costs ~1.1 MB of memory of its own (the rest it shares with the helper it was forked from).
Keeping a spare for every job slot from the start was measured and dropped: a burst of 20 jobs ended
no sooner (1.07-1.10 s either way), since 2 cores, not the spawns, bound it. A spare that went away while
idle is dropped when taken (its socket reads EOF) and the next one is tried; with none ready the
job starts the ordinary way, through the helper.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import select
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# How many spares to keep ready at first, and at most (each is a forked copy of the helper,
# ~1 MB of its own memory).
MIN_SPARES = 2
MAX_SPARES = 24
# A pool grown by a burst shrinks back one spare per job taken once no job found it empty for this long.
SHRINK_AFTER_S = 120.0
# How long relay waits for a spare's answer to a job (its spawn of the agent) before giving up.
SPARE_REPLY_S = 10.0


class SpareLost(Exception):
    """The spare took the job but gave no answer: whether the agent started is unknown."""


class SpareGone(Exception):
    """The spare went before it had read the whole job: the job did not start (try another way).

    Linux tells this apart: a unix socket closed with data still unread resets its peer's
    connection (ECONNRESET), where one that read everything closes it (EOF); a send to a socket
    already closed fails with EPIPE. A spare acts only once it has read the whole request.
    """


@dataclass
class Spare:
    """One spare shim: its pid (the job's pid once it runs) and relay's end of its socket."""

    pid: int
    sock: socket.socket

    def usable(self) -> bool:
        """Still waiting for a job: nothing to read on its socket (EOF would mean it went)."""
        try:
            return not select.select([self.sock], [], [], 0)[0]
        except (OSError, ValueError):
            return False

    def run(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Hand the job over; the spare's answer ({"pid"}, {"cwd_now", ...} or {"errno", "error"}). SpareLost if none.

        Once the job runs ({"pid"}) the socket stays open: the spare says there how the job ended
        (`Notice`); otherwise it is closed here.
        """
        started = False
        try:
            try:
                self.sock.sendall(json.dumps(request).encode() + b"\n")
                line = read_line(self.sock.fileno(), time.monotonic() + SPARE_REPLY_S, b"")[0]
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise SpareGone(str(exc)) from None
            if line is None:
                raise SpareLost(f"no answer within {SPARE_REPLY_S:g} s")
            reply = json.loads(line)
            if not isinstance(reply, dict):
                raise SpareLost("the spare's answer is not an object")
            started = "pid" in reply
            return reply  # pyright: ignore[reportUnknownVariableType]
        except (OSError, ValueError) as exc:
            raise SpareLost(str(exc)) from None
        finally:
            if not started:
                self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def read_line(fd: int, deadline: float, data: bytes) -> tuple[bytes | None, bytes]:
    """The next line from `fd` (a socket or a pipe), newline included, after what was already read
    (`data`), and what was read past it. None (with what was read) if no whole line came by `deadline`;
    b"" at EOF."""
    while b"\n" not in data:
        if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            return None, data
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"", b""
        data += chunk
    line, _, rest = data.partition(b"\n")
    return line + b"\n", rest


class Notice:
    """How a job started by a spare ended, as the spare tells it on its socket (before it goes).

    `ended` once told: `code` is the agent's exit status and `clean` means nothing was left under
    the spare (the job is over, its status on disk; the spare only exits). A spare that closed
    its socket without telling, or told something else, leaves `code` None: watch its pid instead.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.ended = False
        self.code: int | None = None
        self.clean = False
        self._data = b""

    def fileno(self) -> int:
        return self.sock.fileno()

    def read(self) -> None:
        """Read what is there (call when the socket is readable); sets `ended` once the spare spoke or went."""
        if self.ended:
            return
        try:
            line, self._data = read_line(self.sock.fileno(), time.monotonic(), self._data)
        except OSError:
            line = b""
        if line is None:
            return
        self.ended = True
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            told: Any = json.loads(line) if line else {}
            if isinstance(told.get("exit"), int):
                self.code = int(told["exit"])
                self.clean = told.get("left") is False
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class Pool:
    """Spares received from one helper over `channel`, kept topped up by a background reader."""

    def __init__(self, channel: socket.socket, want: int = MIN_SPARES) -> None:
        self._channel = channel
        self._lock = threading.Lock()
        self._ready: collections.deque[Spare] = collections.deque()
        self._asked = 0
        self._want = want
        self._last_miss = 0.0
        self._closed = False
        threading.Thread(target=self._receive, name="relay-spares", daemon=True).start()
        with self._lock:
            self._top_up()

    def take(self) -> Spare | None:
        """A spare still waiting for a job, or None (the pool then grows for next time)."""
        with self._lock:
            found: Spare | None = None
            while self._ready:
                spare = self._ready.popleft()
                if spare.usable():
                    found = spare
                    break
                spare.close()
            now = time.monotonic()
            if found is None:
                self._want = min(MAX_SPARES, self._want + 1)
                self._last_miss = now
            elif self._want > MIN_SPARES and now - self._last_miss > SHRINK_AFTER_S:
                self._want -= 1
                if len(self._ready) > self._want:
                    self._ready.pop().close()
            self._top_up()
            return found

    def ready(self) -> int:
        with self._lock:
            return len(self._ready)

    def close(self) -> None:
        """Stop asking for spares and let the idle ones go (each exits at EOF on its socket)."""
        with self._lock:
            self._closed = True
            spares, self._ready = list(self._ready), collections.deque()
        for spare in spares:
            spare.close()
        with contextlib.suppress(OSError):
            self._channel.shutdown(socket.SHUT_RDWR)

    def _top_up(self) -> None:
        """Ask the helper for what is missing (under the lock)."""
        missing = self._want - len(self._ready) - self._asked
        if self._closed or missing <= 0:
            return
        try:
            # Never blocks (this runs under the lock takers wait on): a helper too busy to read is asked again later.
            self._channel.send(b"+" * missing, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        except OSError:
            self._closed = True
            return
        self._asked += missing

    def _receive(self) -> None:
        while True:
            try:
                message, fds, _flags, _addr = socket.recv_fds(self._channel, 256, 4, socket.MSG_CMSG_CLOEXEC)
            except OSError:
                break
            if not message and not fds:
                break  # the helper went
            spare = self._spare(message, fds)
            with self._lock:
                self._asked = max(0, self._asked - 1)
                if spare is None:
                    continue
                if self._closed:
                    spare.close()
                    continue
                self._ready.append(spare)
        with self._lock:
            self._closed = True
        with contextlib.suppress(OSError):
            self._channel.close()

    @staticmethod
    def _spare(message: bytes, fds: list[int]) -> Spare | None:
        try:
            pid = int(json.loads(message)["pid"])
        except (ValueError, KeyError, TypeError):
            pid = 0
        if pid <= 0 or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            return None
        return Spare(pid, socket.socket(fileno=fds[0]))
