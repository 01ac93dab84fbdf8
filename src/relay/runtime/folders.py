"""Job folders made ahead of time: a new job's folder and its empty files are one rename away.

A new file or folder costs an inode: a few microseconds on most disks, 0.3-0.6 ms of kernel time on
some (the ext4 of the VM relay's benchmarks run on), and a job makes eight of them on the way to its
reply (its folder, the spawn marker, stdout, stderr, pid, exit, transcript, result). A pool keeps a
few spare folders holding those files empty, made by a thread of low priority off any job's way; a job takes
one with a rename (microseconds). Empty files read as absent: an empty pid or exit file is "not
written yet" (JobFiles.read_pid / read_exit_code), empty output is no output. The spawn marker waits
as `.spawning` and is renamed to `spawning` just before the spawn (`mark_spawning`).

A spare is made under a `.spare-tmp-` name and renamed to `.spare-` once whole, so a folder another
relay (or a killed one) left is taken only when complete; two processes taking the same spare
cannot both win the rename. When no spare is ready the job makes its folder itself, as before.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import threading
import time
from pathlib import Path

# Spare folders kept ready per jobs folder (a sync delegate takes one at a time; a burst beyond this
# makes its folders directly while the pool refills).
SPARES = 4
SPARE_PREFIX = ".spare-"
MAKING_PREFIX = ".spare-tmp-"
# How much lower the priority of the thread that makes spares is (a nice value, 0-19).
FILL_NICE = 10
# A spare still being made after this long was left by a relay killed while making it: removed.
ABANDONED_S = 600.0
# The spawn marker as made ahead: renamed to `spawning` right before the job's process is spawned.
MARKER = "spawning"
PENDING_MARKER = ".spawning"
# The files a job writes (JobFiles), made empty ahead of time.
FILES = ("stdout", "stderr", "pid", "exit", "transcript.txt", "result.txt", PENDING_MARKER)


class SparePool:
    """Spare job folders under one jobs folder. Thread-safe; `fill` blocks (`fill_behind` runs it in a thread)."""

    def __init__(self, jobs_dir: Path, size: int = SPARES) -> None:
        self.jobs_dir = jobs_dir
        self.size = size
        self._spares: list[Path] = []
        self._lock = threading.Lock()
        self._filling = False
        self._adopted = False
        self._behind: threading.Thread | None = None

    def take(self, dest: Path) -> bool:
        """Move a spare folder to `dest` (which must not exist yet); False when none is ready."""
        while True:
            with self._lock:
                if not self._spares:
                    return False
                spare = self._spares.pop()
            try:
                os.rename(spare, dest)
                return True
            except FileNotFoundError:
                continue  # taken by another relay sharing this folder: try the next one
            except OSError:
                return False

    def fill_behind(self) -> None:
        """`fill` in a thread of its own at a lower priority (nice FILL_NICE): making a folder's files is the kernel's
        CPU (0.5-0.7 ms a file on some disks, eight a job), which must not compete with the jobs and the replies it
        is made for (a burst's ends each start one)."""
        if self.wants_fill():
            thread = threading.Thread(target=self._fill_low, name="relay-folders", daemon=True)
            self._behind = thread
            thread.start()

    def wait_filled(self, timeout: float) -> None:
        """Wait (bounded) for the last `fill_behind` to end: nothing is made in the folder once its relay stopped."""
        thread = self._behind
        if thread is not None:
            thread.join(timeout)

    def _fill_low(self) -> None:
        with contextlib.suppress(OSError, AttributeError):  # a system without per-thread priorities fills as it is
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), FILL_NICE)
        self.fill()

    def wants_fill(self) -> bool:
        with self._lock:
            return not self._filling and len(self._spares) < self.size

    def fill(self) -> None:
        """Make spares up to the pool's size; a failure (disk full, read-only home) leaves the pool short."""
        with self._lock:
            if self._filling:
                return
            self._filling = True
        try:
            if not self._adopted:
                self._adopted = True
                self._adopt()
            while True:
                with self._lock:
                    if len(self._spares) >= self.size:
                        return
                spare = self._make()
                with self._lock:
                    self._spares.append(spare)
        except OSError:
            return
        finally:
            with self._lock:
                self._filling = False

    def _adopt(self) -> None:
        """Whole spares an earlier relay left (killed before it used them); half-made ones long abandoned go."""
        found: list[Path] = []
        with contextlib.suppress(OSError), os.scandir(self.jobs_dir) as entries:
            for entry in entries:
                if not entry.name.startswith(SPARE_PREFIX) or not entry.is_dir(follow_symlinks=False):
                    continue
                if not entry.name.startswith(MAKING_PREFIX):
                    found.append(Path(entry.path))
                elif time.time() - entry.stat(follow_symlinks=False).st_mtime > ABANDONED_S:
                    shutil.rmtree(entry.path, ignore_errors=True)
        with self._lock:
            self._spares.extend(found[: max(0, self.size - len(self._spares))])

    def _make(self) -> Path:
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        token = secrets.token_hex(8)
        making = self.jobs_dir / f"{MAKING_PREFIX}{token}"
        os.mkdir(making)
        try:
            for name in FILES:
                os.close(os.open(making / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644))
            spare = self.jobs_dir / f"{SPARE_PREFIX}{token}"
            os.rename(making, spare)
        except OSError:
            for name in FILES:
                with contextlib.suppress(OSError):
                    os.unlink(making / name)
            with contextlib.suppress(OSError):
                os.rmdir(making)
            raise
        return spare


def mark_spawning(job_dir: Path) -> None:
    """Leave the spawn marker in a job's folder: a rename of the one made ahead, else a new file."""
    try:
        os.rename(job_dir / PENDING_MARKER, job_dir / MARKER)
    except FileNotFoundError:
        (job_dir / MARKER).touch()
