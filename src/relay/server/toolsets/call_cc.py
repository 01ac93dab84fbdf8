"""Profile `call-cc`: seed 000 §5's synthesized call_cc, with call_cc_status / _jobs / _sessions / _cancel.

Sync by default (returns the output), async on request (returns a job id at once); haiku by default;
`brainstorm` adds the seed's brainstorming preamble. Every call is a relay job, so call_cc_status
returns the full output of any of them, also after a restart (§5.3: "fix the async gap").
"""

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult
from pydantic import Field

from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine, JobRequest
from relay.server.results import json_result
from relay.server.toolsets import _compat as compat
from relay.server.toolsets._registry import (
    DESTROYS_STATE,
    READ_ONLY,
    RUNS_AGENT,
    Deps,
    ToolRegistry,
    Toolset,
    seed_errors,
)
from relay.store import JobRecord

PROFILE = "call-cc"

# The seed's texts, in one place.
TEXTS = {
    "brainstorm": "BRAINSTORMING MODE: Generate creative, diverse ideas for the following:\n\n{prompt}",
    "timeout": "Task exceeded timeout",
    "prompt_empty": "prompt cannot be empty",
    "job_id_empty": "job_id cannot be empty",
    "job_not_found": "Job not found: {job_id}",
    "cannot_cancel": "Cannot cancel job in '{status}' status",
    "already_cancelled": "Job already cancelled.",
    "cancelled": "Job cancelled.",
}
# §5.4's model tiers; any other name goes to the CLI as it is.
MODELS = {"haiku": "haiku", "h": "haiku", "sonnet": "sonnet", "s": "sonnet", "opus": "opus", "o": "opus"}
DEFAULT_MODEL = "haiku"
DEFAULT_TIMEOUT_MS = 120_000
DEFAULT_LIMIT = 20


def build(reg: ToolRegistry, deps: Deps) -> None:
    @reg.tool(
        description=(
            "Delegate a task to Claude Code. Sync by default: returns the output. "
            "mode='async' returns a job_id at once; call_cc_status(job_id) returns status and output."
        ),
        unknown_argument=compat.serde_unknown_field,
        annotations=RUNS_AGENT,
    )
    async def call_cc(
        ctx: Context[Any, Any],
        prompt: Annotated[str, Field(description="The prompt/task to send to Claude Code")],
        working_directory: Annotated[
            str | None, Field(description="Optional working directory (defaults to caller's cwd)")
        ] = None,
        model: Annotated[
            str | None, Field(description="Optional model selection (haiku, sonnet, opus; h/s/o). Defaults to haiku")
        ] = None,
        session_id: Annotated[str | None, Field(description="Optional session ID for multi-turn conversations")] = None,
        mode: Annotated[Literal["sync", "async"], Field(description='Execution mode: "sync" (default) or "async"')] = (
            "sync"
        ),
        timeout_ms: Annotated[int, Field(ge=1, description="Optional timeout in milliseconds (default: 120000)")] = (
            DEFAULT_TIMEOUT_MS
        ),
        brainstorm: Annotated[
            bool, Field(description="Optional brainstorm mode (adds brainstorming context to prompt)")
        ] = False,
    ) -> CallToolResult:
        if compat.blank(prompt):
            return _error("INVALID_ARGUMENT", TEXTS["prompt_empty"], "pass the task for Claude as prompt")
        # A resumed session keeps its own model unless the call names one.
        tier = (model or ("" if session_id else DEFAULT_MODEL)).strip()
        timeout = timeout_ms
        req = JobRequest(
            agent="claude",
            prompt=TEXTS["brainstorm"].format(prompt=prompt) if brainstorm else prompt,
            cwd=working_directory or None,
            model=MODELS.get(tier.lower(), tier) or None,
            session_id=session_id or None,
            timeout_s=compat.ms_to_s(timeout),
        )
        engine = deps.engine()
        try:
            job_id = await compat.start(
                engine, req, profile=PROFILE, tool="call_cc", prompt=prompt, timeout_ms=timeout, mode=mode
            )
        except RelayError as err:
            return _error(err.code.value, err.message, hint=err.hint)
        if mode == "async":
            return json_result({"job_id": job_id, "status": "queued"})
        rec = await compat.wait_sync(engine, job_id, ctx)
        if rec.status != "completed":
            return _failure(rec, timeout)
        return json_result(
            {
                "status": "completed",
                "output": compat.output_text(engine, job_id),
                "duration_ms": compat.duration_ms(rec),
                "model_used": rec.model,
                "session_id": rec.session_id,
                "job_id": rec.id,
            }
        )

    @reg.tool(
        description="A call_cc job's status plus its full output.",
        annotations=READ_ONLY,
        unknown_argument=compat.serde_unknown_field,
    )
    async def call_cc_status(job_id: Annotated[str, Field(description="Job id returned by call_cc")]) -> CallToolResult:
        engine = deps.engine()
        found = _job(engine, job_id)
        if isinstance(found, CallToolResult):
            return found
        return json_result(_job_view(engine, found, with_output=True))

    @reg.tool(
        description="List recent call_cc jobs, newest first.",
        annotations=READ_ONLY,
        unknown_argument=compat.serde_unknown_field,
    )
    async def call_cc_jobs(
        limit: Annotated[int, Field(ge=1, le=500, description="How many jobs (default 20)")] = DEFAULT_LIMIT,
        status_filter: Annotated[
            Literal["queued", "running", "completed", "failed", "cancelled"] | None,
            Field(description="Only jobs in this status: queued, running, completed, failed"),
        ] = None,
    ) -> CallToolResult:
        engine = deps.engine()
        found = compat.profile_jobs(engine, PROFILE, statuses=compat.relay_statuses(status_filter), limit=limit)
        jobs = [_job_view(engine, rec, with_output=False) for rec, _ in found]
        return json_result({"jobs": jobs, "total": len(jobs)})

    @reg.tool(
        description="List Claude Code sessions call_cc can continue with session_id.",
        annotations=READ_ONLY,
        unknown_argument=compat.serde_unknown_field,
    )
    async def call_cc_sessions(
        limit: Annotated[int, Field(ge=1, le=500, description="How many sessions (default 20)")] = DEFAULT_LIMIT,
    ) -> CallToolResult:
        sessions = deps.engine().sessions(agent="claude", limit=limit)
        rows = [
            {
                "session_id": s.session_id,
                "agent_type": "claude_code",
                "created_at": compat.iso(s.created_at),
                "last_accessed": compat.iso(s.last_used_at),
                "turn_count": s.turns,
                "working_directory": s.cwd,
                "model": s.model,
            }
            for s in sessions
        ]
        return json_result({"sessions": rows, "total": len(rows)})

    @reg.tool(
        description="Cancel a queued or running call_cc job (kills its process group).",
        unknown_argument=compat.serde_unknown_field,
        annotations=DESTROYS_STATE,
    )
    async def call_cc_cancel(job_id: Annotated[str, Field(description="Job id to cancel")]) -> CallToolResult:
        engine = deps.engine()
        found = _job(engine, job_id)
        if isinstance(found, CallToolResult):
            return found
        return await compat.cancel_as_seed(
            engine,
            found,
            TEXTS,
            lambda message, previous: _error(
                "INVALID_ARGUMENT", message, f"the job already ended ({previous}); call_cc_status reads its output"
            ),
        )


def _failure(rec: JobRecord, timeout_ms: int) -> CallToolResult:
    """§5.4's error shapes: TIMEOUT with the timeout, EXECUTION_FAILED with the reason."""
    if compat.timed_out(rec):
        return json_result(
            {
                "status": "error",
                "error": TEXTS["timeout"],
                "code": "TIMEOUT",
                "timeout_ms": timeout_ms,
                "job_id": rec.id,
            },
            is_error=True,
        )
    return json_result(
        {"status": "error", "error": compat.error_message(rec), "code": "EXECUTION_FAILED", "job_id": rec.id},
        is_error=True,
    )


def _job(engine: Engine, job_id: str) -> JobRecord | CallToolResult:
    if compat.blank(job_id):
        return _error(
            "INVALID_ARGUMENT", TEXTS["job_id_empty"], "pass the job_id call_cc returned (call_cc_jobs lists them)"
        )
    rec = compat.find_job(engine, job_id.strip())
    if rec is None:
        return _error(
            ErrorCode.JOB_NOT_FOUND.value, TEXTS["job_not_found"].format(job_id=job_id), "call_cc_jobs lists the jobs"
        )
    return rec


def _job_view(engine: Engine, rec: JobRecord, *, with_output: bool) -> dict[str, Any]:
    """§4.5's job metadata (and, for call_cc_status, the output §5.3 asks for)."""
    org = compat.origin(engine, rec.id)
    prompt = str((org.fields if org else {}).get("prompt", rec.request.get("prompt", "")))
    status = compat.seed_status(rec.status)
    view: dict[str, Any] = {
        "job_id": rec.id,
        "status": status,
        "created_at": compat.iso(rec.created_at),
        "started_at": compat.iso(rec.started_at),
        "completed_at": compat.iso(rec.finished_at),
        "duration_ms": compat.duration_ms(rec),
        "session_id": rec.session_id,
        "model_used": rec.model,
        "working_directory": rec.cwd,
        "prompt_hash": compat.prompt_hash(prompt),
    }
    if with_output:
        view["output"] = compat.output_text(engine, rec.id) if rec.is_final else None
        failed = rec.is_final and status != "completed"
        view["error"] = (TEXTS["timeout"] if compat.timed_out(rec) else compat.error_message(rec)) if failed else None
    return view


def _error(code: str, message: str, hint: str = "") -> CallToolResult:
    """§4.2's structured error: status, a human-readable error, a code (and relay's hint)."""
    body: dict[str, Any] = {"status": "error", "error": message, "code": code}
    if hint:
        body["hint"] = hint
    return json_result(body, is_error=True)


def _shaped(err: RelayError) -> CallToolResult:
    """Any relay error (a bad argument, an unknown tool) in §4.2's shape, with relay's code."""
    return _error(err.code.value, err.message, err.hint)


TOOLSET = Toolset(
    name=PROFILE,
    description="seed 000's synthesized call_cc (sync or async) with its status, jobs, sessions and cancel tools",
    build=build,
    error_envelope=seed_errors(_shaped),
)
