"""The job store's one face: what the job engine may call, whichever backend (SQLite or PostgreSQL) holds it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from relay.audit import AuditLog
from relay.events import Event
from relay.store.claims import ClaimAsk, WorkerInfo, WorkerRecord
from relay.store.db import JobRecord, SessionRecord, SessionTurn
from relay.store.jobwrite import JobWrite, Written
from relay.store.records import NewJob


class JobStore(Protocol):
    """Jobs, their events and outputs, agent sessions: `Store` (SQLite) and `PgStore` (PostgreSQL) both are one."""

    audit: AuditLog
    # Whether processes of other hosts use this store: then a job's output files are copied into it
    # (jobs/mirror.py), for fronts that have no such files. False for SQLite (one host, one home).
    spans_hosts: bool
    # Whether its calls are round trips to a server, so that jobs submitted together are worth one transaction
    # (PostgreSQL); a SQLite store's writes take turns on one file, each a commit of its own.
    overlaps_calls: bool

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
        labels: Sequence[str] = (),
        retry: str | None = None,
        claim: ClaimAsk | None = None,
    ) -> list[tuple[str, str, int]]: ...

    def insert_jobs(self, jobs: Sequence[NewJob], claim: ClaimAsk | None) -> list[tuple[str, str, int]]: ...

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
        epoch: int | None = None,
    ) -> bool: ...

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
        epoch: int | None = None,
        fence: bool = False,
        output_chars: int | None = None,
    ) -> bool: ...

    def write_job(self, write: JobWrite) -> Written: ...

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
        self,
        job_id: str,
        first_seq: int,
        events: Sequence[Event],
        *,
        session_id: str | None = None,
        epoch: int | None = None,
    ) -> bool: ...

    def max_event_seq(self, job_id: str) -> int: ...

    def events(self, job_id: str, after_seq: int = -1, limit: int = 1000) -> list[tuple[int, float, Event]]: ...

    def append_output(self, job_id: str, stream: str, data: bytes, *, epoch: int | None = None) -> int: ...

    def read_output_page(self, job_id: str, stream: str, offset: int, limit: int) -> tuple[bytes, int]: ...

    def output_sizes(self, job_id: str) -> dict[str, int]: ...

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

    # claims and workers (store/claims.py) --------------------------------------------------

    def register_worker(self, info: WorkerInfo) -> None: ...

    def heartbeat(self, worker_id: str, lease_s: float) -> bool: ...

    def stop_worker(self, worker_id: str, state: str) -> None: ...

    def prune_workers(self, older_than: float) -> int: ...

    def list_workers(self, *, include_stopped: bool = True) -> list[WorkerRecord]: ...

    def get_worker(self, worker_id: str) -> WorkerRecord | None: ...

    def claim(
        self,
        worker: WorkerInfo,
        *,
        free: int,
        max_total: int,
        per_agent: Callable[[str], int],
        only: Sequence[str] = (),
    ) -> list[tuple[str, str, int]]: ...

    def take_over(self, job_id: str, epoch: int, worker: WorkerInfo) -> int | None: ...

    def place_job(self, job_id: str, request: dict[str, Any], cwd: str, *, epoch: int | None) -> bool: ...

    def unclaim(self, job_id: str, epoch: int, *, requeue_running: bool = False) -> bool: ...

    def expired_leases(self, now: float | None = None) -> list[tuple[str, str, int, str | None, str | None]]: ...

    def active_jobs_of_host(self, boot_id: str | None) -> list[JobRecord]: ...

    def claim_states(self, job_ids: Sequence[str]) -> dict[str, tuple[str | None, int, str, bool]]: ...

    def queue_version(self) -> int: ...

    def has_queued(self) -> bool: ...

    def queue_depth(self) -> list[tuple[str, str | None, int, float]]: ...

    def clock(self) -> float: ...
