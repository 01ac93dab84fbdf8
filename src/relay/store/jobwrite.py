"""A job's writes sent together: its running mark, its events, the last of its outputs and its end, in one transaction.

A job's monitor gathers what one look at the job found (store/body.py's `write_job` sends it): on PostgreSQL one
round trip, on SQLite one commit, instead of one per kind of write. Each part is written only under the job's
claim (`epoch`), as the separate calls write it (mark_running, add_events, append_output, finish_job).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from relay.audit import finished_data
from relay.events import Event
from relay.store.records import SessionTurn


@dataclass(frozen=True)
class Running:
    """The job's process runs (mark_running's values; `at` is when it was spawned)."""

    at: float
    pid: int | None
    pid_start_ticks: int | None
    boot_id: str | None
    owner_pid: int
    owner_start_ticks: int | None
    deadline_at: float | None
    idle_timeout_s: float | None


@dataclass(frozen=True)
class End:
    """The job's final state (finish_job's values)."""

    status: str
    exit_code: int | None
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    session_id: str | None
    model: str | None
    output: str | None = None
    output_chars: int | None = None
    session: SessionTurn | None = None
    fence: bool = False  # and end the claim (a lost worker's job: nothing it writes later is taken)

    def audit_data(self) -> dict[str, Any]:
        """The end's audit entry: outcome, cost, tools, error and output (bounded)."""
        return finished_data(
            self.status,
            exit_code=self.exit_code,
            result=self.result,
            error=self.error,
            model=self.model,
            session_id=self.session_id,
            output=self.output,
            output_chars=self.output_chars,
        )


@dataclass
class JobWrite:
    """What one look at a job found, to be written at once."""

    job_id: str
    epoch: int | None = None
    running: Running | None = None
    first_seq: int = 0
    events: list[Event] = field(default_factory=lambda: [])
    session_id: str | None = None
    outputs: list[tuple[str, bytes]] = field(default_factory=lambda: [])
    end: End | None = None

    @property
    def empty(self) -> bool:
        return (
            self.running is None
            and not self.events
            and self.session_id is None
            and not self.outputs
            and self.end is None
        )

    def output_bytes(self) -> int:
        return sum(len(data) for _, data in self.outputs)


@dataclass(frozen=True)
class Written:
    """What a JobWrite did: `held` (the claim was still this one, and the running mark, when sent, landed: else
    nothing of it was written), `ended` (its end was written) and each appended stream's length after."""

    held: bool
    ended: bool = False
    sizes: dict[str, int] = field(default_factory=lambda: {})


class Writer(Protocol):
    def write_job(self, write: JobWrite) -> Written: ...


@dataclass
class Pending:
    """A job's writes gathered by one look at it, and what runs once it is written, told whether the job's claim
    still held."""

    write: JobWrite
    after: list[Callable[[Written], None]] = field(default_factory=lambda: [])

    def send(self, store: Writer) -> Written:
        done = store.write_job(self.write)
        for then in self.after:
            then(done)
        return done
