"""The SQLite store: the one store body (store/body.py, store/queue.py) over one connection per process.

WAL, so CLI readers never block the server. What is SQLite's own is here and in store/sqlite_conn.py:
opening relay.db (store/connect.py), the queue version (SQLite's data_version) and the host's clock.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from relay.audit import AuditLog, open_audit
from relay.osfiles import private
from relay.store.body import JobBody
from relay.store.connect import open_sqlite, prepare_home
from relay.store.dialect import timed
from relay.store.queue import ClaimsBody, WorkerInfo
from relay.store.records import (
    ACTIVE_STATUSES,
    FINAL_STATUSES,
    JOB_COLUMNS,
    AuditExpectation,
    JobRecord,
    SessionRecord,
    SessionTurn,
)
from relay.store.sqlite_conn import SqliteConn

__all__ = [
    "ACTIVE_STATUSES",
    "BUSY_TIMEOUT_MS",
    "FINAL_STATUSES",
    "JOB_COLUMNS",
    "AuditExpectation",
    "JobRecord",
    "SessionRecord",
    "SessionTurn",
    "Store",
    "audit_expectation",
]

# How long a writer waits for another process's transaction before "database is locked".
BUSY_TIMEOUT_MS = 10_000


class Store(JobBody, ClaimsBody):
    """Typed access to relay.db. Safe to share between the event loop and worker threads."""

    spans_hosts = False  # one file in one home: the jobs' files are beside it
    overlaps_calls = False  # its writes take turns on the file
    _rides_alone = False

    def __init__(self, path: Path, audit: AuditLog | None = None) -> None:
        prepare_home(path)
        self.path = path
        # Every job state change written here is also an entry in the audit log next to the database.
        self.audit = audit if audit is not None else open_audit(path.parent)
        self._log = ""  # one log, one mark
        busy_s = BUSY_TIMEOUT_MS / 1000
        self._db = SqliteConn(open_sqlite(path, busy_s), path, busy_s)
        for made in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            private(made)  # SQLite makes the -wal and -shm files with the database file's mode
        self._start_marks()

    def close(self) -> None:
        self._stop_marks()
        self._db.close()

    @timed
    def queue_version(self) -> int:
        """A number that changes whenever another connection commits (SQLite's data_version): a cheap way to
        tell that nothing was queued or cancelled since the last look."""
        row = self._db.exec("PRAGMA data_version").fetchone()
        return int(row[0]) if row else 0

    def _queue_seen(self, worker: WorkerInfo, ahead: int = 0) -> tuple[Any, ...] | None:
        """ClaimsBody's: other connections' commits (data_version) and the jobs this one queued."""
        return (worker.id, self.queue_version(), self._db.queued_writes + ahead)

    def clock(self) -> float:
        """The store's time now (seconds since the epoch): SQLite's is its one host's clock."""
        return time.time()


def audit_expectation(path: Path) -> AuditExpectation:
    """Read, without creating or migrating anything, what relay.db at `path` records about the audit log."""
    if not path.exists():
        return AuditExpectation(None, 0)
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
    except sqlite3.Error:
        return AuditExpectation(None, 0)
    try:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        jobs = db.execute("SELECT count(*) FROM jobs").fetchone()[0] if "jobs" in tables else 0
        row = db.execute("SELECT seq, hash FROM audit_mark WHERE id=1").fetchone() if "audit_mark" in tables else None
        return AuditExpectation((int(row[0]), str(row[1])) if row else None, int(jobs))
    except sqlite3.Error:
        return AuditExpectation(None, 0)
    finally:
        db.close()
