"""Large values bound to SQLite statements, let go once the statement has run.

SQLite keeps the values last bound to a statement until it runs again, and Python's sqlite3 keeps
its statements (cached by their SQL text) as long as the connection is open, so a 10 MB prompt,
answer or id bound once would stay in memory for good. Two ways out, one per kind of connection:

- `connect`: a connection that caches no statement; each one is finalized, its values freed, once
  its cursor is gone (a few microseconds more per statement). For the stores that see user-sized
  values and run few statements: conversation threads, MCP tasks, hook sessions.
- `large` + `unbind`: the statement is run once more with NULLs, read-only. For the job store,
  whose hot path keeps its cached statements.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# A bound value this long (characters or bytes) is let go once its statement has run.
LARGE_VALUE = 1 << 16


def connect(path: Path | str, *, timeout: float = 5.0) -> sqlite3.Connection:
    """A connection (autocommit, any thread) that keeps no statement, and so no bound value, once it has run."""
    return sqlite3.connect(path, timeout=timeout, check_same_thread=False, isolation_level=None, cached_statements=0)


def large(params: Sequence[Any]) -> bool:
    """Whether any of `params` is large enough to be let go after its statement."""
    return any(isinstance(p, str | bytes) and len(p) >= LARGE_VALUE for p in params)


def unbind(db: sqlite3.Connection, sql: str, count: int) -> None:
    """Rebind the cached statement of `sql` to NULLs: it runs once more, read-only, so a write fails unwritten."""
    db.execute("PRAGMA query_only = ON")
    try:
        db.execute(sql, (None,) * count).fetchall()
    except sqlite3.Error:
        pass  # expected for a write: the values were bound (and so replaced) before it was refused
    finally:
        db.execute("PRAGMA query_only = OFF")
