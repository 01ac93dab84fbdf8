"""Session links of the task tracker: which agent sessions worked on, created or closed a task (m006_tasks'
`task_sessions`), mixed into `TaskStore`."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from relay.errors import invalid
from relay.tracker.model import LINK_ACTIONS, SessionLink, Task, check_one_of, task_from_row
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
                "INSERT OR IGNORE INTO task_sessions (project, task_id, session_id, action, created_at)"
                " VALUES (?,?,?,?,?)",
                (project.key, task_id, session_id, action, self._clock()),
            )
            row = db.execute(
                "SELECT * FROM task_sessions WHERE project=? AND task_id=? AND session_id=? AND action=?",
                (project.key, task_id, session_id, action),
            ).fetchone()
        return SessionLink(row["task_id"], row["session_id"], row["action"], row["created_at"])

    def session_tasks(self, project: Project, session_id: str) -> list[tuple[Task, str]]:
        rows = self._rows(
            "SELECT t.*, s.action AS link_action FROM task_sessions s"
            " JOIN tasks t ON t.project=s.project AND t.id=s.task_id"
            " WHERE s.project=? AND s.session_id=? ORDER BY s.created_at, t.id",
            (project.key, session_id),
        )
        out: list[tuple[Task, str]] = []
        for row in rows:
            d = dict(row)
            action = d.pop("link_action")
            out.append((task_from_row(d), action))
        return out

    def task_sessions(self, project: Project, task_id: str) -> list[SessionLink]:
        self.get(project, task_id)
        rows = self._rows(
            "SELECT * FROM task_sessions WHERE project=? AND task_id=? ORDER BY created_at, session_id",
            (project.key, task_id),
        )
        return [SessionLink(r["task_id"], r["session_id"], r["action"], r["created_at"]) for r in rows]
