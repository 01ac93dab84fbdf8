"""The store's records, whichever backend holds them: a job (and a new one), an agent session and its turn, the
audit mark."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

ACTIVE_STATUSES = ("queued", "running")
FINAL_STATUSES = ("completed", "failed", "cancelled", "timed_out", "interrupted")


@dataclass(frozen=True)
class NewJob:
    """A job to record as queued (`insert_job`'s values; `owner`: pid and start ticks of an in-process task's)."""

    id: str
    agent: str
    kind: str
    request: dict[str, Any]
    model: str | None
    cwd: str | None
    owner: tuple[int, int | None] | None = None
    principal: str = "local"
    labels: Sequence[str] = ()
    retry: str | None = None

    def row(self, now: float) -> tuple[Any, ...]:
        """The values of its row (the store's INSERT_JOB), created at `now`."""
        owner_pid, owner_ticks = self.owner if self.owner is not None else (None, None)
        request, labels = self.request, self.labels
        session = request.get("session_id")
        return (self.id, self.agent, self.kind, json.dumps(request), self.model, self.cwd, session, now, owner_pid,
                owner_ticks, self.principal, json.dumps(sorted(labels)) if labels else None, self.retry)  # fmt: skip


@dataclass(frozen=True)
class JobRecord:
    """A job row. Its JSON columns are decoded on first use: a list of 500 jobs decodes only what it shows."""

    id: str
    agent: str
    kind: str
    status: str
    request_json: str
    model: str | None
    cwd: str | None
    session_id: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    deadline_at: float | None
    idle_timeout_s: float | None
    pid: int | None
    pid_start_ticks: int | None
    boot_id: str | None
    owner_pid: int | None
    owner_start_ticks: int | None
    cancel_requested: bool
    stop_reason: str | None
    exit_code: int | None
    result_json: str | None
    error_json: str | None
    # Who started it (relay/principal.py): the local user for stdio, the CLI and rows from before principals.
    principal: str = "local"
    # The claim it runs under (store/claims.py): the worker holding it and the fencing epoch of that claim.
    worker: str | None = None
    epoch: int = 0

    @property
    def is_final(self) -> bool:
        return self.status in FINAL_STATUSES

    @cached_property
    def request(self) -> dict[str, Any]:
        return json.loads(self.request_json) if self.request_json else {}

    @cached_property
    def result(self) -> dict[str, Any] | None:
        return json.loads(self.result_json) if self.result_json else None

    @cached_property
    def error(self) -> dict[str, Any] | None:
        return json.loads(self.error_json) if self.error_json else None


@dataclass(frozen=True)
class SessionRecord:
    agent: str
    session_id: str
    cwd: str
    model: str | None
    permission: str
    title: str
    turns: int
    total_cost_usd: float
    created_at: float
    last_used_at: float
    principal: str = "local"


@dataclass(frozen=True)
class SessionTurn:
    """One more turn of an agent session, as a finished job counts it."""

    agent: str
    session_id: str
    cwd: str
    model: str | None
    permission: str
    title: str
    cost: float
    principal: str = "local"

    def params(self, now: float) -> tuple[Any, ...]:
        return (
            self.agent,
            self.session_id,
            self.cwd,
            self.model,
            self.permission,
            self.title,
            self.cost,
            now,
            now,
            self.principal,
        )


# The jobs columns in JobRecord's field order (named, so a column added later cannot shift them).
JOB_COLUMNS = (
    "id, agent, kind, status, request, model, cwd, session_id, created_at, started_at, finished_at, deadline_at,"
    " idle_timeout_s, pid, pid_start_ticks, boot_id, owner_pid, owner_start_ticks, cancel_requested, stop_reason,"
    " exit_code, result, error, principal, worker, epoch"
)


def job_of(r: tuple[Any, ...]) -> JobRecord:
    """A job row: the 26 columns of JOB_COLUMNS, in JobRecord's field order (cancel_requested, 19th, 0/1 or a bool)."""
    return JobRecord(*r[:18], bool(r[18]), *r[19:])  # pyright: ignore[reportCallIssue]


@dataclass(frozen=True)
class AuditExpectation:
    """What the store knows of the audit log: the last entry relay wrote (seq, hash), and how many jobs it holds."""

    mark: tuple[int, str] | None
    jobs: int
