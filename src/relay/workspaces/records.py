"""Workspace rows in relay.db (migration m011_workspaces): one per worktree job, as plain dataclasses."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from relay.store.side import open_side

BUSY_TIMEOUT_S = 10.0
# creating: recorded before git makes it (a relay killed meanwhile leaves this, which the next one's sweep takes
# back); active: the worktree is there; landed / discarded / pruned: it was removed (the branch stays unless discarded).
STATES = ("creating", "active", "landed", "discarded", "pruned")


@dataclass(frozen=True)
class WorkspaceRecord:
    """Where a job's worktree is, what it was made from, and what became of it."""

    job_id: str
    repo: str  # the top folder of the caller's checkout
    common_dir: str  # the repository's git folder that every worktree shares
    path: str  # the worktree's top folder
    subdir: str  # where in the repository the job runs ("" for the top)
    branch: str  # relay/<job-id>
    base_ref: str | None  # the branch the worktree was made from (None: a commit or a detached HEAD)
    base_sha: str
    state: str
    created_at: float
    ended_at: float | None = None
    head_sha: str | None = None
    landed_at: float | None = None
    landed_into: str | None = None
    landed_sha: str | None = None
    removed_at: float | None = None
    ports: str | None = None  # its agents' block of ports, "FIRST-LAST" (relay.workspaces.ready; m020_workspace_ports)

    @property
    def cwd(self) -> str:
        """The folder of the worktree the job runs in (the same sub-folder as the caller's cwd)."""
        return str(Path(self.path, self.subdir)) if self.subdir else self.path

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


_COLUMNS = tuple(f.name for f in fields(WorkspaceRecord))


class WorkspaceStore:
    """Reads and writes workspace rows; safe to share between the event loop and worker threads."""

    def __init__(self, db_path: Path) -> None:
        self._lock = threading.RLock()
        self._db = open_side(db_path, BUSY_TIMEOUT_S)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[WorkspaceRecord]:
        with self._lock:
            rows = self._db.execute(sql, params).fetchall()
        return [WorkspaceRecord(**{k: row[k] for k in _COLUMNS}) for row in rows]

    def add(self, rec: WorkspaceRecord) -> None:
        with self._lock:
            self._db.execute(
                f"INSERT INTO workspaces ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})",
                tuple(getattr(rec, c) for c in _COLUMNS),
            )

    def put(self, rec: WorkspaceRecord) -> None:
        """`add`, or the row of the same job replaced (a job placed again after its worker was lost)."""
        with self._lock:
            self._db.execute(
                f"INSERT OR REPLACE INTO workspaces ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})",
                tuple(getattr(rec, c) for c in _COLUMNS),
            )

    def delete(self, job_id: str) -> None:
        """Forget a workspace that was never made (a creation taken back)."""
        with self._lock:
            self._db.execute("DELETE FROM workspaces WHERE job_id=?", (job_id,))

    def get(self, job_id: str) -> WorkspaceRecord | None:
        found = self._rows("SELECT * FROM workspaces WHERE job_id=?", (job_id,))
        return found[0] if found else None

    def list(self, *, states: tuple[str, ...] = (), limit: int = 1000) -> list[WorkspaceRecord]:
        where = f"WHERE state IN ({', '.join('?' * len(states))})" if states else ""
        return self._rows(f"SELECT * FROM workspaces {where} ORDER BY created_at DESC LIMIT ?", (*states, limit))

    def update(self, job_id: str, **changes: Any) -> None:
        unknown = set(changes) - set(_COLUMNS)
        if unknown:
            raise ValueError(f"not workspace columns: {sorted(unknown)}")
        sets = ", ".join(f"{k}=?" for k in changes)
        with self._lock:
            self._db.execute(f"UPDATE workspaces SET {sets} WHERE job_id=?", (*changes.values(), job_id))

    def ended(self, job_id: str, head_sha: str | None) -> None:
        self.update(job_id, ended_at=time.time(), head_sha=head_sha)
