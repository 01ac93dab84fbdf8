"""`job_send`'s reply, and the call into the core (relay.jobs.steer) with what only the engine knows."""

from __future__ import annotations

from pydantic import BaseModel, Field

from relay.errors import ErrorCode, RelayError
from relay.jobs import grants, steer
from relay.jobs.engine import Engine
from relay.principal import current


class SentMessage(BaseModel):
    """A message relay put into a running job's inbox for its live session."""

    job_id: str
    message_id: str = Field(description="the id the job's transcript names the message by once delivered")
    chars: int
    sha256: str
    status: str = Field(description="sent: in the job's inbox; the agent reads it after its current turn")
    next_step: str


async def send_message(engine: Engine, job_id: str, message: str, who: str) -> SentMessage:
    """Check the job can take a message, post it, and say what happens next. Into a job running above the caller's
    grant (the person said yes to its own task), the person is asked about the message first."""
    rec = engine.get(job_id)  # another principal's job answers JOB_NOT_FOUND, as if there were none
    if rec.principal != current().name:  # an admin sees every job, but speaks only into its own
        raise RelayError(
            ErrorCode.PERMISSION_NOT_GRANTED,
            f"job {rec.id} was started by {rec.principal!r}: only the principal that started a job sends into it",
            f"ask {rec.principal!r} to send it, or job_cancel the job",
        )
    job_dir = engine.files(rec.id).dir
    store = engine.store
    worker = store.get_worker(rec.worker) if store.spans_hosts and rec.worker else None
    steer.check(engine.settings, rec, job_dir, steer.elsewhere(store.spans_hosts, rec, engine.worker, worker))
    via = rec.request.get("via")
    await grants.permit_message(
        engine.settings,
        str(rec.request.get("permission") or "read-only"),
        agent=rec.agent,
        cwd=str(rec.request.get("cwd") or rec.cwd or ""),
        message=message,
        via=via if isinstance(via, str) else None,
        audit=store.audit.record,
    )
    sent = steer.send(engine.settings, rec, job_dir, message, store.audit.record, who=who)
    return SentMessage(
        job_id=sent.job_id,
        message_id=sent.message_id,
        chars=sent.chars,
        sha256=sent.sha256,
        status="sent",
        next_step=f"job_wait(job_ids=['{rec.id}']); job_result(job_id='{rec.id}', view='transcript') shows it "
        "as a steer event once the agent has it",
    )
