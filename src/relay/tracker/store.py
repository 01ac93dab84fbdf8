"""Tasks in relay.db (migrations m006_tasks, m010_task_tombstones): CRUD, dependencies, ready/blocked work, labels,
session links; a deleted task leaves a tombstone (tombstones.py) so the deletion syncs.

Every row is scoped by project (`Project.key`); a task id is unique within its project. Values
come back as the frozen dataclasses of `model.py`. Each change bumps the task's `updated_at`
(strictly increasing, so last-write-wins sync can order edits) and calls `on_change(project)`.
Every read and change sees only the current principal's tasks (principals.py; an admin all).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Generator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from relay.config import Settings
from relay.errors import ErrorCode, RelayError, invalid
from relay.osfiles import private_home
from relay.principal import current
from relay.store.migrations import migrate
from relay.tracker.graph import Edge, dependency_tree, find_cycles, find_path
from relay.tracker.links import SessionLinks
from relay.tracker.model import (
    DEFAULT_PRIORITY,
    DEP_TYPES,
    DIRECTIONS,
    STATUSES,
    Dependency,
    Task,
    TaskChanges,
    Tombstone,
    check_label,
    check_labels,
    check_one_of,
    check_priority,
    check_task_type,
    check_text,
    check_title,
    format_ts,
    now_iso,
    parse_ts,
    task_from_row,
)
from relay.tracker.principals import linker, owned, owner_of, record_principals
from relay.tracker.project import Project
from relay.tracker.tombstones import load_tombstones, record_tombstones

BUSY_TIMEOUT_S = 10.0
ID_PREFIX = "gt-"
ID_HEX_CHARS = 6
ID_RETRIES = 3  # Gobby's: a fourth collision in a row means something is wrong, not bad luck
MAX_LIST_LIMIT = 1000
MAX_TREE_DEPTH = 10
MAX_TREE_NODES = 500  # entries in one dependency tree; a dense graph would otherwise explode
ChangeHook = Callable[[Project], None]


def not_found(task_id: str) -> RelayError:
    return RelayError(
        ErrorCode.TASK_NOT_FOUND,
        f"Task {task_id[:100]} not found",
        "list_tasks shows this project's tasks; tasks are scoped by project (pass project=<repository path>)",
    )


def _task(row: sqlite3.Row) -> Task:
    return task_from_row(dict(row))


def _dep(row: sqlite3.Row) -> Dependency:
    return Dependency(
        id=row["id"],
        task_id=row["task_id"],
        depends_on=row["depends_on"],
        dep_type=row["dep_type"],
        created_at=row["created_at"],
    )


def _check_limit(limit: int) -> int:
    if not 1 <= limit <= MAX_LIST_LIMIT:
        raise invalid(f"limit {limit} is outside 1..{MAX_LIST_LIMIT}", "omit limit for the default")
    return limit


@contextmanager
def _translated() -> Generator[None]:
    """SQLite failures (a database locked past the busy timeout, a full disk) as one RelayError."""
    try:
        yield
    except sqlite3.Error as err:
        raise RelayError(
            ErrorCode.INTERNAL,
            f"relay's task store failed: {err}",
            "retry; if it keeps failing, check the disk and run relay doctor",
        ) from err


class TaskStore(SessionLinks):
    """Task storage; safe to share between the event loop and worker threads (one lock, one connection)."""

    def __init__(
        self,
        db_path: Path,
        *,
        clock: Callable[[], str] = now_iso,
        entropy: Callable[[int], bytes] = os.urandom,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
    ) -> None:
        private_home(db_path.parent)
        self._clock = clock
        self._entropy = entropy
        self._lock = threading.RLock()
        self._db = sqlite3.connect(db_path, timeout=busy_timeout_s, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = NORMAL")
        self._db.execute("PRAGMA foreign_keys = ON")
        self.on_change: ChangeHook | None = None
        with self._lock:
            migrate(self._db)
            record_principals(self._db)

    @classmethod
    def open(cls, settings: Settings) -> TaskStore:
        return cls(settings.db_path)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock, _translated():
            return self._db.execute(sql, params).fetchall()

    @contextmanager
    def transaction(self) -> Generator[sqlite3.Connection]:
        """One write transaction (BEGIN IMMEDIATE ... COMMIT, rolled back on error)."""
        with self._lock, _translated():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _changed(self, project: Project) -> None:
        if self.on_change is not None:
            self.on_change(project)

    def next_ts(self, previous: str | None = None) -> str:
        """Now, or one microsecond after `previous` when the clock has not moved past it."""
        now = self._clock()
        if previous is not None and parse_ts(now) <= parse_ts(previous):
            return format_ts(parse_ts(previous) + timedelta(microseconds=1))
        return now

    def _new_id(self, db: sqlite3.Connection, project: Project) -> str:
        for _ in range(ID_RETRIES + 1):
            seed = self._entropy(16) + project.key.encode()
            candidate = ID_PREFIX + hashlib.sha256(seed).hexdigest()[:ID_HEX_CHARS]
            # Nor a deleted task's id: on other clones the new task would read as the old one coming back.
            used = "SELECT 1 FROM tasks WHERE {0} UNION ALL SELECT 1 FROM task_tombstones WHERE {0}"
            if not db.execute(used.format("project=?1 AND id=?2"), (project.key, candidate)).fetchone():
                return candidate
        raise RelayError(
            ErrorCode.INTERNAL,
            f"Failed to generate unique task ID after {ID_RETRIES} retries",
            "retry; if it keeps happening the project holds too many tasks for 6-hex-digit ids",
        )

    # tasks ------------------------------------------------------------------------------

    def find(self, project: Project, task_id: str, *, everyone: bool = False) -> Task | None:
        """The task by id if the current principal may see it (principals.py; `everyone`: any principal's)."""
        mine, who = owned(everyone=everyone)
        rows = self._rows(f"SELECT * FROM tasks WHERE project=? AND id=? AND {mine}", (project.key, task_id, *who))
        return _task(rows[0]) if rows else None

    def get(self, project: Project, task_id: str) -> Task:
        """The task by id; another principal's answers as an unknown id does (TASK_NOT_FOUND)."""
        task = self.find(project, task_id)
        if task is None:
            raise not_found(task_id)
        return task

    def create(
        self,
        project: Project,
        title: str,
        *,
        description: str | None = None,
        priority: int = DEFAULT_PRIORITY,
        task_type: str = "task",
        parent_task_id: str | None = None,
        labels: Sequence[str] = (),
        blocks: Sequence[str] = (),
        session_id: str | None = None,
        assignee: str | None = None,
        original_instruction: str | None = None,
    ) -> Task:
        """A new open task; `blocks` lists tasks the new one blocks; `session_id` is linked as `discovered`."""
        title = check_title(title)
        description = check_text(description, "description")
        check_priority(priority)
        task_type = check_task_type(task_type)
        clean_labels = check_labels(list(labels))
        with self.transaction() as db:
            if parent_task_id is not None and not self.find(project, parent_task_id):
                raise not_found(parent_task_id)
            for blocked in blocks:
                if not self.find(project, blocked):
                    raise not_found(blocked)
            task_id = self._new_id(db, project)
            now = self.next_ts()
            db.execute(
                "INSERT INTO tasks (project, id, project_id, title, description, status, priority, task_type,"
                " parent_task_id, discovered_in_session_id, assignee, labels, original_instruction, created_at,"
                " updated_at) VALUES (?,?,?,?,?,'open',?,?,?,?,?,?,?,?,?)",
                (
                    project.key,
                    task_id,
                    project.project_id,
                    title,
                    description,
                    priority,
                    task_type,
                    parent_task_id,
                    session_id,
                    assignee,
                    json.dumps(list(clean_labels)),
                    original_instruction,
                    now,
                    now,
                ),
            )
            for blocked in dict.fromkeys(blocks):
                # A new task has no blockers of its own, so it cannot close a cycle.
                db.execute(
                    "INSERT INTO task_dependencies (project, task_id, depends_on, dep_type, created_at)"
                    " VALUES (?,?,?,'blocks',?)",
                    (project.key, blocked, task_id, now),
                )
                self._touch(db, project, blocked)
            if session_id:
                db.execute(
                    "INSERT OR IGNORE INTO task_sessions (project, task_id, session_id, action, created_at, principal)"
                    " VALUES (?,?,?,'discovered',?,?)",
                    (project.key, task_id, session_id, now, linker()),
                )
        self._changed(project)
        return self.get(project, task_id)

    def _touch(self, db: sqlite3.Connection, project: Project, task_id: str) -> None:
        row = db.execute("SELECT updated_at FROM tasks WHERE project=? AND id=?", (project.key, task_id)).fetchone()
        if row is not None:
            db.execute(
                "UPDATE tasks SET updated_at=? WHERE project=? AND id=?",
                (self.next_ts(row[0]), project.key, task_id),
            )

    def update(self, project: Project, task_id: str, changes: TaskChanges) -> Task:
        sets: dict[str, Any] = {}
        if changes.title is not None:
            sets["title"] = check_title(changes.title)
        if changes.description is not None:
            sets["description"] = check_text(changes.description, "description")
        if changes.priority is not None:
            sets["priority"] = check_priority(changes.priority)
        if changes.assignee is not None:
            sets["assignee"] = check_text(changes.assignee, "assignee") or None
        if changes.labels is not None:
            sets["labels"] = json.dumps(list(check_labels(list(changes.labels))))
        if changes.task_type is not None:
            sets["task_type"] = check_task_type(changes.task_type)
        if changes.validation_status is not None:
            sets["validation_status"] = changes.validation_status
        if changes.validation_feedback is not None:
            sets["validation_feedback"] = changes.validation_feedback
        if changes.status is not None:
            sets["status"] = check_one_of(changes.status, STATUSES, "status")
        with self.transaction() as db:
            current = self.get(project, task_id)
            if changes.parent_task_id is not None:
                self._check_parent(project, task_id, changes.parent_task_id)
                sets["parent_task_id"] = changes.parent_task_id
            if "status" in sets and sets["status"] != current.status:
                closing = sets["status"] == "closed"
                sets["closed_at"] = self._clock() if closing else None
                sets["closed_reason"] = (current.closed_reason or "completed") if closing else None
            sets["updated_at"] = self.next_ts(current.updated_at)
            assignments = ", ".join(f"{name}=?" for name in sets)
            db.execute(
                f"UPDATE tasks SET {assignments} WHERE project=? AND id=?",
                (*sets.values(), project.key, task_id),
            )
        self._changed(project)
        return self.get(project, task_id)

    def _check_parent(self, project: Project, task_id: str, parent_id: str) -> None:
        parent = self.get(project, parent_id)
        seen = {task_id}
        while parent is not None:
            if parent.id in seen:
                raise invalid(f"making {parent_id} the parent of {task_id} would loop", "pick another parent")
            seen.add(parent.id)
            parent = self.find(project, parent.parent_task_id, everyone=True) if parent.parent_task_id else None

    def close_task(self, project: Project, task_id: str, reason: str = "completed") -> Task:
        reason = (check_text(reason, "reason") or "").strip() or "completed"
        with self.transaction() as db:
            current = self.get(project, task_id)
            now = self.next_ts(current.updated_at)
            db.execute(
                "UPDATE tasks SET status='closed', closed_reason=?, closed_at=?, updated_at=? WHERE project=? AND id=?",
                (reason, now, now, project.key, task_id),
            )
        self._changed(project)
        return self.get(project, task_id)

    def delete(self, project: Project, task_id: str, cascade: bool = False) -> list[str]:
        """Delete a task (and with `cascade` its subtasks, depth first); returns the ids deleted."""
        with self.transaction() as db:
            self.get(project, task_id)
            doomed = [task_id]
            frontier = [task_id]
            mine, who = owned()
            while frontier:
                marks = ",".join("?" * len(frontier))
                # Another principal's subtask (an admin can file one under a user's task) is left, detached.
                db.execute(
                    f"UPDATE tasks SET parent_task_id=NULL WHERE project=? AND parent_task_id IN ({marks})"
                    f" AND NOT ({mine})",
                    (project.key, *frontier, *who),
                )
                kids = [
                    r[0]
                    for r in db.execute(
                        f"SELECT id FROM tasks WHERE project=? AND parent_task_id IN ({marks})",
                        (project.key, *frontier),
                    )
                ]
                if kids and not cascade:
                    raise invalid(f"Task {task_id} has children. Use cascade=True to delete.", "pass cascade=true")
                kids = [k for k in kids if k not in doomed]
                doomed += kids
                frontier = kids
            victims = [self.get(project, v) for v in doomed]
            # After the newest write of any of them, so the tombstones win last-write-wins on every clone.
            deleted_at = self.next_ts(max((v.updated_at for v in victims), key=parse_ts))
            stones = (Tombstone(v.id, v.project_id, deleted_at, cascade, owner_of(v.created_by)) for v in victims)
            record_tombstones(db, project, stones)
            for victim in reversed(doomed):
                db.execute("DELETE FROM tasks WHERE project=? AND id=?", (project.key, victim))
        self._changed(project)
        return doomed

    def list(
        self,
        project: Project,
        *,
        status: str | None = None,
        priority: int | None = None,
        task_type: str | None = None,
        assignee: str | None = None,
        label: str | None = None,
        parent_task_id: str | None = None,
        title_like: str | None = None,
        limit: int = 50,
    ) -> list[Task]:
        """The current principal's tasks matching every filter given, newest first."""
        mine, who = owned()
        where = ["project=?", mine]
        params: list[Any] = [project.key, *who]
        for column, value in (
            ("status", status),
            ("priority", priority),
            ("task_type", task_type),
            ("assignee", assignee),
            ("parent_task_id", parent_task_id),
        ):
            if value is not None:
                where.append(f"{column}=?")
                params.append(value)
        if status is not None:
            check_one_of(status, STATUSES, "status")
        if label is not None:
            where.append("EXISTS (SELECT 1 FROM json_each(tasks.labels) WHERE json_each.value=?)")
            params.append(label)
        if title_like:
            escaped = title_like.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            where.append("title LIKE ? ESCAPE '\\'")
            params.append(f"%{escaped}%")
        params.append(_check_limit(limit))
        sql = f"SELECT * FROM tasks WHERE {' AND '.join(where)} ORDER BY created_at DESC, id DESC LIMIT ?"
        return [_task(r) for r in self._rows(sql, params)]

    def all_tasks(self, project: Project, *, everyone: bool = False) -> list[Task]:
        """The project's tasks the current principal may see (`everyone`: all of them, for the JSONL sync)."""
        mine, who = owned(everyone=everyone)
        rows = self._rows(f"SELECT * FROM tasks WHERE project=? AND {mine} ORDER BY id", (project.key, *who))
        return [_task(r) for r in rows]

    def tombstones(self, project: Project) -> list[Tombstone]:
        """The project's deleted tasks (tombstones.py), by id."""
        with self._lock, _translated():
            return list(load_tombstones(self._db, project).values())

    def set_labels(self, project: Project, task_id: str, add: str | None = None, remove: str | None = None) -> Task:
        with self.transaction() as db:
            current = self.get(project, task_id)
            labels = list(current.labels)
            if add is not None and check_label(add) not in labels:
                labels.append(check_label(add))
            if remove is not None:
                labels = [x for x in labels if x != remove.strip()]
            if labels != list(current.labels):
                db.execute(
                    "UPDATE tasks SET labels=?, updated_at=? WHERE project=? AND id=?",
                    (json.dumps(labels), self.next_ts(current.updated_at), project.key, task_id),
                )
        self._changed(project)
        return self.get(project, task_id)

    # dependencies -----------------------------------------------------------------------

    def dependencies(self, project: Project, task_id: str) -> tuple[list[Dependency], list[Dependency]]:
        """(what `task_id` depends on, what depends on `task_id`), among the tasks the current principal sees."""
        seen = {d.id for d in self.all_dependencies(project)}
        on = self._rows(
            "SELECT * FROM task_dependencies WHERE project=? AND task_id=? ORDER BY id", (project.key, task_id)
        )
        by = self._rows(
            "SELECT * FROM task_dependencies WHERE project=? AND depends_on=? ORDER BY id", (project.key, task_id)
        )
        return [_dep(r) for r in on if r["id"] in seen], [_dep(r) for r in by if r["id"] in seen]

    def all_dependencies(self, project: Project, *, everyone: bool = False) -> list[Dependency]:
        """The project's dependencies whose both tasks the current principal sees (`everyone`: all of them)."""
        a, who_a = owned("a.", everyone=everyone)
        b, who_b = owned("b.", everyone=everyone)
        rows = self._rows(
            "SELECT d.* FROM task_dependencies d JOIN tasks a ON a.project=d.project AND a.id=d.task_id"
            f" JOIN tasks b ON b.project=d.project AND b.id=d.depends_on WHERE d.project=? AND {a} AND {b}"
            " ORDER BY d.id",
            (project.key, *who_a, *who_b),
        )
        return [_dep(r) for r in rows]

    def blocks_graph(self, project: Project) -> dict[str, list[str]]:
        """task -> the tasks it waits for (`blocks` edges only)."""
        graph: dict[str, list[str]] = {}
        for task_id, blocker in self._rows(
            "SELECT task_id, depends_on FROM task_dependencies WHERE project=? AND dep_type='blocks' ORDER BY id",
            (project.key,),
        ):
            graph.setdefault(task_id, []).append(blocker)
        return graph

    def add_dependency(self, project: Project, task_id: str, depends_on: str, dep_type: str = "blocks") -> Dependency:
        """`task_id` depends on `depends_on`; a `blocks` edge that would close a cycle is refused, naming it."""
        check_one_of(dep_type, DEP_TYPES, "dep_type")
        if task_id == depends_on:
            raise invalid(f"Task {task_id} cannot depend on itself", "pass two different task ids")
        with self.transaction() as db:
            self.get(project, task_id)
            self.get(project, depends_on)
            if dep_type == "blocks":
                path = find_path(self.blocks_graph(project), depends_on, task_id)
                if path is not None:
                    chain = " → ".join([task_id, *path])
                    raise invalid(
                        f"Adding dependency {depends_on} blocks {task_id} would create a cycle: {chain}"
                        " (each task waits for the next)",
                        "remove one of the dependencies in that chain first, or use dep_type='related'",
                    )
            now = self._clock()
            db.execute(
                "INSERT OR IGNORE INTO task_dependencies (project, task_id, depends_on, dep_type, created_at)"
                " VALUES (?,?,?,?,?)",
                (project.key, task_id, depends_on, dep_type, now),
            )
            self._touch(db, project, task_id)
            row = db.execute(
                "SELECT * FROM task_dependencies WHERE project=? AND task_id=? AND depends_on=? AND dep_type=?",
                (project.key, task_id, depends_on, dep_type),
            ).fetchone()
        self._changed(project)
        return _dep(row)

    def remove_dependency(self, project: Project, task_id: str, depends_on: str) -> int:
        """Remove every dependency of `task_id` on `depends_on`; returns how many there were."""
        with self.transaction() as db:
            self.get(project, task_id)
            cur = db.execute(
                "DELETE FROM task_dependencies WHERE project=? AND task_id=? AND depends_on=?",
                (project.key, task_id, depends_on),
            )
            if cur.rowcount:
                self._touch(db, project, task_id)
        if cur.rowcount:
            self._changed(project)
        return cur.rowcount

    def dependency_tree(self, project: Project, task_id: str, direction: str = "both") -> dict[str, Any]:
        """Nested blockers (what the task waits for) and/or blocking (what waits for it), bounded in size."""
        check_one_of(direction, DIRECTIONS, "direction")
        self.get(project, task_id)
        mine, who = owned()
        info = {
            row[0]: {"id": row[0], "title": row[1], "status": row[2]}
            for row in self._rows(
                f"SELECT id, title, status FROM tasks WHERE project=? AND {mine}", (project.key, *who)
            )
        }
        edges = [Edge(d.task_id, d.depends_on, d.dep_type) for d in self.all_dependencies(project)]
        return dependency_tree(task_id, info, edges, direction, MAX_TREE_DEPTH, MAX_TREE_NODES)

    def cycles(self, project: Project) -> list[list[str]]:
        """Cycles of `blocks` dependencies among the tasks the current principal sees."""
        graph: dict[str, list[str]] = {}
        for d in self.all_dependencies(project):
            if d.dep_type == "blocks":
                graph.setdefault(d.task_id, []).append(d.depends_on)
        return find_cycles(graph)

    # ready and blocked work -------------------------------------------------------------

    def ready(
        self,
        project: Project,
        *,
        priority: int | None = None,
        task_type: str | None = None,
        assignee: str | None = None,
        limit: int = 10,
    ) -> list[Task]:
        """Open tasks none of whose `blocks` blockers is still open, by priority then age."""
        mine, who = owned("t.")
        where = ["t.project=?", "t.status='open'", mine]
        params: list[Any] = [project.key, *who]
        for column, value in (("priority", priority), ("task_type", task_type), ("assignee", assignee)):
            if value is not None:
                where.append(f"t.{column}=?")
                params.append(value)
        params.append(_check_limit(limit))
        sql = (
            f"SELECT t.* FROM tasks t WHERE {' AND '.join(where)} AND NOT EXISTS ("
            " SELECT 1 FROM task_dependencies d JOIN tasks b ON b.project=d.project AND b.id=d.depends_on"
            " WHERE d.project=t.project AND d.task_id=t.id AND d.dep_type='blocks' AND b.status!='closed')"
            " ORDER BY t.priority, t.created_at, t.id LIMIT ?"
        )
        return [_task(r) for r in self._rows(sql, params)]

    def blocked(self, project: Project, limit: int = 20) -> list[tuple[Task, list[Task]]]:
        """Unclosed tasks waiting for at least one unclosed blocker, by priority then age, with those blockers."""
        open_blocker = (
            "SELECT 1 FROM task_dependencies d JOIN tasks b ON b.project=d.project AND b.id=d.depends_on"
            " WHERE d.project=t.project AND d.task_id=t.id AND d.dep_type='blocks' AND b.status!='closed'"
        )
        mine, who = owned("t.")
        waiting = [
            _task(r)
            for r in self._rows(
                f"SELECT t.* FROM tasks t WHERE t.project=? AND {mine} AND t.status!='closed'"
                f" AND EXISTS ({open_blocker}) ORDER BY t.priority, t.created_at, t.id LIMIT ?",
                (project.key, *who, _check_limit(limit)),
            )
        ]
        if not waiting:
            return []
        marks = ",".join("?" * len(waiting))
        rows = self._rows(
            "SELECT d.task_id AS waiting_id, b.* FROM task_dependencies d"
            " JOIN tasks b ON b.project=d.project AND b.id=d.depends_on"
            f" WHERE d.project=? AND d.dep_type='blocks' AND b.status!='closed' AND d.task_id IN ({marks})"
            " ORDER BY d.id",
            (project.key, *(t.id for t in waiting)),
        )
        blockers: dict[str, list[Task]] = {}
        sees = current().sees
        for row in rows:
            d = dict(row)
            waiting_id = d.pop("waiting_id")
            blocker = task_from_row(d)
            if sees(blocker.created_by):  # another's blocker still blocks, unnamed
                blockers.setdefault(waiting_id, []).append(blocker)
        return [(t, blockers.get(t.id, [])) for t in waiting]
