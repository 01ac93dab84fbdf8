"""Opening relay.db: the home made private, a file that cannot be relay's moved aside, WAL, the migrations."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from relay.errors import ErrorCode, RelayError
from relay.osfiles import private_home
from relay.store.health import damage, damaged, move_aside, os_error, sqlite_error
from relay.store.migrations import migrate


def prepare_home(path: Path) -> None:
    """Create RELAY_HOME; a database file that cannot be relay's is moved aside (never silently replaced)."""
    try:
        private_home(path.parent)
    except OSError as exc:
        raise os_error(exc, path.parent) from None
    reason = damage(path)
    if reason is not None:
        raise damaged(path, reason, move_aside(path))


def open_sqlite(path: Path, busy_timeout_s: float) -> sqlite3.Connection:
    """Connect in WAL mode and migrate; failures come back as RelayErrors (a damaged file is moved aside).

    Relays starting together on a new home can find it "locked" in ways SQLite does not wait out (the switch
    to WAL, a snapshot gone stale while another migrates): the open is tried again within the busy timeout.
    """
    deadline = time.monotonic() + busy_timeout_s
    while True:
        try:
            return _open_once(path, busy_timeout_s)
        except RelayError as err:
            if err.code is not ErrorCode.STORE_BUSY or time.monotonic() >= deadline:
                raise
        time.sleep(0.05)


def _open_once(path: Path, busy_timeout_s: float) -> sqlite3.Connection:
    db: sqlite3.Connection | None = None
    try:
        db = sqlite3.connect(path, timeout=busy_timeout_s, check_same_thread=False, isolation_level=None)
        db.row_factory = sqlite3.Row
        db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")
        db.execute("PRAGMA foreign_keys = ON")
        migrate(db)
        return db
    except sqlite3.Error as exc:
        if db is not None:
            db.close()
        err = sqlite_error(exc, path, busy_timeout_s)
        if err.code is ErrorCode.STORE_DAMAGED and path.exists():
            raise damaged(path, str(exc), move_aside(path)) from None
        raise err from None
