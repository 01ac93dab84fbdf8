"""Tombstones: the tasks deleted in a project (table `task_tombstones`, migration m010_task_tombstones).

`TaskStore.delete` records one for each task it deletes (with `cascade`, one per subtask too, all
marked `cascaded`), stamped after the newest write of any of them. The JSONL export writes them as
lines and the import applies them last write wins against task lines (see sync.py), so a deletion
travels through git like an edit. A task brought back by a newer task line loses its tombstone.
An export prunes tombstones older than TOMBSTONE_TTL: a clone that has not synced for that long
can bring such a task back.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from datetime import datetime, timedelta

from relay.tracker.model import Tombstone, parse_ts
from relay.tracker.project import Project

TOMBSTONE_TTL = timedelta(days=90)


def record_tombstones(db: sqlite3.Connection, project: Project, stones: Iterable[Tombstone]) -> None:
    """Insert tombstones, replacing any held for the same ids."""
    db.executemany(
        "INSERT INTO task_tombstones (project, id, project_id, deleted_at, cascaded, principal) VALUES (?,?,?,?,?,?)"
        " ON CONFLICT (project, id) DO UPDATE SET project_id=excluded.project_id,"
        " deleted_at=excluded.deleted_at, cascaded=excluded.cascaded, principal=excluded.principal",
        [(project.key, s.id, s.project_id, s.deleted_at, int(s.cascaded), s.principal) for s in stones],
    )


def forget_tombstone(db: sqlite3.Connection, project: Project, task_id: str) -> None:
    db.execute("DELETE FROM task_tombstones WHERE project=? AND id=?", (project.key, task_id))


def load_tombstones(db: sqlite3.Connection, project: Project) -> dict[str, Tombstone]:
    """The project's tombstones by id, in id order."""
    rows = db.execute(
        "SELECT id, project_id, deleted_at, cascaded, principal FROM task_tombstones WHERE project=? ORDER BY id",
        (project.key,),
    ).fetchall()
    return {row[0]: Tombstone(row[0], row[1], row[2], bool(row[3]), row[4]) for row in rows}


def prune_tombstones(db: sqlite3.Connection, project: Project, before: datetime) -> list[str]:
    """Drop the tombstones deleted before `before`; returns their ids."""
    old = [s.id for s in load_tombstones(db, project).values() if parse_ts(s.deleted_at) < before]
    db.executemany("DELETE FROM task_tombstones WHERE project=? AND id=?", [(project.key, i) for i in old])
    return old
