"""The tracker's values: tasks, dependencies, session links, and their dict shapes (Gobby's field names)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from relay.errors import invalid

STATUSES = ("open", "in_progress", "closed")
DEP_TYPES = ("blocks", "related", "discovered-from")
LINK_ACTIONS = ("worked_on", "discovered", "mentioned", "closed")
DIRECTIONS = ("blockers", "blocking", "both")
SYNC_DIRECTIONS = ("import", "export", "both")
TASK_TYPES = ("task", "bug", "feature", "epic", "chore")  # documented; any short string is accepted
MIN_PRIORITY, MAX_PRIORITY = 0, 4  # 1 high, 2 medium (default), 3 low; 0 critical and 4 backlog as in beads
DEFAULT_PRIORITY = 2
MAX_TITLE_CHARS = 500
MAX_TEXT_CHARS = 100_000
MAX_LABEL_CHARS = 100

# The brief format the list tools return (seed 003: "8 fields").
BRIEF_FIELDS = ("id", "title", "status", "priority", "type", "parent_task_id", "created_at", "updated_at")


def now_iso() -> str:
    """UTC now as ISO 8601 with microseconds: sortable as text, parsed back by `parse_ts`."""
    return format_ts(datetime.now(UTC))


def format_ts(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def parse_ts(text: str) -> datetime:
    """An ISO 8601 timestamp (with `Z`, an offset, or none = UTC) as an aware datetime."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        raise invalid(f"{text!r} is not an ISO 8601 timestamp", "use e.g. 2026-01-31T12:00:00+00:00") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Dependency:
    """`task_id` depends on `depends_on`; for `blocks`, the task cannot start before the blocker closes."""

    id: int
    task_id: str
    depends_on: str
    dep_type: str
    created_at: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "task_id": self.task_id,
            "depends_on": self.depends_on,
            "dep_type": self.dep_type,
            "created_at": self.created_at,
        }


@dataclass(frozen=True)
class Task:
    id: str
    project_id: str
    title: str
    status: str
    priority: int
    task_type: str
    created_at: str
    updated_at: str
    description: str | None = None
    parent_task_id: str | None = None
    discovered_in_session_id: str | None = None
    assignee: str | None = None
    labels: tuple[str, ...] = ()
    closed_reason: str | None = None
    closed_at: str | None = None
    platform_id: str | None = None
    validation_status: str | None = None
    validation_feedback: str | None = None
    original_instruction: str | None = None
    # Who created it and who changed it last (principal names; None: before relay recorded them).
    created_by: str | None = None
    changed_by: str | None = None

    def brief(self) -> dict[str, Any]:
        """The 8-field brief format of the list tools."""
        return {
            "id": self.id,
            "title": self.title,
            "status": self.status,
            "priority": self.priority,
            "type": self.task_type,
            "parent_task_id": self.parent_task_id,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }

    def to_dict(self) -> dict[str, Any]:
        """Gobby's full record (`to_dict()` fields, task_type serialised as `type`) plus `closed_at`."""
        return {
            "id": self.id,
            "project_id": self.project_id,
            "title": self.title,
            "status": self.status,
            "priority": self.priority,
            "type": self.task_type,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "description": self.description,
            "parent_task_id": self.parent_task_id,
            "discovered_in_session_id": self.discovered_in_session_id,
            "assignee": self.assignee,
            "labels": list(self.labels),
            "closed_reason": self.closed_reason,
            "closed_at": self.closed_at,
            "platform_id": self.platform_id,
            "validation_status": self.validation_status,
            "validation_feedback": self.validation_feedback,
            "original_instruction": self.original_instruction,
        }


@dataclass(frozen=True)
class Tombstone:
    """A deleted task: `deleted_at` orders it against edits (last write wins); `cascaded`: deleted with its subtasks;
    `principal`: whose task it was (tracker/principals.py)."""

    id: str
    project_id: str
    deleted_at: str
    cascaded: bool = False
    principal: str = "local"


@dataclass(frozen=True)
class SessionLink:
    task_id: str
    session_id: str
    action: str
    created_at: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "session_id": self.session_id,
            "action": self.action,
            "created_at": self.created_at,
        }


@dataclass(frozen=True)
class TaskChanges:
    """Fields `update_task` may change; None leaves a field as it is."""

    title: str | None = None
    description: str | None = None
    status: str | None = None
    priority: int | None = None
    assignee: str | None = None
    labels: tuple[str, ...] | None = None
    task_type: str | None = None
    parent_task_id: str | None = None
    validation_status: str | None = None
    validation_feedback: str | None = None


def check_one_of(value: str, allowed: tuple[str, ...], what: str) -> str:
    if value not in allowed:
        raise invalid(f"{what} {value!r} is not one of {', '.join(allowed)}", f"use one of: {', '.join(allowed)}")
    return value


def check_title(title: str) -> str:
    cleaned = title.strip()
    if not cleaned:
        raise invalid("title is empty", "give the task a short title, e.g. 'Fix login redirect'")
    if len(cleaned) > MAX_TITLE_CHARS:
        raise invalid(
            f"title is {len(cleaned)} characters; the limit is {MAX_TITLE_CHARS}", "put details in description"
        )
    if "\x00" in cleaned:
        raise invalid("title contains a NUL byte", "remove control characters")
    return cleaned


def check_text(value: str | None, what: str) -> str | None:
    if value is None:
        return None
    if len(value) > MAX_TEXT_CHARS or "\x00" in value:
        raise invalid(f"{what} is over {MAX_TEXT_CHARS} characters or contains NUL bytes", f"shorten {what}")
    return value


def check_priority(priority: int) -> int:
    if isinstance(priority, bool) or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise invalid(
            f"priority {priority!r} is outside {MIN_PRIORITY}..{MAX_PRIORITY}",
            "use 1 (high), 2 (medium, the default) or 3 (low); 0 is critical, 4 backlog",
        )
    return priority


def check_task_type(task_type: str) -> str:
    cleaned = task_type.strip()
    if not cleaned or len(cleaned) > MAX_LABEL_CHARS or "\x00" in cleaned:
        raise invalid(f"task_type {task_type[:100]!r} is not usable", f"use one of {', '.join(TASK_TYPES)}")
    return cleaned


def check_label(label: str) -> str:
    cleaned = label.strip()
    if not cleaned or len(cleaned) > MAX_LABEL_CHARS or "\x00" in cleaned:
        raise invalid(f"label {label[:100]!r} is empty, too long or has NUL bytes", "use a short word like 'backend'")
    return cleaned


def check_labels(labels: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Labels cleaned, without duplicates, in first-seen order."""
    return tuple(dict.fromkeys(check_label(label) for label in labels))


def task_from_row(d: dict[str, Any]) -> Task:
    """A task from a row of the `tasks` table (as a dict; its project column is dropped)."""
    d.pop("project", None)
    d["labels"] = tuple(json.loads(d["labels"] or "[]"))
    return Task(**d)
