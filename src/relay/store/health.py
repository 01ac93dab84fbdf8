"""Storage failures as results: SQLite and OS errors translated to relay codes, a damaged db moved aside, checks.

Every way the store can fail on an operator's machine (disk full, read-only home, a damaged or
truncated file, another process holding the write lock) becomes a `RelayError` with a hint, here,
in one place; nothing else in relay needs to know SQLite's error names.
"""

from __future__ import annotations

import errno
import shutil
import sqlite3
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from relay.errors import ErrorCode, RelayError

# A 0-byte relay.db younger than this may be one another relay is creating right now (SQLite
# writes the header on its first write); older, with no WAL beside it, it is damaged.
EMPTY_DB_GRACE_S = 5.0
# Below this much free space on RELAY_HOME's disk, `relay doctor` warns and a failed job whose
# output stopped is reported as DISK_FULL.
LOW_SPACE_BYTES = 1 << 20

_HEADER = b"SQLite format 3\x00"
_BUSY = ("SQLITE_BUSY", "SQLITE_LOCKED")
_DAMAGED = ("SQLITE_CORRUPT", "SQLITE_NOTADB")
_READONLY = ("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_AUTH")


def sqlite_error(exc: sqlite3.Error, path: Path, busy_timeout_s: float) -> RelayError:
    """The RelayError for a SQLite failure on the database at `path`."""
    name = str(getattr(exc, "sqlite_errorname", "") or "")
    text = str(exc)
    if name.startswith(_BUSY) or "locked" in text or "busy" in text:
        return RelayError(
            ErrorCode.STORE_BUSY,
            f"{path.name} stayed locked by another process for {busy_timeout_s:g} s (store_busy_timeout)",
            f"another program holds a write transaction on {path}: close it (e.g. an open `sqlite3` shell) and retry",
        )
    if name.startswith("SQLITE_FULL") or "disk is full" in text:
        return disk_full(path.parent)
    if name.startswith(_DAMAGED) or "malformed" in text or "not a database" in text:
        return damaged(path, text, None)
    if name.startswith(_READONLY) or "readonly" in text or "unable to open" in text:
        return read_only(path.parent, text)
    if name.startswith("SQLITE_IOERR") or "disk I/O error" in text:
        return RelayError(
            ErrorCode.DISK_FULL,
            f"could not write {path.name}: {text}",
            f"check the disk holding {path.parent} (free space: df -h {path.parent}; errors: dmesg)",
        )
    return RelayError(ErrorCode.INTERNAL, f"{type(exc).__name__}: {text}", "report this as a relay bug")


def os_error(exc: OSError, where: Path) -> RelayError:
    """The RelayError for a failed file operation under RELAY_HOME (ENOSPC, EROFS, EACCES ...)."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return disk_full(where)
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return read_only(where, exc.strerror or str(exc))
    return RelayError(
        ErrorCode.DISK_FULL if exc.errno == errno.EIO else ErrorCode.INTERNAL,
        f"could not write under {where}: {exc.strerror or exc}",
        f"check the disk holding {where} (df -h {where}; dmesg)",
    )


def disk_full(where: Path) -> RelayError:
    return RelayError(
        ErrorCode.DISK_FULL,
        f"the disk holding {where} is full",
        f"free space there (df -h {where}), or point RELAY_HOME at a disk with room; then run the job again",
    )


def read_only(where: Path, detail: str) -> RelayError:
    return RelayError(
        ErrorCode.STORE_READONLY,
        f"relay cannot write to {where}: {detail}",
        "make it writable (a read-only mount? its permissions?) or set RELAY_HOME to a writable directory",
    )


def damaged(path: Path, detail: str, moved_to: Path | None) -> RelayError:
    if moved_to is None:
        return RelayError(
            ErrorCode.STORE_DAMAGED,
            f"{path} is damaged: {detail}",
            "stop every relay using it, then run `relay doctor`; it checks the file and says how to recover it",
        )
    return RelayError(
        ErrorCode.STORE_DAMAGED,
        f"{path} was damaged ({detail}); relay moved it aside to {moved_to.name} and will start a new one",
        f"to recover what it held: sqlite3 {moved_to} .recover | sqlite3 {path.with_name('recovered.db')}; "
        f"then stop relay and move recovered.db to {path.name}",
    )


def damage(path: Path) -> str | None:
    """Why the file at `path` cannot be relay's database (None: it looks sound or does not exist).

    Cheap checks only (header and size, no page scan), so every start can afford them; `relay
    doctor` runs SQLite's full integrity check.
    """
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    except OSError:
        return None  # unreadable: opening it reports the real reason
    if st.st_size == 0:
        fresh = time.time() - st.st_mtime < EMPTY_DB_GRACE_S
        wal = path.with_name(path.name + "-wal")
        return None if fresh or wal.exists() else "the file is empty (0 bytes)"
    try:
        with path.open("rb") as fh:
            head = fh.read(100)
    except OSError:
        return None
    if len(head) < 100 or not head.startswith(_HEADER):
        return "the file is not an SQLite database"
    page_size = struct.unpack(">H", head[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    change, pages, valid_for = (struct.unpack(">I", head[i : i + 4])[0] for i in (24, 28, 92))
    # Only when no connection is open (the WAL file exists while any is): a checkpoint in another
    # process writes the header's page count before it extends the file.
    in_use = path.with_name(path.name + "-wal").exists()
    if not in_use and pages and change == valid_for and st.st_size < pages * page_size:
        return f"the file is truncated ({st.st_size} bytes of {pages * page_size})"
    return None


def move_aside(path: Path) -> Path:
    """Rename a damaged database (and its -wal/-shm) to `<name>.damaged-<UTC time>`; returns the new path."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
    path.rename(target)
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            side.rename(target.with_name(target.name + suffix))
    return target


@dataclass(frozen=True)
class StoreCheck:
    """What `relay doctor` reports about relay.db: integrity and free space."""

    path: str
    integrity: str  # "ok", "missing", or the first problem SQLite's integrity check found
    free_bytes: int | None

    @property
    def ok(self) -> bool:
        low = self.free_bytes is not None and self.free_bytes < LOW_SPACE_BYTES
        return self.integrity in ("ok", "missing") and not low


def check_store(path: Path) -> StoreCheck:
    """Run SQLite's integrity check on the database (read-only) and measure free space beside it."""
    try:
        free: int | None = shutil.disk_usage(path.parent if path.parent.exists() else Path("/")).free
    except OSError:
        free = None
    reason = damage(path)
    if reason is not None:
        return StoreCheck(str(path), reason, free)
    if not path.exists():
        return StoreCheck(str(path), "missing", free)
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            rows = db.execute("PRAGMA integrity_check(5)").fetchall()
        finally:
            db.close()
        result = "; ".join(str(r[0]) for r in rows)
    except sqlite3.Error as exc:
        result = str(exc)
    return StoreCheck(str(path), "ok" if result == "ok" else result, free)


def low_space(where: Path) -> bool:
    """Whether the disk holding `where` has less than LOW_SPACE_BYTES free (False if it cannot be measured)."""
    try:
        return shutil.disk_usage(where if where.exists() else where.parent).free < LOW_SPACE_BYTES
    except OSError:
        return False


# Space relay sets aside in RELAY_HOME (a file of zeros) and gives back when the disk is full, so
# the end of a job (its final row, a few pages) can still be written.
RESERVE_BYTES = 512 * 1024
RESERVE_NAME = ".space-reserve"


def make_reserve(home: Path) -> None:
    """Set RESERVE_BYTES aside in `home` (best effort: a disk already full simply gets none)."""
    path = home / RESERVE_NAME
    try:
        if path.exists() and path.stat().st_size >= RESERVE_BYTES:
            return
        with path.open("wb") as fh:
            fh.write(b"\0" * RESERVE_BYTES)
    except OSError:
        path.unlink(missing_ok=True)


def release_reserve(home: Path) -> bool:
    """Give the reserved space back (the disk is full); True if there was any to give."""
    path = home / RESERVE_NAME
    try:
        path.unlink()
    except OSError:
        return False
    return True
