"""Connections to relay.db for the stores beside the job store (hook sessions, gateway servers, workspaces)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from relay.osfiles import private_home
from relay.store.migrations import migrate
from relay.store.release import connect


def open_side(db_path: Path, busy_timeout_s: float, *, keep_statements: bool = False) -> sqlite3.Connection:
    """A migrated WAL connection whose rows read by name; autocommit, usable from any thread.

    `keep_statements`: cache prepared statements (for stores whose values stay small); without it no
    statement keeps a large bound value alive (store/release.py).
    """
    private_home(db_path.parent)
    if keep_statements:
        db = sqlite3.connect(db_path, timeout=busy_timeout_s, check_same_thread=False, isolation_level=None)
    else:
        db = connect(db_path, timeout=busy_timeout_s)
    db.row_factory = sqlite3.Row
    db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
    db.execute("PRAGMA journal_mode = WAL")
    migrate(db)
    return db
