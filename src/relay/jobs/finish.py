"""End of a job: its status, error and result from the parser and the stop reason, recorded once."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path

from relay.agents.base import Parser
from relay.errors import ErrorCode, RelayError
from relay.events import AgentResult
from relay.jobs.envelope import job_title
from relay.jobs.gitprobe import changed_files
from relay.jobs.mirror import Mirror
from relay.jobs.output import keep_text_file, write_bytes
from relay.jobs.state import JobState
from relay.jobs.workspace import JobWorkspaces
from relay.secrets import redact
from relay.store import JobRecord, SessionTurn
from relay.store.health import disk_full, low_space, os_error
from relay.store.jobwrite import End, JobWrite, Pending
from relay.telemetry import job as telemetry

# A stop reason for a job whose output the store could not keep: `store:<ErrorCode>`.
STORE_STOP = "store:"
_STORAGE_CODES = (
    ErrorCode.DISK_FULL,
    ErrorCode.STORE_READONLY,
    ErrorCode.STORE_BUSY,
    ErrorCode.STORE_DAMAGED,
    ErrorCode.STORE_UNAVAILABLE,
)


def storage_failure(exc: BaseException, where: Path) -> RelayError | None:
    """The RelayError for a failure to keep a job's data (a file or the store), None for any other exception."""
    if isinstance(exc, RelayError):
        return exc if exc.code in _STORAGE_CODES else None
    if isinstance(exc, OSError):
        return os_error(exc, where)
    return None


def _store_stop_error(code: str, where: Path) -> RelayError:
    if code == ErrorCode.DISK_FULL.value:
        return disk_full(where)
    try:
        err_code = ErrorCode(code)
    except ValueError:
        err_code = ErrorCode.INTERNAL
    return RelayError(err_code, "the job's output could not be stored, so it was stopped", "run `relay doctor`")


class Finisher:
    """Writes a job's final row, result file and agent session; a job already final is left alone."""

    def __init__(self, state: JobState) -> None:
        self._state = state
        self.workspaces = JobWorkspaces(state)

    def finalize(
        self,
        job_id: str,
        parser: Parser,
        exit_code: int | None,
        stop_reason: str | None,
        pending: Pending | None = None,
        mirror: Mirror | None = None,
    ) -> None:
        """A CLI job's process has ended: ask the parser for the result and record the outcome (with the job's
        `pending` writes, in one transaction; `mirror`: the job's, which knows what the store holds of its files)."""
        state = self._state
        files = state.files(job_id)
        if state.fence.cut(job_id, files.dir):
            return  # past the lease this worker last renewed (jobs/fence.py): the job's end is the store's to judge
        rec = state.store.get_job(job_id)
        if rec is None or rec.is_final:
            if pending is not None:
                pending.send(state.store)  # what its last look found, as it would have been written then
            return
        stop = stop_reason or rec.stop_reason
        result = parser.finish(exit_code, files.stderr_tail())
        live = state.live.get(job_id)
        if live is not None and live.git_before is not None and rec.cwd:
            # Agents do not always report edits (codex's shell writes, sandbox refusals): ask git.
            changed = changed_files(live.git_before, rec.cwd)
            result = replace(result, files_changed=tuple(sorted(changed | set(result.files_changed))))
        error = result.error
        if stop == "cancelled":
            status = "cancelled"
            error = RelayError(ErrorCode.CANCELLED, "the job was cancelled", "its output so far is kept: job_result")
        elif stop == "limit:cost":
            status = "failed"
            error = RelayError(
                ErrorCode.LIMIT_REACHED,
                f"the job's reported cost passed the cap of ${state.settings.max_cost_usd}",
                "raise jobs.max_cost_usd in config.toml, or give the agent a smaller task",
            )
        elif stop and stop.startswith(STORE_STOP):
            status = "failed"
            error = _store_stop_error(stop.removeprefix(STORE_STOP), state.settings.home)
        elif stop and stop.startswith("timed_out"):
            status = "timed_out"
            what = "printed nothing for its idle timeout" if stop.endswith("idle") else "ran past its timeout"
            error = RelayError(
                ErrorCode.TIMEOUT,
                f"the job {what} and was stopped",
                "raise timeout_s / idle_timeout_s, or split the task",
            )
        elif result.ok:
            status, error = "completed", None
        elif exit_code is None:
            status = "interrupted"
            error = error or RelayError(
                ErrorCode.INTERRUPTED, "the job's process ended without an exit status", "run it again"
            )
        else:
            status = "failed"
        if status in ("failed", "interrupted") and low_space(files.dir):
            # The agent's output stopped because the disk filled (its writes failed): say so.
            status, error = "failed", disk_full(state.settings.home)
        self.store_result(rec, status, result, error, exit_code, pending, mirror)

    def fail(self, rec: JobRecord, err: RelayError) -> None:
        self.store_result(rec, "failed", AgentResult(ok=False, error=err), err, None)

    def finish_without_process(self, rec: JobRecord) -> None:
        err = RelayError(ErrorCode.CANCELLED, "the job was cancelled before it started", "submit it again if needed")
        self.store_result(rec, "cancelled", AgentResult(ok=False, error=err), err, None)

    def end_task(self, rec: JobRecord, stop: str | None, outcome: AgentResult | None) -> None:
        """Record an in-process job's end: cancelled or timed out by `stop`, else what its task returned."""
        if stop == "cancelled":
            err = RelayError(ErrorCode.CANCELLED, "the job was cancelled", "its output so far is kept: job_result")
            self.store_result(rec, "cancelled", outcome or AgentResult(ok=False, error=err), err, None)
        elif stop:
            err = RelayError(ErrorCode.TIMEOUT, "the job ran past its timeout and was stopped", "raise timeout_s")
            self.store_result(rec, "timed_out", outcome or AgentResult(ok=False, error=err), err, None)
        elif outcome is not None:
            self.store_result(rec, "completed" if outcome.ok else "failed", outcome, outcome.error, None)

    def store_result(
        self,
        rec: JobRecord,
        status: str,
        result: AgentResult,
        error: RelayError | None,
        exit_code: int | None,
        pending: Pending | None = None,
        mirror: Mirror | None = None,
    ) -> None:
        """Record the job's end: its result file, the rest of its outputs (`mirror`, when the store spans hosts), its
        final state and its session's turn, in one transaction with its `pending` writes (its last events)."""
        state = self._state
        files = state.files(rec.id)
        chars: int | None = None
        if result.text_file is not None:  # too large to hold: redacted and written a window at a time
            chars, text = keep_text_file(result.text_file, files.result, state.secrets)
        else:
            text = redact(result.text, state.secrets)
            data = text.encode("utf-8")
            try:
                write_bytes(files.result, data, append=False)
            except FileNotFoundError:  # no folder: a queued job cancelled through a front that never had it
                if text:
                    files.dir.mkdir(parents=True, exist_ok=True)
                    write_bytes(files.result, data, append=False)
            state.keep_result(rec.id, text)
        # The prompt file (a prompt passed on stdin) may hold a pasted key: not kept past the job's end.
        with contextlib.suppress(OSError):
            files.stdin.unlink(missing_ok=True)
        payload = state.redacted(
            {
                "usage": result.usage.to_dict(),
                "cost_usd": result.cost_usd,
                "num_turns": result.num_turns,
                "tool_uses": list(result.tool_uses),
                "permission_denials": list(result.permission_denials),
                "files_changed": list(result.files_changed),
            }
        )
        # A worktree job: what the agent left becomes a commit on its branch, whatever the job's end.
        payload = self.workspaces.seal(rec, payload)
        if error is not None:
            error = RelayError(error.code, redact(error.message, state.secrets), redact(error.hint, state.secrets))
        session = None
        if result.session_id:
            req = rec.request
            session = SessionTurn(
                rec.agent,
                result.session_id,
                cwd=str(req.get("cwd") or rec.cwd or ""),
                model=str(req.get("model")) if req.get("model") else result.model,
                permission=str(req.get("permission") or state.settings.default_permission),
                title=job_title(req),
                cost=result.cost_usd or 0.0,
                principal=rec.principal,
            )
        epoch = state.epochs.get(rec.id)
        pending = pending or Pending(JobWrite(rec.id, epoch))
        if state.store.spans_hosts:  # the outputs reach the store with the end (a front then pages them)
            mirror = mirror or Mirror(state.store, rec.id, files, epoch=epoch, fence=state.fence)
            mirror.sync_all(pending)
        # The final state, the session's turn and what the job's last look found: one transaction, one commit on the
        # way to the reply.
        pending.write.end = End(
            status,
            exit_code,
            payload,
            error.to_dict() if error else None,
            result.session_id,
            result.model if result.model else None,
            output=text,
            output_chars=chars,
            session=session,
        )
        if pending.send(state.store).ended:  # (not refused by its fence: then the job is another worker's to end)
            telemetry.ended(rec.id, rec.agent, status, error.code.value if error else None, rec.started_at, rec.request)
