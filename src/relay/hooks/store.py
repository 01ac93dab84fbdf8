"""Hook sessions in relay.db (migration m007_hook_sessions): the sessions CLIs report, and their hook events."""

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
    """One session a CLI reported (or relay's codex tool tracked)."""

    id: str
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

    def get(self, session_id: str) -> HookSession | None:
        row = self._exec("SELECT * FROM hook_sessions WHERE id=?", (session_id,)).fetchone()
        return _session(row) if row else None

    def start(
        self,
        session_id: str,
        *,
        source: str,
        start_source: str | None,
        machine_id: str,
        cwd: str,
        project: str,
        project_id: str,
        parent_session_id: str | None,
        transcript_path: str | None,
    ) -> tuple[HookSession, bool]:
        """Register a session, or re-activate a known one (resume); returns it and whether it is new."""
        now = time.time()
        with self._lock:
            known = self.get(session_id)
            if known is None:
                self._exec(
                    "INSERT INTO hook_sessions (id, source, start_source, machine_id, cwd, project, project_id,"
                    " parent_session_id, transcript_path, status, created_at, updated_at)"
                    " VALUES (?,?,?,?,?,?,?,?,?,'active',?,?)",
                    (
                        session_id,
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
                    " parent_session_id=COALESCE(parent_session_id, ?), ended_at=NULL, updated_at=? WHERE id=?",
                    (source, start_source, transcript_path, parent_session_id, now, session_id),
                )
            found = self.get(session_id)
        assert found is not None
        return found, known is None

    def add_prompt(self, session_id: str, prompt: str, title: str | None) -> HookSession:
        """Record a prompt; set the title when given (or when the session has none yet)."""
        with self._lock:
            found = self.get(session_id)
            if found is None:
                raise KeyError(session_id)
            prompts = [*found.prompts, prompt[:PROMPT_CHARS]][-KEPT_PROMPTS:]
            new_title = title if title is not None else found.title
            self._exec(
                "UPDATE hook_sessions SET prompts=?, prompt_count=prompt_count+1, title=?, status='active',"
                " updated_at=? WHERE id=?",
                (json.dumps(prompts), new_title, time.time(), session_id),
            )
            updated = self.get(session_id)
        assert updated is not None
        return updated

    def set_status(self, session_id: str, status: str) -> HookSession | None:
        now = time.time()
        ended = now if status == "ended" else None
        self._exec(
            "UPDATE hook_sessions SET status=?, updated_at=?, ended_at=COALESCE(?, ended_at) WHERE id=?",
            (status, now, ended, session_id),
        )
        return self.get(session_id)

    def set_summary(self, session_id: str, summary: str, summary_source: str) -> HookSession | None:
        now = time.time()
        self._exec(
            "UPDATE hook_sessions SET summary=?, summary_source=?, status='ended', ended_at=?, updated_at=? WHERE id=?",
            (summary, summary_source, now, now, session_id),
        )
        return self.get(session_id)

    def set_transcript(self, session_id: str, transcript_path: str) -> None:
        self._exec("UPDATE hook_sessions SET transcript_path=? WHERE id=?", (transcript_path, session_id))

    def record_event(self, session_id: str, hook_type: str, data: dict[str, Any]) -> None:
        text = json.dumps(data, default=str)[:EVENT_DATA_CHARS]
        now = time.time()
        with self._lock:
            self._exec(
                "INSERT INTO hook_events (session_id, hook_type, data, created_at) VALUES (?,?,?,?)",
                (session_id, hook_type, text, now),
            )
            self._exec("UPDATE hook_sessions SET updated_at=? WHERE id=?", (now, session_id))

    def event_counts(self, session_id: str) -> dict[str, int]:
        rows = self._exec(
            "SELECT hook_type, COUNT(*) FROM hook_events WHERE session_id=? GROUP BY hook_type ORDER BY hook_type",
            (session_id,),
        ).fetchall()
        return {str(r[0]): int(r[1]) for r in rows}

    def last_in_project(self, project: str, exclude: str) -> HookSession | None:
        """The project's most recently active session other than `exclude`."""
        row = self._exec(
            "SELECT * FROM hook_sessions WHERE project=? AND id<>? AND status<>'archived'"
            " ORDER BY updated_at DESC, created_at DESC LIMIT 1",
            (project, exclude),
        ).fetchone()
        return _session(row) if row else None

    def list(self, *, source: str | None = None, limit: int = 50, offset: int = 0) -> list[HookSession]:
        """Sessions, most recently active first (source matched case-insensitively)."""
        if source:
            rows = self._exec(
                "SELECT * FROM hook_sessions WHERE lower(source)=lower(?) ORDER BY updated_at DESC LIMIT ? OFFSET ?",
                (source, limit, offset),
            ).fetchall()
        else:
            rows = self._exec(
                "SELECT * FROM hook_sessions ORDER BY updated_at DESC LIMIT ? OFFSET ?", (limit, offset)
            ).fetchall()
        return [_session(r) for r in rows]
