"""Steering: a message put into a running ACP job's live session (`job_send`), through the job's inbox.

The job's process is the ACP driver (relay.agents.acp): it tails `<job folder>/inbox.jsonl` and prompts the
session with each `send` message (after the current turn when the agent takes one prompt at a time), then reports
it delivered as a `steer` event, which is how the message lands in the job's events and transcript. relay puts the
message on the audit record as `job.message` when it posts it: who, which job, its length, its SHA-256 and its
text (bounded, as a job's prompt is kept). A job in print mode reads no inbox: its agent runs once per turn with
the prompt on its command line, so it is refused with how to switch the agent to ACP.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay.agents import get_adapter
from relay.agents import protocol_of as adapter_protocol
from relay.agents.acp.inbox import SEND, inbox_path, post
from relay.audit import bounded
from relay.config import Settings
from relay.errors import ErrorCode, RelayError
from relay.store import JobRecord, WorkerInfo, WorkerRecord

ACP = "acp"


def protocol_of(settings: Settings, rec: JobRecord) -> str:
    """How a job's agent is driven: "acp" (a live session relay can write to) or "print" (one run per turn).

    What the job was started with when its request says so, else what its agent's adapter is (`protocol = "acp"`
    in config.toml chooses the ACP adapter where the agent has one)."""
    stored = rec.request.get("protocol")
    if isinstance(stored, str) and stored:
        return stored
    try:
        return adapter_protocol(get_adapter(rec.agent, settings))
    except RelayError:
        return "print"


@dataclass(frozen=True)
class Sent:
    """A steering message relay posted to a job's inbox."""

    job_id: str
    message_id: str
    chars: int
    sha256: str


def _not_steerable(message: str, hint: str) -> RelayError:
    return RelayError(ErrorCode.NOT_STEERABLE, message, hint)


def elsewhere(store_spans_hosts: bool, rec: JobRecord, here: WorkerInfo, worker: WorkerRecord | None) -> str | None:
    """The host of the worker running the job when it is not this one (its inbox is in a folder there), else None."""
    if not store_spans_hosts or rec.worker is None or worker is None:
        return None
    if worker.host == here.host and (worker.boot_id is None or worker.boot_id == here.boot_id):
        return None
    return worker.host


def check(settings: Settings, rec: JobRecord, job_dir: Path, far_host: str | None) -> None:
    """Whether a message can reach the job's live session now; NOT_STEERABLE, saying why and what to do, if not."""
    if rec.is_final:
        resume = f"delegate(session_id='{rec.session_id}', ...)" if rec.session_id else "delegate"
        raise _not_steerable(
            f"job {rec.id} has ended ({rec.status}): it has no live session to send a message to",
            f"continue its conversation with {resume}, or start a new job",
        )
    if protocol_of(settings, rec) != ACP:
        raise _not_steerable(
            f"this agent runs in print mode ({rec.agent} job {rec.id}): it reads its prompt once, so no message can "
            "reach it while it runs",
            f'set protocol = "acp" in [agents.{rec.agent}] of {settings.home / "config.toml"} so its next jobs run '
            "over the Agent Client Protocol and take messages; for this job, job_cancel it and delegate again with "
            "the extra instructions",
        )
    if rec.status != "running":
        raise _not_steerable(
            f"job {rec.id} is {rec.status}: its session has not started yet",
            f"wait until it runs (job_status(job_id='{rec.id}')), then send the message",
        )
    if far_host is None and job_dir.is_dir() and not inbox_path(job_dir).is_file():  # made as the driver starts
        raise _not_steerable(
            f"job {rec.id} is starting: its driver has not opened the session's inbox yet",
            "send the message again in a moment",
        )
    if far_host is not None or not job_dir.is_dir():
        where = f"on host {far_host}" if far_host else "by a relay whose job folder this relay cannot reach"
        raise _not_steerable(
            f"job {rec.id} runs {where}: its inbox is a file there, out of this relay's reach",
            "send the message through a relay on that host (relay serve there, same store), or wait for its "
            "result and continue its session with delegate(session_id=...)",
        )


def send(settings: Settings, rec: JobRecord, job_dir: Path, text: str, audit: Any, *, who: str) -> Sent:
    """Post `text` to the job's inbox for its live session, and record it (`job.message`)."""
    if not text.strip():
        raise RelayError(ErrorCode.INVALID_ARGUMENT, "message is empty", "pass the text the agent should read")
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    sent = Sent(rec.id, secrets.token_hex(6), len(text), digest)
    try:
        post(job_dir, {"type": SEND, "id": sent.message_id, "text": text})
    except ValueError as exc:  # longer than one inbox line holds
        raise RelayError(
            ErrorCode.INVALID_ARGUMENT, f"message is too long for the job's inbox: {exc}", "send a shorter message"
        ) from None
    except OSError as exc:
        raise _not_steerable(
            f"job {rec.id}'s inbox could not be written: {exc}", "check the job with job_status; it may have ended"
        ) from None
    audit(
        "job.message",
        rec.id,
        {"id": sent.message_id, "principal": who, "chars": sent.chars, "sha256": digest, "text": bounded(text)},
    )
    return sent
