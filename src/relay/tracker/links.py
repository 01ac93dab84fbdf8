"""Session links of the task tracker: which agent sessions worked on, created or closed a task (m006_tasks'
`task_sessions`), mixed into `TaskStore`.

A link records the principal that made it (m019_task_principals): a session's tasks are the links its own
principal made to tasks it may see, so a user linking its task to another's session id (another user's, the
local user's) puts nothing into that session's list or its SessionEnd summary."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from relay.errors import invalid
from relay.principal import current, visible_to
from relay.tracker.model import LINK_ACTIONS, SessionLink, Task, check_one_of, task_from_row
from relay.tracker.principals import linker, owned
from relay.tracker.project import Project


class SessionLinks:
    """The session half of `TaskStore` (which provides the connection, its transactions and `get`)."""

    _clock: Callable[[], str]

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        raise NotImplementedError

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def get(self, project: Project, task_id: str) -> Task:
        raise NotImplementedError

    def link_session(self, project: Project, task_id: str, session_id: str, action: str = "worked_on") -> SessionLink:
        check_one_of(action, LINK_ACTIONS, "action")
        if not session_id.strip() or "\x00" in session_id or len(session_id) > 200:
            raise invalid("session_id is required", "pass the session id your CLI reported")
        with self.transaction() as db:
            self.get(project, task_id)
            db.execute(
                "INSERT OR IGNORE INTO task_sessions (project, task_id, session_id, action, created_at, principal)"
                " VALUES (?,?,?,?,?,?)",
                (project.key, task_id, session_id, action, self._clock(), linker()),
            )
            row = db.execute(
                "SELECT * FROM task_sessions WHERE project=? AND task_id=? AND session_id=? AND action=?",
                (project.key, task_id, session_id, action),
            ).fetchone()
        return SessionLink(row["task_id"], row["session_id"], row["action"], row["created_at"])

    def session_tasks(
        self, project: Project, session_id: str, *, linked_by: str | None = None, everyone: bool = False
    ) -> list[tuple[Task, str]]:
        """The tasks linked to a session: the links `linked_by` made (default: the current principal, whose
        session it is in a SessionEnd summary; `everyone`: anyone's, for an admin's list), to tasks it sees."""
        by = None if everyone else (linked_by or current().name)
        mine, who = owned("t.")
        rows = self._rows(
            "SELECT t.*, s.action AS link_action FROM task_sessions s"
            " JOIN tasks t ON t.project=s.project AND t.id=s.task_id"
            f" WHERE s.project=? AND s.session_id=? AND (? IS NULL OR s.principal=?) AND {mine}"
            " ORDER BY s.created_at, t.id",
            (project.key, session_id, by, by, *who),
        )
        out: list[tuple[Task, str]] = []
        for row in rows:
            d = dict(row)
            action = d.pop("link_action")
            out.append((task_from_row(d), action))
        return out

    def task_sessions(self, project: Project, task_id: str) -> list[SessionLink]:
        """The sessions linked to a task the current principal sees: a user sees the links it made."""
        self.get(project, task_id)
        by = visible_to()
        rows = self._rows(
            "SELECT * FROM task_sessions WHERE project=? AND task_id=? AND (? IS NULL OR principal=?)"
            " ORDER BY created_at, session_id",
            (project.key, task_id, by, by),
        )
        return [SessionLink(r["task_id"], r["session_id"], r["action"], r["created_at"]) for r in rows]
