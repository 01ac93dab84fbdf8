"""File locks, private descriptors and whole writes, the same call on POSIX and Windows (where relay runs without CLI jobs)."""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

# On Windows a lock is taken on the file's first byte; a busy lock is retried this often, this long.
WINDOWS_LOCK_RETRY_S = 0.05
WINDOWS_LOCK_WAIT_S = 30.0


def lock(fd: int, shared: bool = False) -> None:
    """Block until this process holds the lock on `fd` (shared for readers where the platform has it).

    Released when the descriptor is closed. Windows has no shared lock: readers take it exclusively.
    """
    if sys.platform == "win32":
        import msvcrt

        deadline = time.monotonic() + WINDOWS_LOCK_WAIT_S
        os.lseek(fd, 0, os.SEEK_SET)
        while True:
            try:
                msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(WINDOWS_LOCK_RETRY_S)
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)


def private_dup(fd: int) -> int:
    """A duplicate of `fd` numbered 3 or above that child processes do not inherit."""
    if sys.platform == "win32":
        return os.dup(fd)  # not inheritable by default
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to `fd` (os.write may take less than it is given)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# RELAY_HOME is the user's alone (prompts, outputs, keys, the audit log): nobody else may enter it.
PRIVATE_DIR_MODE = 0o700
# The folders relay keeps in RELAY_HOME (job files, downstream servers' stderr, compat profiles' records, caches).
RELAY_DIRS = ("jobs", "gateway", "compat", "cache")


def private_home(home: Path) -> None:
    """Create RELAY_HOME private (0700). A home others can read (made before this rule) is made private:
    group and other permissions are removed from it, from each entry in it, and from everything in the
    folders relay keeps there (`RELAY_DIRS`); symbolic links are left alone."""
    home.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    if sys.platform == "win32" or stat.S_IMODE(home.stat().st_mode) & 0o077 == 0:
        return
    for entry in home.iterdir():
        private(entry)
        if entry.name in RELAY_DIRS and not entry.is_symlink() and entry.is_dir():
            for root, dirs, files in os.walk(entry):
                for name in (*dirs, *files):
                    private(Path(root) / name)
    private(home)


def private(path: Path) -> None:
    """Remove group and other permissions from one file or folder (never through a symbolic link).

    A file gone meanwhile, or one that cannot be changed (a read-only home, another owner), is left as
    it is: the store that opens it reports what really stops it."""
    if sys.platform == "win32":
        return
    try:
        info = os.lstat(path)
        if not stat.S_ISLNK(info.st_mode) and stat.S_IMODE(info.st_mode) & 0o077:
            os.chmod(path, stat.S_IMODE(info.st_mode) & 0o700)
    except OSError:
        pass


def expand_home(raw: str) -> Path:
    """`raw` with a leading ~ or ~user expanded; as given where that user is unknown (it is then a relative
    path, which every caller refuses with its own message, instead of a RuntimeError)."""
    path = Path(raw)
    try:
        return path.expanduser()
    except RuntimeError:
        return path


def is_dir(path: Path) -> bool:
    """`path.is_dir()`, False where the system refuses the name itself (too long, a NUL byte) instead of raising."""
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False
