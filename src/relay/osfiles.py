"""File locks, private descriptors and whole writes, the same call on POSIX and Windows (where relay runs without CLI jobs)."""

from __future__ import annotations

import os
import sys
import time

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
