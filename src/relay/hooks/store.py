"""Hook sessions in relay.db (migrations m007_hook_sessions, m018_hook_principals): the sessions CLIs report,
and their hook events.

A session belongs to the principal that reported it (relay/principal.py): its key is (principal, id), so
one principal's session ids name nothing of another's; rows from before principals are the local user's.
Every write takes the owner; every read of one session takes it too, and lists take a filter (None: all).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from relay.store.side import open_side

BUSY_TIMEOUT_S = 10.0
# How many of a session's latest prompts are kept (for titles and summaries), and how much of each.
KEPT_PROMPTS = 20
PROMPT_CHARS = 2000
EVENT_DATA_CHARS = 4000
STATUSES = ("active", "paused", "ended", "archived")


@dataclass(frozen=True)
class HookSession:
    """One session a CLI reported (or relay's codex tool tracked), and the principal it belongs to."""

    id: str
    principal: str
    source: str
    start_source: str | None
    machine_id: str
    cwd: str
    project: str
    project_id: str
    parent_session_id: str | None
    transcript_path: str | None
    title: str
    status: str
    summary: str | None
    summary_source: str | None
    prompts: tuple[str, ...]
    prompt_count: int
    created_at: float
    updated_at: float
    ended_at: float | None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["prompts"] = list(self.prompts)
        return d


def _session(row: sqlite3.Row) -> HookSession:
    d = dict(row)
    d["prompts"] = tuple(json.loads(d["prompts"] or "[]"))
    return HookSession(**d)


class HookStore:
    """Session rows and hook events; safe to share between the event loop and worker threads."""

    def __init__(self, db_path: Path) -> None:
        self._lock = threading.RLock()
        # Prompts and summaries: no statement keeps the last one bound (store/release.py).
        self._db = open_side(db_path, BUSY_TIMEOUT_S)
        self._db.execute("PRAGMA synchronous = NORMAL")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        with self._lock:
            return self._db.execute(sql, params)

    def get(self, session_id: str, principal: str) -> HookSession | None:
        """`principal`'s session `session_id` (another principal's of the same id is not it)."""
        row = self._exec("SELECT * FROM hook_sessions WHERE principal=? AND id=?", (principal, session_id)).fetchone()
        return _session(row) if row else None

    def start(
        self,
        session_id: str,
        *,
        principal: str,
        source: str,
        start_source: str | None,
        machine_id: str,
        cwd: str,
        project: str,
        project_id: str,
        parent_session_id: str | None,
        transcript_path: str | None,
    ) -> tuple[HookSession, bool]:
        """Register `principal`'s session, or re-activate a known one (resume); returns it and whether it is new."""
        now = time.time()
        with self._lock:
            known = self.get(session_id, principal)
            if known is None:
                self._exec(
                    "INSERT INTO hook_sessions (id, principal, source, start_source, machine_id, cwd, project,"
                    " project_id, parent_session_id, transcript_path, status, created_at, updated_at)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,'active',?,?)",
                    (
                        session_id,
                        principal,
                        source,
                        start_source,
                        machine_id,
                        cwd,
                        project,
                        project_id,
                        parent_session_id,
                        transcript_path,
                        now,
                        now,
                    ),
                )
            else:
                self._exec(
                    "UPDATE hook_sessions SET status='active', source=?, start_source=COALESCE(?, start_source),"
                    " transcript_path=COALESCE(?, transcript_path),"
                    " parent_session_id=COALESCE(parent_session_id, ?), ended_at=NULL, updated_at=?"
                    " WHERE principal=? AND id=?",
                    (source, start_source, transcript_path, parent_session_id, now, principal, session_id),
                )
            found = self.get(session_id, principal)
        assert found is not None
        return found, known is None

    def add_prompt(self, session_id: str, prompt: str, title: str | None, principal: str) -> HookSession:
        """Record a prompt; set the title when given (or when the session has none yet)."""
        with self._lock:
            found = self.get(session_id, principal)
            if found is None:
                raise KeyError(session_id)
            prompts = [*found.prompts, prompt[:PROMPT_CHARS]][-KEPT_PROMPTS:]
            new_title = title if title is not None else found.title
            self._exec(
                "UPDATE hook_sessions SET prompts=?, prompt_count=prompt_count+1, title=?, status='active',"
                " updated_at=? WHERE principal=? AND id=?",
                (json.dumps(prompts), new_title, time.time(), principal, session_id),
            )
            updated = self.get(session_id, principal)
        assert updated is not None
        return updated

    def set_status(self, session_id: str, status: str, principal: str) -> HookSession | None:
        now = time.time()
        ended = now if status == "ended" else None
        self._exec(
            "UPDATE hook_sessions SET status=?, updated_at=?, ended_at=COALESCE(?, ended_at) WHERE principal=? AND id=?",
            (status, now, ended, principal, session_id),
        )
        return self.get(session_id, principal)

    def set_summary(self, session_id: str, summary: str, summary_source: str, principal: str) -> HookSession | None:
        now = time.time()
        self._exec(
            "UPDATE hook_sessions SET summary=?, summary_source=?, status='ended', ended_at=?, updated_at=?"
            " WHERE principal=? AND id=?",
            (summary, summary_source, now, now, principal, session_id),
        )
        return self.get(session_id, principal)

    def set_transcript(self, session_id: str, transcript_path: str, principal: str) -> None:
        self._exec(
            "UPDATE hook_sessions SET transcript_path=? WHERE principal=? AND id=?",
            (transcript_path, principal, session_id),
        )

    def record_event(self, session_id: str, hook_type: str, data: dict[str, Any], principal: str) -> None:
        text = json.dumps(data, default=str)[:EVENT_DATA_CHARS]
        now = time.time()
        with self._lock:
            self._exec(
                "INSERT INTO hook_events (session_id, principal, hook_type, data, created_at) VALUES (?,?,?,?,?)",
                (session_id, principal, hook_type, text, now),
            )
            self._exec("UPDATE hook_sessions SET updated_at=? WHERE principal=? AND id=?", (now, principal, session_id))

    def event_counts(self, session_id: str, principal: str) -> dict[str, int]:
        rows = self._exec(
            "SELECT hook_type, COUNT(*) FROM hook_events WHERE principal=? AND session_id=?"
            " GROUP BY hook_type ORDER BY hook_type",
            (principal, session_id),
        ).fetchall()
        return {str(r[0]): int(r[1]) for r in rows}

    def last_in_project(self, project: str, exclude: str, principal: str) -> HookSession | None:
        """`principal`'s most recently active session in the project other than `exclude` (never another's)."""
        row = self._exec(
            "SELECT * FROM hook_sessions WHERE principal=? AND project=? AND id<>? AND status<>'archived'"
            " ORDER BY updated_at DESC, created_at DESC LIMIT 1",
            (principal, project, exclude),
        ).fetchone()
        return _session(row) if row else None

    def list(
        self, *, source: str | None = None, limit: int = 50, offset: int = 0, principal: str | None = None
    ) -> list[HookSession]:
        """Sessions, most recently active first (source matched case-insensitively; with `principal`, its own)."""
        where: list[str] = []
        params: list[Any] = []
        if principal is not None:
            where.append("principal=?")
            params.append(principal)
        if source:
            where.append("lower(source)=lower(?)")
            params.append(source)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        rows = self._exec(
            f"SELECT * FROM hook_sessions{clause} ORDER BY updated_at DESC LIMIT ? OFFSET ?", (*params, limit, offset)
        ).fetchall()
        return [_session(r) for r in rows]
