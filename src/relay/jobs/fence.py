"""Self-fencing: a worker that cannot renew its lease stops its own jobs before anyone else may judge it lost.

The store gives each claim a lease, stamped by the store's own clock when the worker renews it (its
heartbeat, every third of `[queue] lease_s`). A worker measures its own side on CLOCK_MONOTONIC: the lease
it renewed by a heartbeat sent at `t` runs to at least `t + lease_s` in the store's view (the store stamps
it later than `t`), so once `t + lease_s * (1 - MARGIN)` has passed without a newer renewal, the lease may
be about to run out: the worker's jobs are killed (their process groups, SIGKILL) and nothing more of
them is recorded by this worker (their end is the store's to judge: `interrupted`, or queued again with
`retry="on_lost_worker"`). What kills them:

- the heart (a thread of the worker: not held up by the event loop) renews the lease and, once its renewal
  fails, tries again every RETRY_S;
- the engine's tending loop kills its fenced jobs at its next turn;
- when the store spans hosts, a keeper process (relay.runtime._fence_keeper) kills them at the deadline
  even when the worker itself cannot run (paused by SIGSTOP, a debugger, a swapped-out machine).

A process that was away from the store (its renewals or reads failed) does not judge other workers'
leases until it has heard from the store steadily for a third of a lease: they get their turn to renew.

A store that is down for everyone is not a reason to fence: when a renewal fails, the heart asks the store's
address whether anything serves it (`store_down`). Refused, or closed without a word (the server stopped, a
proxy in front of a stopped one), no process can judge a lease meanwhile, and none will until a third of a
lease after the store is back: the deadline is held that far past the last answer "down", so an outage of any
length ends no job whose worker renews once the store is back. No answer at all (a cut link, a host that
vanished) or a server that answers (it serves others, just not this worker): the fence runs its course.

On one machine's SQLite store a worker of the same host is judged by its pid, never by its lease: there
nothing is fenced by time (a lock held a moment would otherwise kill healthy jobs).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from urllib.parse import urlsplit

from relay.errors import RelayError
from relay.runtime import fencing, procinfo

logger = logging.getLogger(__name__)

# The margin kept before the lease it last renewed could run out in the store's view: a worker whose renewal
# failed kills its jobs this long before (a SIGKILL, seen by the keeper within a tenth of a second).
MARGIN_S = 1.0
# ... and at most this part of a short lease.
MARGIN = 0.2
# How long the heart waits for one renewal before it looks at the store's address meanwhile.
RENEW_WAIT_S = 1.0
# How long the probe of a store's address waits for an answer.
PROBE_S = 1.0
# PostgreSQL's SSLRequest: any server answers it with one byte, before any login.
_SSL_REQUEST = struct.pack("!ii", 8, 80877103)
# How soon the heart tries again after a renewal that failed (the store away, a link cut): well below a
# lease, so a store back within the lease finds every worker renewed at once.
RETRY_S = 0.5
# The folder of RELAY_HOME with one fence file per worker process of this home.
FENCE_DIR = "fences"


class Fence:
    """One worker's view of its own lease: when it was last renewed, and the jobs it guards."""

    def __init__(self, lease_s: float, home: Path | None, *, timed: bool, marked: bool = True) -> None:
        self.lease_s = lease_s
        self.timed = timed  # False: nothing is fenced by time (a front, a worker of one machine's SQLite store)
        # False: no keeper marks this store's jobs fenced (a SQLite store: keepers are started for stores across hosts
        # only), so a job's folder is not looked at for the mark.
        self.marked = marked
        self._lock = threading.Lock()
        self._writing = threading.Lock()  # held across a write of the fence file
        # A worker starting holds nothing yet; what it claims is leased afresh.
        self.deadline = time.monotonic() + self.window
        self.steady_since: float | None = None  # time.monotonic() of the first contact after the last failure
        self._jobs: dict[str, Path] = {}
        # The claims of the jobs it fenced, by job: their end (interrupted, or queued again) is written by the first
        # process that can, this one included once it hears from the store again.
        self.lost_claims: dict[str, int] = {}
        self.path: Path | None = None
        if home is not None and timed:
            folder = home / FENCE_DIR
            folder.mkdir(parents=True, exist_ok=True)
            self.path = folder / f"{os.getpid()}-{secrets.token_hex(4)}.json"
        self._keeper: subprocess.Popen[bytes] | None = None

    @property
    def window(self) -> float:
        """How long after a renewal was sent the worker may go on without a newer one."""
        return self.lease_s - min(MARGIN_S, self.lease_s * MARGIN)

    # contact with the store ----------------------------------------------------------------

    def renewed(self, sent_at: float) -> None:
        """A heartbeat sent at `sent_at` (time.monotonic()) was taken by the store: every lease runs again."""
        with self._lock:
            self.deadline = max(self.deadline, sent_at + self.window)
            self._heard()
        self.write()

    def hold(self, until: float) -> None:
        """The store is down for every process (jobs/fence.py, store_down): none can judge a lease before `until`."""
        with self._lock:
            self.deadline = max(self.deadline, until)
        self.write()

    def heard(self) -> None:
        """A read of the store succeeded (a process with no lease of its own: a front)."""
        with self._lock:
            self._heard()

    def _heard(self) -> None:
        if self.steady_since is None:
            self.steady_since = time.monotonic()

    def lost(self) -> None:
        """A renewal or a read failed: the store is away from this process."""
        with self._lock:
            self.steady_since = None

    def steady(self, for_s: float) -> bool:
        """Whether this process has heard from the store without a failure for `for_s` seconds."""
        since = self.steady_since
        return since is not None and time.monotonic() - since >= for_s

    def passed(self) -> bool:
        return self.timed and time.monotonic() > self.deadline

    # the jobs it guards ---------------------------------------------------------------------

    def guard(self, job_id: str, folder: Path) -> None:
        with self._lock:
            self._jobs[job_id] = folder
        self.write()

    def release(self, job_id: str) -> None:
        with self._lock:
            gone = self._jobs.pop(job_id, None)
        if gone is not None:
            self.write()

    def guarded(self) -> dict[str, Path]:
        with self._lock:
            return dict(self._jobs)

    def cut(self, job_id: str, folder: Path) -> bool:
        """Whether the job's run is past its fence: this worker's lease may have run out, or the keeper killed it."""
        return (job_id in self._jobs and self.passed()) or (self.marked and (folder / fencing.FENCED_MARK).exists())

    def enforce(self) -> list[str]:
        """Past the deadline: SIGKILL the process group of every guarded job and mark it fenced; their ids."""
        if not self.passed():
            return []
        jobs = self.guarded()
        killed = set(fencing.kill_jobs([str(f) for f in jobs.values()]))
        return [job_id for job_id, folder in jobs.items() if str(folder) in killed]

    # the fence file and its keeper ------------------------------------------------------------

    def write(self) -> None:
        """Write the fence file from the fence as it is now. One writer at a time (the heart's renewals, the loop's
        claims and releases): two at once would share the file's temporary name, and the one replacing the file
        last could carry the older state (a job the keeper then never kills)."""
        if self.path is None:
            return
        with self._writing:
            with self._lock:
                deadline, jobs = self.deadline, list(self._jobs.values())
            try:
                fencing.write_fence(self.path, deadline, jobs)
            except OSError as exc:  # the home cannot be written: the in-process fence still holds
                logger.warning("fence file %s not written: %s", self.path, exc)

    def start_keeper(self) -> None:
        if self.path is None or self._keeper is not None:
            return
        self.write()
        try:
            self._keeper = fencing.start_keeper(self.path)
        except OSError as exc:
            logger.warning("fence keeper not started: %s", exc)

    def close(self) -> None:
        if self._keeper is not None:
            fencing.stop_keeper(self._keeper)
            self._keeper = None
        if self.path is not None:
            with contextlib.suppress(OSError):
                self.path.unlink(missing_ok=True)


def sweep(home: Path, mine: Path | None, keep: Callable[[Path], bool]) -> list[Path]:
    """The jobs an earlier life of a worker of this home left running: its fence file remains, its process is gone.

    Each job folder it guarded whose process still runs is killed (and marked fenced) unless `keep(folder)`
    (the job was adopted again: it is live here); the stale file goes. The folders killed."""
    killed: list[Path] = []
    for path in sorted((home / FENCE_DIR).glob("*.json")):
        if path == mine:
            continue
        try:
            pid = int(path.name.split("-", 1)[0])
        except ValueError:
            continue
        if procinfo.is_alive(pid, None):
            continue  # another worker of this home, alive: its jobs are its own
        found = fencing.read_fence(path)
        folders = [Path(f) for f in found[1]] if found is not None else []
        stale = [f for f in folders if not keep(f) and not (f / "exit").exists()]
        killed += [Path(f) for f in fencing.kill_jobs([str(f) for f in stale])]
        with contextlib.suppress(OSError):
            path.unlink()
    return killed


def store_down(url: str, timeout: float = PROBE_S) -> bool:
    """Whether the PostgreSQL server at `url` is down for everyone: its address refuses connections, or takes one
    and closes it without a word (a proxy whose server is gone). False when the server answers (it serves others),
    when nothing answers at all (this process may be cut off from it), or when the URL names no host and port."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port or 5432
    except ValueError:
        return False
    if not host or host.startswith("/") or "," in parts.netloc:
        return False
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(_SSL_REQUEST)
            return sock.recv(1) == b""
    except (ConnectionRefusedError, ConnectionResetError, BrokenPipeError):
        return True  # refused, or taken and dropped without a word
    except OSError:
        return False


class Heart:
    """The thread that renews this worker's leases (or, for a front, checks that the store answers)."""

    def __init__(
        self, fence: Fence, renew: Callable[[], bool], beat_s: float, down: Callable[[], bool] | None = None
    ) -> None:
        self._fence = fence
        self._renew = renew  # True: the store took the renewal
        self._down = down  # True: the store is down for every process (store_down)
        self._beat_s = beat_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="relay-heart", daemon=True)
        # A renewal runs on a thread of its own, waited for RENEW_WAIT_S at most: a store call that hangs (a pool
        # waiting for a server that went away) must not keep the heart from looking at the store's address.
        self._calls = ThreadPoolExecutor(max_workers=1, thread_name_prefix="relay-renew")
        self._pending: tuple[float, Future[bool]] | None = None
        self.beats = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self._beat_s + RENEW_WAIT_S + 1)
        self._calls.shutdown(wait=False, cancel_futures=True)

    def _attempt(self) -> tuple[float, bool]:
        """Renew (or wait on the renewal still under way): when it was sent, and whether the store took it."""
        if self._pending is None:
            self._pending = (time.monotonic(), self._calls.submit(self._renew))
        sent, call = self._pending
        try:
            ok = call.result(timeout=RENEW_WAIT_S)
        except FutureTimeout:
            return sent, False  # still under way: looked at again next turn
        except RelayError as err:
            ok = False
            logger.info("lease renewal failed: %s", err.message)
        except Exception:  # a bug must not stop the heart: the fence would then kill every job
            logger.exception("lease renewal failed")
            ok = False
        self._pending = None
        return sent, ok

    def _run(self) -> None:
        while not self._stop.is_set():
            sent, ok = self._attempt()
            if ok:
                self._fence.renewed(sent)
                self.beats += 1
                wait = max(self._beat_s - (time.monotonic() - sent), 0.0)
            else:
                self._fence.lost()
                if self._down is not None and self._down():
                    # No one judges a lease before a beat after the store is back: the fence holds till then.
                    self._fence.hold(time.monotonic() + self._beat_s - min(MARGIN_S, self._beat_s * MARGIN))
                wait = RETRY_S
            self._stop.wait(wait)
