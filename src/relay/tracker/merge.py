"""The import of `.gobby/tasks.jsonl` into the store: last write wins per id, across tasks and tombstones.

For each id the newest line counts (a union merge can leave several; on equal times a tombstone
beats a task line). Against the store: a task line newer than the task replaces it with its
dependency lists; a task line newer than the task's tombstone brings it back and clears the
tombstone; a tombstone not older than the task deletes it (its dependency edges go with it, as in
`delete_task`) and is kept, as is a tombstone for a task this clone never had, so the deletion
travels on. Anything older than what the store holds is left alone.

Subtasks of a deleted task that are still here (written on this clone, or by a newer line): if the
task was deleted with `cascade` and the subtask was last written before the deletion, it is deleted
too (with its own tombstone); otherwise it is detached (no parent) and its `updated_at` advanced,
so the other clones adopt it without a parent instead of losing it.

Each line belongs to the principal it names (jsonl.py; none: the local user), never to the caller
whose call ran the import: a new task is created as that principal's, and a line changes, revives or
deletes only a task of that same principal. A line naming a principal whose tasks this relay keeps out
of the file (a `user` token: `shared` says no) is refused, so an edit of the file cannot reach such a
task nor adopt one. What the import reports (refused lines, skipped dependencies) a `user` caller sees
only of its own lines.
"""

from __future__ import annotations

import itertools
import json
import logging
import sqlite3
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from relay.errors import ErrorCode, RelayError
from relay.principal import current
from relay.tracker.graph import find_cycles
from relay.tracker.jsonl import TASKS_FILE, Edges, Shared, check_task, local_only, parse_line
from relay.tracker.model import Task, Tombstone, parse_ts
from relay.tracker.principals import owner_of
from relay.tracker.project import Project
from relay.tracker.store import TaskStore
from relay.tracker.tombstones import forget_tombstone, load_tombstones, record_tombstones

logger = logging.getLogger("relay.tracker")


@dataclass
class ImportStats:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0
    detached: int = 0
    skipped_dependencies: list[str] = field(default_factory=lambda: [])
    # Task lines create_task's checks refuse (a 10 MB title, NUL bytes...): each with its file, line and why.
    refused: list[dict[str, Any]] = field(default_factory=lambda: [])
    # Whose line each skipped dependency and refused line was (parallel to the lists above).
    skipped_owners: list[str] = field(default_factory=lambda: [], repr=False)
    refused_owners: list[str] = field(default_factory=lambda: [], repr=False)

    def skip(self, owner: str, why: str) -> None:
        self.skipped_dependencies.append(why)
        self.skipped_owners.append(owner)

    def refuse(self, owner: str, entry: dict[str, Any]) -> None:
        self.refused.append(entry)
        self.refused_owners.append(owner)

    def to_dict(self) -> dict[str, Any]:
        """The counts, and the refused lines and skipped dependencies the current principal may see."""
        sees = current().sees
        return {
            "created": self.created,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "deleted": self.deleted,
            "detached": self.detached,
            "skipped_dependencies": [
                why for why, owner in zip(self.skipped_dependencies, self.skipped_owners, strict=False) if sees(owner)
            ],
            "refused": [e for e, owner in zip(self.refused, self.refused_owners, strict=False) if sees(owner)],
        }


def _upsert(db: sqlite3.Connection, project: Project, task: Task, exists: bool) -> None:
    """Write a task line's task; a new one is its line's principal's, not the importer's."""
    values = (
        task.project_id,
        task.title,
        task.description,
        task.status,
        task.priority,
        task.task_type,
        task.parent_task_id,
        task.discovered_in_session_id,
        task.assignee,
        json.dumps(list(task.labels)),
        task.closed_reason,
        task.closed_at,
        task.validation_status,
        task.validation_feedback,
        task.created_at,
        task.updated_at,
    )
    columns = (
        "project_id, title, description, status, priority, task_type, parent_task_id, discovered_in_session_id,"
        " assignee, labels, closed_reason, closed_at, validation_status, validation_feedback, created_at, updated_at"
    )
    if exists:
        assignments = ", ".join(f"{c.strip()}=?" for c in columns.split(","))
        db.execute(f"UPDATE tasks SET {assignments} WHERE project=? AND id=?", (*values, project.key, task.id))
    else:
        db.execute(
            f"INSERT INTO tasks (project, id, {columns}) VALUES (?, ?, {', '.join('?' * len(values))})",
            (project.key, task.id, *values),
        )
        db.execute(  # after the insert trigger (principals.py), which records the importer
            "UPDATE tasks SET created_by=? WHERE project=? AND id=?",
            (owner_of(task.created_by), project.key, task.id),
        )


Entry = tuple[Task, Edges] | Tombstone


def _rank(entry: Entry, line: str) -> tuple[datetime, int, str]:
    """Which of two lines for one id wins: the newer, then a tombstone, then the greater text (any clone agrees)."""
    if isinstance(entry, Tombstone):
        return parse_ts(entry.deleted_at), 1, line
    return parse_ts(entry[0].updated_at), 0, line


def _owner(entry: Entry) -> str:
    return entry.principal if isinstance(entry, Tombstone) else owner_of(entry[0].created_by)


def read_entries(
    text: str,
    default_project_id: str,
    source: str = TASKS_FILE,
    stats: ImportStats | None = None,
    shared: Shared = local_only,
) -> dict[str, Entry]:
    """The newest line per id of a JSONL text, parsed; a task line `create_task` would refuse, or any line of a
    principal whose tasks stay out of the file, is left out (and listed in the stats' `refused` with its file
    and line), a line that is not a task at all refuses the file."""
    newest: dict[str, tuple[Entry, tuple[datetime, int, str]]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        entry = parse_line(line, number, default_project_id)
        owner = _owner(entry)
        try:
            if not shared(owner):
                raise RelayError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"it names principal {owner!r}, whose tasks this relay keeps out of {TASKS_FILE}",
                    "remove the line: a user token's tasks live only in relay's store",
                )
            if not isinstance(entry, Tombstone):
                check_task(entry[0])
        except RelayError as err:
            task_id = entry.id if isinstance(entry, Tombstone) else entry[0].id
            why = f"{source} line {number} ({task_id}) refused: {err.message}"
            logger.warning("%s", why)
            if stats is not None:
                stats.refuse(owner, {"file": source, "line": number, "id": task_id, "error": why, "hint": err.hint})
            continue
        key = entry.id if isinstance(entry, Tombstone) else entry[0].id
        rank = _rank(entry, line)
        held = newest.get(key)
        if held is None or rank > held[1]:
            newest[key] = (entry, rank)
    return {key: entry for key, (entry, _) in newest.items()}


def merge_records(
    store: TaskStore, project: Project, text: str, source: str = TASKS_FILE, shared: Shared = local_only
) -> ImportStats:
    """Merge JSONL text into the store (see the module docstring); dependencies follow the winning task lines.

    A task line that `create_task`'s checks refuse is not imported (the store keeps what it held for
    that id) and is named, with `source` and its line, in the stats' `refused`."""
    stats = ImportStats()
    incoming = read_entries(text, project.project_id, source, stats, shared)
    with store.transaction() as db:
        existing: dict[str, str] = {}
        owners: dict[str, str] = {}
        for row in db.execute("SELECT id, updated_at, created_by FROM tasks WHERE project=?", (project.key,)):
            existing[row[0]], owners[row[0]] = row[1], owner_of(row[2])
        stones = load_tombstones(db, project)
        winners: list[tuple[Task, Edges]] = []
        for entry in incoming.values():
            entry_id = entry.id if isinstance(entry, Tombstone) else entry[0].id
            stone_of = stones.get(entry_id)
            held_by = owners.get(entry_id) or (stone_of.principal if stone_of else None)
            if held_by is not None and held_by != _owner(entry):
                stats.unchanged += 1  # another principal's task by that id: a line never reaches it
                continue
            if isinstance(entry, Tombstone):
                _apply_tombstone(db, project, entry, existing, stones, stats)
                continue
            task, edges = entry
            held_at = existing.get(task.id)
            stone = stones.get(task.id)
            newer_than = held_at if held_at is not None else (stone.deleted_at if stone else None)
            if newer_than is not None and parse_ts(task.updated_at) <= parse_ts(newer_than):
                stats.unchanged += 1
                continue
            if stone is not None:
                forget_tombstone(db, project, task.id)
                del stones[task.id]
            _upsert(db, project, task, exists=held_at is not None)
            if held_at is None:
                stats.created += 1
            else:
                stats.updated += 1
            existing[task.id] = task.updated_at
            winners.append((task, edges))
        _settle_orphans(db, store, project, stats)
        _merge_edges(db, store, project, winners, stats, shared)
    return stats


def _apply_tombstone(
    db: sqlite3.Connection,
    project: Project,
    stone: Tombstone,
    existing: dict[str, str],
    stones: dict[str, Tombstone],
    stats: ImportStats,
) -> None:
    held_at = existing.get(stone.id)
    if held_at is not None:
        if parse_ts(stone.deleted_at) < parse_ts(held_at):
            stats.unchanged += 1  # edited here after the deletion: the task stays, and its line revives it elsewhere
            return
        db.execute("DELETE FROM tasks WHERE project=? AND id=?", (project.key, stone.id))  # edges cascade
        del existing[stone.id]
        stats.deleted += 1
    else:
        local = stones.get(stone.id)
        if local is not None and (parse_ts(stone.deleted_at), stone.cascaded, stone.project_id) <= (
            parse_ts(local.deleted_at),
            local.cascaded,
            local.project_id,
        ):
            stats.unchanged += 1
            return
    record_tombstones(db, project, [stone])
    stones[stone.id] = stone


def _settle_orphans(db: sqlite3.Connection, store: TaskStore, project: Project, stats: ImportStats) -> None:
    """Subtasks whose parent is deleted: deleted with it (cascade, written before, the same principal's) or detached."""
    while True:
        rows = db.execute(
            "SELECT t.id, t.project_id, t.updated_at, z.deleted_at, z.cascaded, t.created_by, z.principal FROM tasks t"
            " JOIN task_tombstones z ON z.project=t.project AND z.id=t.parent_task_id WHERE t.project=? ORDER BY t.id",
            (project.key,),
        ).fetchall()
        if not rows:
            return
        for task_id, project_id, updated_at, deleted_at, cascaded, created_by, parent_owner in rows:
            owner = owner_of(created_by)
            if cascaded and owner == parent_owner and parse_ts(updated_at) <= parse_ts(deleted_at):
                db.execute("DELETE FROM tasks WHERE project=? AND id=?", (project.key, task_id))
                record_tombstones(db, project, [Tombstone(task_id, project_id, deleted_at, True, owner)])
                stats.deleted += 1
            else:
                later = max(updated_at, deleted_at, key=parse_ts)
                db.execute(
                    "UPDATE tasks SET parent_task_id=NULL, updated_at=? WHERE project=? AND id=?",
                    (store.next_ts(later), project.key, task_id),
                )
                stats.detached += 1


def _merge_edges(
    db: sqlite3.Connection,
    store: TaskStore,
    project: Project,
    winners: list[tuple[Task, Edges]],
    stats: ImportStats,
    shared: Shared,
) -> None:
    """Each winning line's dependency lists replace the task's edges to tasks the file holds (those of `shared`
    principals; edges to a user token's task, which the file never lists, stay); edges to tasks not here are
    skipped, cycles broken."""
    known = {
        row[0]
        for row in db.execute("SELECT id, created_by FROM tasks WHERE project=?", (project.key,))
        if shared(owner_of(row[1]))
    }
    added: set[tuple[str, str]] = set()
    for task, edges in winners:
        if task.id not in known:
            continue  # deleted since with its parent
        owner = owner_of(task.created_by)
        for dep_type, targets in edges.items():
            if targets is None:
                continue
            for (target,) in db.execute(
                "SELECT depends_on FROM task_dependencies WHERE project=? AND task_id=? AND dep_type=?",
                (project.key, task.id, dep_type),
            ).fetchall():
                if target in known:
                    db.execute(
                        "DELETE FROM task_dependencies WHERE project=? AND task_id=? AND depends_on=? AND dep_type=?",
                        (project.key, task.id, target, dep_type),
                    )
            for target in dict.fromkeys(targets):
                if target not in known or target == task.id:
                    stats.skip(owner, f"{task.id} {dep_type} {target}: no such task")
                    continue
                db.execute(
                    "INSERT OR IGNORE INTO task_dependencies (project, task_id, depends_on, dep_type, created_at)"
                    " VALUES (?,?,?,?,?)",
                    (project.key, task.id, target, dep_type, task.updated_at),
                )
                if dep_type == "blocks":
                    added.add((task.id, target))
    _break_cycles(db, project, store, added, stats)


def _break_cycles(
    db: sqlite3.Connection, project: Project, store: TaskStore, added: set[tuple[str, str]], stats: ImportStats
) -> None:
    """Edges merged from two clones can close a cycle: drop an imported edge of each until none is left."""
    while added:
        cycles = find_cycles(store.blocks_graph(project))
        dropped = False
        for cycle in cycles:
            edges = list(itertools.pairwise(cycle))
            victim = next((e for e in reversed(edges) if e in added), None)
            if victim is None:
                continue
            db.execute(
                "DELETE FROM task_dependencies WHERE project=? AND task_id=? AND depends_on=? AND dep_type='blocks'",
                (project.key, *victim),
            )
            added.discard(victim)
            # A newer write, so the other clone adopts this resolution instead of re-adding the edge.
            row = db.execute(
                "SELECT updated_at FROM tasks WHERE project=? AND id=?", (project.key, victim[0])
            ).fetchone()
            db.execute(
                "UPDATE tasks SET updated_at=? WHERE project=? AND id=?",
                (store.next_ts(row[0]), project.key, victim[0]),
            )
            owner = db.execute(
                "SELECT created_by FROM tasks WHERE project=? AND id=?", (project.key, victim[0])
            ).fetchone()
            stats.skip(owner_of(owner[0]), f"{victim[0]} blocks {victim[1]}: would close the cycle {cycle}")
            dropped = True
        if not dropped:
            return
