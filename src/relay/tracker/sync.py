"""Git sync: a project's tasks as `.gobby/tasks.jsonl` (one task per line, sorted by id) in its repository.

Export writes the file atomically (temporary file + rename) with `tasks_meta.json` beside it
(content hash, last export). Import merges the file into the store, last write wins on
`updated_at`. An export first imports a file that changed since relay last wrote or read it
(a `git pull`), so pulled tasks are never overwritten. `.gobby/.gitattributes` asks git for its
built-in `union` merge of the JSONL, so two clones' concurrent additions merge without conflict
markers; the next import keeps the newest line per id and the next export rewrites the file
sorted, one line per task. `tasks_meta.json` is local state and is git-ignored.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relay.errors import RelayError, invalid
from relay.tracker.graph import find_cycles
from relay.tracker.model import (
    DEFAULT_PRIORITY,
    MAX_PRIORITY,
    MIN_PRIORITY,
    STATUSES,
    SYNC_DIRECTIONS,
    Task,
    check_one_of,
    format_ts,
    now_iso,
    parse_ts,
)
from relay.tracker.project import Project
from relay.tracker.store import TaskStore

SYNC_DIR = ".gobby"
TASKS_FILE = "tasks.jsonl"
META_FILE = "tasks_meta.json"
GITATTRIBUTES = "tasks.jsonl merge=union\n"
GITIGNORE = "tasks_meta.json\n*.tmp\n"
# Auto-export waits this long after the last change, so a burst of edits costs one write (Gobby: 5 s).
DEBOUNCE_S = 5.0
MAX_ID_CHARS = 64
# Keys Gobby writes, then the fields relay adds so that no edit is lost in a round trip.
_DEP_KEYS = {"blocks": "deps_on", "related": "related", "discovered-from": "discovered_from"}


def sync_paths(project: Project) -> tuple[Path, Path]:
    folder = project.root / SYNC_DIR
    return folder / TASKS_FILE, folder / META_FILE


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def task_record(task: Task, deps: dict[str, list[str]], types: dict[str, list[str]]) -> dict[str, Any]:
    """One JSONL line's object: Gobby's keys (id, title, description, status, created_at, updated_at,
    project_id, parent_id, deps_on) plus priority, type, labels and the other editable fields."""
    record: dict[str, Any] = {
        "id": task.id,
        "title": task.title,
        "description": task.description,
        "status": task.status,
        "created_at": task.created_at,
        "updated_at": task.updated_at,
        "project_id": task.project_id,
        "parent_id": task.parent_task_id,
        "deps_on": sorted(deps.get(task.id, [])),
        "priority": task.priority,
        "type": task.task_type,
        "labels": list(task.labels),
        "assignee": task.assignee,
        "closed_reason": task.closed_reason,
        "closed_at": task.closed_at,
        "discovered_in_session_id": task.discovered_in_session_id,
        "validation_status": task.validation_status,
        "validation_feedback": task.validation_feedback,
    }
    for dep_type, key in _DEP_KEYS.items():
        if dep_type != "blocks":
            record[key] = sorted(types.get(f"{dep_type}:{task.id}", []))
    return record


def render(store: TaskStore, project: Project) -> str:
    """The JSONL text for the project's tasks as the store holds them now."""
    deps: dict[str, list[str]] = {}
    types: dict[str, list[str]] = {}
    for dep in store.all_dependencies(project):
        if dep.dep_type == "blocks":
            deps.setdefault(dep.task_id, []).append(dep.depends_on)
        else:
            types.setdefault(f"{dep.dep_type}:{dep.task_id}", []).append(dep.depends_on)
    lines = [
        json.dumps(task_record(t, deps, types), sort_keys=True, ensure_ascii=False) for t in store.all_tasks(project)
    ]
    return "".join(line + "\n" for line in lines)


@dataclass
class ImportStats:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    skipped_dependencies: list[str] = field(default_factory=lambda: [])

    def to_dict(self) -> dict[str, Any]:
        return {
            "created": self.created,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "skipped_dependencies": self.skipped_dependencies,
        }


def _str_list(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):  # pyright: ignore[reportUnknownVariableType]
        raise invalid(f"{where} must be a list of task ids", f"fix or remove that line of {TASKS_FILE}")
    return list(value)  # pyright: ignore[reportUnknownArgumentType]


def parse_line(line: str, number: int, default_project_id: str) -> tuple[Task, dict[str, list[str] | None]]:
    """A JSONL line as a Task and its dependency lists (None: the line does not carry that type)."""
    where = f"{TASKS_FILE} line {number}"
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as err:
        raise invalid(f"{where} is not JSON ({err.msg})", f"fix or remove that line of {TASKS_FILE}") from None
    if not isinstance(raw, dict):
        raise invalid(f"{where} is not a JSON object", f"fix or remove that line of {TASKS_FILE}")
    data: dict[str, Any] = raw  # pyright: ignore[reportUnknownVariableType]
    task_id, title, status = data.get("id"), data.get("title"), data.get("status", "open")
    if not isinstance(task_id, str) or not task_id.strip() or len(task_id) > MAX_ID_CHARS:
        raise invalid(f"{where} has no usable id", f"fix or remove that line of {TASKS_FILE}")
    if not isinstance(title, str) or not title.strip():
        raise invalid(f"{where} ({task_id}) has no title", f"fix or remove that line of {TASKS_FILE}")
    if status not in STATUSES:
        raise invalid(f"{where} ({task_id}) has status {status!r}", f"use one of {', '.join(STATUSES)}")
    try:
        created = format_ts(parse_ts(str(data.get("created_at") or data.get("updated_at") or "")))
        updated = format_ts(parse_ts(str(data.get("updated_at") or created)))
    except RelayError as err:
        raise invalid(f"{where} ({task_id}): {err.message}", f"fix or remove that line of {TASKS_FILE}") from None
    priority = data.get("priority", DEFAULT_PRIORITY)
    if not isinstance(priority, int) or isinstance(priority, bool) or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        priority = DEFAULT_PRIORITY
    labels = _str_list(data.get("labels"), f"{where} labels")

    def text(key: str) -> str | None:
        value = data.get(key)
        return value if isinstance(value, str) else None

    task = Task(
        id=task_id,
        project_id=text("project_id") or default_project_id,
        title=title,
        status=str(status),
        priority=priority,
        task_type=text("type") or text("task_type") or "task",
        created_at=created,
        updated_at=updated,
        description=text("description"),
        parent_task_id=text("parent_id") or text("parent_task_id"),
        discovered_in_session_id=text("discovered_in_session_id"),
        assignee=text("assignee"),
        labels=tuple(labels),
        closed_reason=text("closed_reason"),
        closed_at=text("closed_at"),
        validation_status=text("validation_status"),
        validation_feedback=text("validation_feedback"),
    )
    edges = {
        dep_type: (_str_list(data[key], f"{where} {key}") if key in data else None)
        for dep_type, key in _DEP_KEYS.items()
    }
    return task, edges


def _upsert(db: sqlite3.Connection, project: Project, task: Task, exists: bool) -> None:
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


def merge_records(store: TaskStore, project: Project, text: str) -> ImportStats:
    """Merge JSONL text into the store: newest `updated_at` wins per task; dependencies follow the winner."""
    incoming: dict[str, tuple[Task, dict[str, list[str] | None], str]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        task, edges = parse_line(line, number, project.project_id)
        rank = (parse_ts(task.updated_at), line)  # union merges can repeat an id: keep the newest line
        held = incoming.get(task.id)
        if held is None or rank > (parse_ts(held[0].updated_at), held[2]):
            incoming[task.id] = (task, edges, line)
    stats = ImportStats()
    with store.transaction() as db:
        existing = {
            row[0]: row[1] for row in db.execute("SELECT id, updated_at FROM tasks WHERE project=?", (project.key,))
        }
        winners: list[tuple[Task, dict[str, list[str] | None]]] = []
        for task, edges, _line in incoming.values():
            held_at = existing.get(task.id)
            if held_at is not None and parse_ts(task.updated_at) <= parse_ts(held_at):
                stats.unchanged += 1
                continue
            _upsert(db, project, task, exists=held_at is not None)
            if held_at is None:
                stats.created += 1
            else:
                stats.updated += 1
            winners.append((task, edges))
        known = set(existing) | set(incoming)
        added: set[tuple[str, str]] = set()
        for task, edges in winners:
            for dep_type, targets in edges.items():
                if targets is None:
                    continue
                db.execute(
                    "DELETE FROM task_dependencies WHERE project=? AND task_id=? AND dep_type=?",
                    (project.key, task.id, dep_type),
                )
                for target in dict.fromkeys(targets):
                    if target not in known or target == task.id:
                        stats.skipped_dependencies.append(f"{task.id} {dep_type} {target}: no such task")
                        continue
                    db.execute(
                        "INSERT OR IGNORE INTO task_dependencies (project, task_id, depends_on, dep_type, created_at)"
                        " VALUES (?,?,?,?,?)",
                        (project.key, task.id, target, dep_type, task.updated_at),
                    )
                    if dep_type == "blocks":
                        added.add((task.id, target))
        _break_cycles(db, project, store, added, stats)
    return stats


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
            stats.skipped_dependencies.append(f"{victim[0]} blocks {victim[1]}: would close the cycle {cycle}")
            dropped = True
        if not dropped:
            return


class TaskSync:
    """Import, export and status of a project's JSONL; one lock so a debounced export never races a sync."""

    def __init__(self, store: TaskStore, clock: Callable[[], str] = now_iso) -> None:
        self.store = store
        self._clock = clock
        self._lock = threading.RLock()

    def _read_meta(self, meta_path: Path) -> dict[str, Any] | None:
        try:
            data = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None  # pyright: ignore[reportUnknownVariableType]

    def _write_meta(self, meta_path: Path, **changes: Any) -> None:
        meta = self._read_meta(meta_path) or {}
        meta.update(changes)
        _write_atomic(meta_path, json.dumps(meta, indent=2, sort_keys=True) + "\n")

    def file_changed(self, project: Project) -> bool:
        """Whether the JSONL exists and differs from what relay last wrote or read (a clone, a pull)."""
        path, meta_path = sync_paths(project)
        try:
            current = _hash(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            return False
        meta = self._read_meta(meta_path)
        return meta is None or meta.get("content_hash") != current

    def import_file(self, project: Project) -> ImportStats | None:
        """Merge the project's JSONL into the store; None when there is no file."""
        path, meta_path = sync_paths(project)
        with self._lock:
            try:
                text = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                return None
            except (OSError, UnicodeDecodeError) as err:
                raise invalid(f"cannot read {path}: {err}", "check the file's permissions and encoding") from None
            stats = merge_records(self.store, project, text)
            self._write_meta(meta_path, content_hash=_hash(text), last_imported=self._clock())
            return stats

    def export_file(self, project: Project) -> dict[str, Any]:
        """Write the JSONL (after importing it first if it changed since relay last wrote or read it)."""
        path, meta_path = sync_paths(project)
        with self._lock:
            pulled: ImportStats | None = None
            if self.file_changed(project):
                pulled = self.import_file(project)
            path.parent.mkdir(parents=True, exist_ok=True)
            for name, content in ((".gitattributes", GITATTRIBUTES), (".gitignore", GITIGNORE)):
                extra = path.parent / name
                if not extra.exists():
                    _write_atomic(extra, content)
            text = render(self.store, project)
            old = path.read_text(encoding="utf-8") if path.exists() else None
            if old != text:
                _write_atomic(path, text)
            self._write_meta(meta_path, content_hash=_hash(text), last_exported=self._clock())
            return {
                "path": str(path),
                "tasks": text.count("\n"),
                "written": old != text,
                "imported_first": pulled.to_dict() if pulled else None,
            }

    def sync(self, project: Project, direction: str = "both") -> dict[str, Any]:
        """Gobby's `sync_tasks`: import then export (or one of them); says what each step did."""
        check_one_of(direction, SYNC_DIRECTIONS, "direction")
        result: dict[str, Any] = {}
        with self._lock:
            if direction in ("import", "both"):
                stats = self.import_file(project)
                result["import"] = "completed" if stats is not None else "no_file"
                result["import_stats"] = stats.to_dict() if stats else None
            if direction in ("export", "both"):
                result["export_details"] = self.export_file(project)
                result["export"] = "completed"
        return result

    def status(self, project: Project) -> dict[str, Any]:
        """Gobby's `get_sync_status`: no_file / no_meta / available / error, and whether file and store agree."""
        path, meta_path = sync_paths(project)
        base: dict[str, Any] = {"path": str(path)}
        try:
            if not path.exists():
                return {"status": "no_file", "synced": False, **base}
            meta = self._read_meta(meta_path)
            if meta is None:
                return {"status": "no_meta", "synced": False, **base}
            current = _hash(path.read_text(encoding="utf-8"))
            in_store = _hash(render(self.store, project))
        except (OSError, UnicodeDecodeError, RelayError) as err:
            return {"status": "error", "synced": False, "error": str(err), **base}
        return {
            "status": "available",
            "synced": current == meta.get("content_hash") and current == in_store,
            "last_exported": meta.get("last_exported"),
            "last_imported": meta.get("last_imported"),
            "hash": current,
            "file_changed_since_sync": current != meta.get("content_hash"),
            "store_changed_since_sync": in_store != meta.get("content_hash"),
            **base,
        }


class AutoExporter:
    """Exports a git project's JSONL `delay_s` after its last change (debounced), from a timer thread."""

    def __init__(self, sync: TaskSync, delay_s: float = DEBOUNCE_S) -> None:
        self.sync = sync
        self.delay_s = delay_s
        self.errors: dict[str, str] = {}
        self.exports = 0
        self.exported = threading.Condition()
        self._timers: dict[str, tuple[threading.Timer, Project]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def schedule(self, project: Project) -> None:
        if not project.is_git:
            return
        with self._lock:
            if self._closed:
                return
            held = self._timers.pop(project.key, None)
            if held is not None:
                held[0].cancel()
            timer = threading.Timer(self.delay_s, self._run, (project,))
            timer.daemon = True
            self._timers[project.key] = (timer, project)
            timer.start()

    def _run(self, project: Project) -> None:
        with self._lock:
            held = self._timers.get(project.key)
            if held is not None and held[0] is threading.current_thread():
                del self._timers[project.key]
        try:
            self.sync.export_file(project)
            self.errors.pop(project.key, None)
        except (RelayError, OSError, sqlite3.Error, ValueError) as err:
            # A failed background export must not kill the timer thread silently: keep it for status.
            self.errors[project.key] = str(err)
        with self.exported:
            self.exports += 1
            self.exported.notify_all()

    def flush(self) -> None:
        """Run every pending export now (at shutdown, or before an explicit sync)."""
        with self._lock:
            pending = list(self._timers.values())
            self._timers.clear()
        for timer, project in pending:
            timer.cancel()
            self._run(project)

    def pending(self, project: Project) -> bool:
        with self._lock:
            return project.key in self._timers

    def close(self) -> None:
        self.flush()
        with self._lock:
            self._closed = True


@contextlib.contextmanager
def exporting(store: TaskStore, delay_s: float = DEBOUNCE_S) -> Generator[tuple[TaskSync, AutoExporter]]:
    """A TaskSync with auto-export wired to the store's changes; flushed on exit."""
    sync = TaskSync(store)
    auto = AutoExporter(sync, delay_s)
    store.on_change = auto.schedule
    try:
        yield sync, auto
    finally:
        store.on_change = None
        auto.close()
