"""The lines of `.gobby/tasks.jsonl`: one JSON object per task or tombstone, keys sorted, lines sorted by id.

A task line has Gobby's keys (id, title, description, status, created_at, updated_at, project_id,
parent_id, deps_on) plus the fields relay adds so that no edit is lost in a round trip (priority,
type, labels, ...). A tombstone line stands for a deleted task:

    {"cascade": false, "deleted": true, "id": "gt-1a2b3c", "project_id": "repo", "updated_at": "<deleted_at>"}

`updated_at` is the deletion time, so the import orders it against task lines (last write wins);
`cascade` says the task was deleted with its subtasks. A line whose `deleted` is false or absent
is a task line, so a file written before tombstones existed reads as before.

The file lives in the repository, where every principal's agents can read it and git carries it to
every clone, so it holds only the tasks of the principals who see everything: the local user (lines
without `principal`, as before) and admin tokens (`"principal": "<name>"`). A `user` token's tasks,
their tombstones and the dependencies on them stay in relay's store (`Shared` decides).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from relay.errors import RelayError, invalid
from relay.principal import LOCAL_NAME, NAME_PATTERN
from relay.tracker.model import (
    DEFAULT_PRIORITY,
    MAX_PRIORITY,
    MIN_PRIORITY,
    STATUSES,
    Task,
    Tombstone,
    check_labels,
    check_task_type,
    check_text,
    check_title,
    format_ts,
    parse_ts,
)
from relay.tracker.principals import owner_of
from relay.tracker.project import Project
from relay.tracker.store import TaskStore

TASKS_FILE = "tasks.jsonl"
MAX_ID_CHARS = 64
# Keys Gobby writes, then the fields relay adds so that no edit is lost in a round trip.
DEP_KEYS = {"blocks": "deps_on", "related": "related", "discovered-from": "discovered_from"}
# A task line's dependency lists by type (None: the line does not carry that type).
Edges = dict[str, list[str] | None]
FIX = f"fix or remove that line of {TASKS_FILE}"
# Whether a principal's tasks are written to the repository file (sync.py: the local user and admin tokens).
Shared = Callable[[str], bool]


def local_only(owner: str) -> bool:
    """The default `Shared`: only the local user's tasks go to the file."""
    return owner == LOCAL_NAME


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
    for dep_type, key in DEP_KEYS.items():
        if dep_type != "blocks":
            record[key] = sorted(types.get(f"{dep_type}:{task.id}", []))
    if owner_of(task.created_by) != LOCAL_NAME:
        record["principal"] = task.created_by
    return record


def tombstone_record(stone: Tombstone) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": stone.id,
        "deleted": True,
        "updated_at": stone.deleted_at,
        "project_id": stone.project_id,
        "cascade": stone.cascaded,
    }
    if stone.principal != LOCAL_NAME:
        record["principal"] = stone.principal
    return record


def records(store: TaskStore, project: Project, shared: Shared = local_only) -> list[dict[str, Any]]:
    """The project's task and tombstone lines of `shared` principals as the store holds them now, sorted by id
    (whoever asks: the file is the project's, not the caller's)."""
    tasks = [t for t in store.all_tasks(project, everyone=True) if shared(owner_of(t.created_by))]
    kept = {t.id for t in tasks}
    deps: dict[str, list[str]] = {}
    types: dict[str, list[str]] = {}
    for dep in store.all_dependencies(project, everyone=True):
        if dep.task_id not in kept or dep.depends_on not in kept:
            continue
        if dep.dep_type == "blocks":
            deps.setdefault(dep.task_id, []).append(dep.depends_on)
        else:
            types.setdefault(f"{dep.dep_type}:{dep.task_id}", []).append(dep.depends_on)
    out = [task_record(t, deps, types) for t in tasks]
    live = {t.id for t in store.all_tasks(project, everyone=True)}
    out += [tombstone_record(s) for s in store.tombstones(project) if s.id not in live and shared(s.principal)]
    return sorted(out, key=lambda r: r["id"])


def to_text(lines: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in lines)


def render(store: TaskStore, project: Project, shared: Shared = local_only) -> str:
    """The JSONL text for the project's tasks and tombstones of `shared` principals as the store holds them now."""
    return to_text(records(store, project, shared))


def line_owner(data: dict[str, Any], where: str) -> str:
    """The principal a line names (absent: the local user's, as every line before principals)."""
    raw = data.get("principal")
    if raw is None:
        return LOCAL_NAME
    if not isinstance(raw, str) or not NAME_PATTERN.match(raw):
        raise invalid(f"{where} names no usable principal ({str(raw)[:70]!r})", FIX)
    return raw


def _str_list(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):  # pyright: ignore[reportUnknownVariableType]
        raise invalid(f"{where} must be a list of task ids", FIX)
    return list(value)  # pyright: ignore[reportUnknownArgumentType]


def _timestamp(value: Any, where: str) -> str:
    try:
        return format_ts(parse_ts(str(value or "")))
    except RelayError as err:
        raise invalid(f"{where}: {err.message}", FIX) from None


def _tombstone(data: dict[str, Any], task_id: str, where: str, default_project_id: str) -> Tombstone:
    if "updated_at" not in data:
        raise invalid(f"{where} ({task_id}) is a tombstone without updated_at (when the task was deleted)", FIX)
    cascade = data.get("cascade", False)
    if not isinstance(cascade, bool):
        raise invalid(f"{where} ({task_id}) is a tombstone whose cascade is not true or false", FIX)
    project_id = data.get("project_id")
    return Tombstone(
        id=task_id,
        project_id=project_id if isinstance(project_id, str) and project_id else default_project_id,
        deleted_at=_timestamp(data["updated_at"], f"{where} ({task_id}) tombstone"),
        cascaded=cascade,
        principal=line_owner(data, f"{where} ({task_id})"),
    )


def parse_line(line: str, number: int, default_project_id: str) -> tuple[Task, Edges] | Tombstone:
    """A JSONL line as a Task and its dependency lists, or as the Tombstone of a deleted task."""
    where = f"{TASKS_FILE} line {number}"
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as err:
        raise invalid(f"{where} is not JSON ({err.msg})", FIX) from None
    if not isinstance(raw, dict):
        raise invalid(f"{where} is not a JSON object", FIX)
    data: dict[str, Any] = raw  # pyright: ignore[reportUnknownVariableType]
    task_id, title, status = data.get("id"), data.get("title"), data.get("status", "open")
    if not isinstance(task_id, str) or not task_id.strip() or len(task_id) > MAX_ID_CHARS:
        raise invalid(f"{where} has no usable id", FIX)
    deleted = data.get("deleted", False)
    if not isinstance(deleted, bool):
        raise invalid(f"{where} ({task_id}) has deleted {deleted!r}; a tombstone says deleted: true", FIX)
    if deleted:
        return _tombstone(data, task_id, where, default_project_id)
    if not isinstance(title, str) or not title.strip():
        raise invalid(f"{where} ({task_id}) has no title", FIX)
    if status not in STATUSES:
        raise invalid(f"{where} ({task_id}) has status {status!r}", f"use one of {', '.join(STATUSES)}")
    created = _timestamp(data.get("created_at") or data.get("updated_at"), f"{where} ({task_id})")
    updated = _timestamp(data.get("updated_at") or created, f"{where} ({task_id})")
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
        created_by=line_owner(data, f"{where} ({task_id})"),
    )
    edges: Edges = {
        dep_type: (_str_list(data[key], f"{where} {key}") if key in data else None)
        for dep_type, key in DEP_KEYS.items()
    }
    return task, edges


def check_task(task: Task) -> None:
    """The checks `create_task` and `update_task` apply, for a task that arrives by the JSONL file instead."""
    check_title(task.title)
    for what in ("description", "assignee", "closed_reason", "validation_feedback", "validation_status"):
        check_text(getattr(task, what), what)
    for what in ("parent_task_id", "discovered_in_session_id", "closed_at"):
        value = getattr(task, what)
        if value is not None and (len(value) > MAX_ID_CHARS or "\x00" in value):
            raise invalid(f"{what} is over {MAX_ID_CHARS} characters or contains NUL bytes", FIX)
    check_task_type(task.task_type)
    check_labels(list(task.labels))
