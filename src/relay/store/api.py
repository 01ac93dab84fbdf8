"""The job store's one face: what the job engine may call, whichever backend (SQLite or PostgreSQL) holds it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from relay.audit import AuditLog
from relay.events import Event
from relay.store.db import JobRecord, SessionRecord, SessionTurn


class JobStore(Protocol):
    """Jobs, their events and outputs, agent sessions: `Store` (SQLite) and `PgStore` (PostgreSQL) both are one."""

    audit: AuditLog

    def close(self) -> None: ...

    def applied_migrations(self) -> list[str]: ...

    def insert_job(
        self,
        job_id: str,
        agent: str,
        kind: str,
        request: dict[str, Any],
        model: str | None,
        cwd: str | None,
        *,
        owner: tuple[int, int | None] | None = None,
        principal: str = "local",
    ) -> None: ...

    def mark_running(
        self,
        job_id: str,
        *,
        pid: int | None,
        pid_start_ticks: int | None,
        boot_id: str | None,
        owner_pid: int,
        owner_start_ticks: int | None,
        deadline_at: float | None,
        idle_timeout_s: float | None,
    ) -> None: ...

    def set_owner(self, job_id: str, owner_pid: int, owner_start_ticks: int | None) -> None: ...

    def claim_job(self, rec: JobRecord, owner_pid: int, owner_start_ticks: int | None) -> bool: ...

    def request_cancel(self, job_id: str) -> None: ...

    def set_stop_reason(self, job_id: str, reason: str) -> None: ...

    def set_session(self, job_id: str, session_id: str) -> None: ...

    def finish_job(
        self,
        job_id: str,
        status: str,
        *,
        exit_code: int | None,
        result: dict[str, Any] | None,
        error: dict[str, Any] | None,
        session_id: str | None,
        model: str | None,
        output: str | None = None,
        session: SessionTurn | None = None,
    ) -> bool: ...

    def get_job(self, job_id: str, *, principal: str | None = None) -> JobRecord | None: ...

    def find_jobs(self, prefix: str, *, principal: str | None = None) -> list[JobRecord]: ...

    def list_jobs(
        self,
        *,
        statuses: Iterable[str] = (),
        agent: str | None = None,
        since: float | None = None,
        session_id: str | None = None,
        limit: int = 50,
        before: tuple[float, str] | None = None,
        via: str | None = None,
        principal: str | None = None,
    ) -> list[JobRecord]: ...

    def add_events(
        self, job_id: str, first_seq: int, events: Sequence[Event], *, session_id: str | None = None
    ) -> None: ...

    def max_event_seq(self, job_id: str) -> int: ...

    def events(self, job_id: str, after_seq: int = -1, limit: int = 1000) -> list[tuple[int, float, Event]]: ...

    def append_output(self, job_id: str, stream: str, data: bytes) -> int: ...

    def read_output_page(self, job_id: str, stream: str, offset: int, limit: int) -> tuple[bytes, int]: ...

    def upsert_session(
        self,
        agent: str,
        session_id: str,
        *,
        cwd: str,
        model: str | None,
        permission: str,
        title: str,
        cost: float,
    ) -> None: ...

    def get_session(
        self, session_id: str, agent: str | None = None, *, principal: str | None = None
    ) -> SessionRecord | None: ...

    def list_sessions(
        self, *, agent: str | None = None, limit: int = 50, principal: str | None = None
    ) -> list[SessionRecord]: ...
