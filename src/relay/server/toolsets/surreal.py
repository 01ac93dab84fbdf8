"""Profile `surreal`: surreal-mind's call_cc / call_gem / call_codex and its job tools (seeds 000, 001).

call_cc follows seed 001 (synchronous, cwd required, resume_session_id or continue_latest); call_gem
follows seed 000's schema (cwd optional, fire_and_forget); call_codex is call_gem's schema with cwd
required and call_cc's messages. Each call is a relay job; call_status / call_jobs / call_cancel read
and stop those jobs, and call_status returns the response (seed 000's "critical gap").
"""

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult
from pydantic import Field, JsonValue
from pydantic.config import JsonDict

from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine, JobRequest
from relay.server.results import error_result, json_result
from relay.server.toolsets import _compat as compat
from relay.server.toolsets._registry import (
    DESTROYS_STATE,
    READ_ONLY,
    RUNS_AGENT,
    Deps,
    ToolRegistry,
    Toolset,
    did_you_mean,
)
from relay.store import JobRecord

PROFILE = "surreal"

# The seeds' texts, in one place.
TEXTS = {
    "prompt_empty": "prompt cannot be empty",
    "cwd_required": "cwd is required and cannot be empty",
    "resume_conflict": "resume_session_id and continue_latest cannot both be set",
    "invalid": "Invalid parameters: {detail}",
    "job_id_empty": "job_id cannot be empty",
    "job_not_found": "Job not found: {job_id}",
    "cannot_cancel": "Cannot cancel job in '{status}' status",
    "already_cancelled": "Job already cancelled.",
    "cancelled": "Job cancelled.",
    "queued": "Job queued for background execution. Use agent_job_status to check progress.",
    "federation": (
        "FEDERATION CONTEXT: you are called by another AI agent through surreal-mind's {tool} "
        "(served by relay); answer that agent directly."
    ),
    "observe": "OBSERVE MODE: do not modify, create or delete any files; read and report only.",
    "idle": " with no output (tool_timeout_ms)",
}
# Seed 001's claude command line: permission prompts skipped by its own flag, the model in ANTHROPIC_MODEL.
CLAUDE_EXECUTE_ARGS = ("--dangerously-skip-permissions",)
MODEL_ALIASES = {"h": "haiku", "s": "sonnet", "o": "opus", "haiku": "haiku", "sonnet": "sonnet", "opus": "opus"}
CLAUDE_MODELS_FALLBACK = "claude-sonnet-4-5,claude-haiku-4-5,claude-opus-4-5"
CLAUDE_MODEL_FALLBACK = "claude-sonnet-4-5"
GEMINI_MODEL_FALLBACK = "gemini-2.5-pro"
DEFAULT_TIMEOUT_MS = 60_000
DEFAULT_TOOL_TIMEOUT_MS = 300_000
DEFAULT_MAX_RESPONSE_CHARS = 100_000


@dataclass(frozen=True)
class _Backend:
    """One call_* tool: which agent runs it, how its failures read, and how its seed builds the command."""

    tool: str
    agent: str
    timeout_text: str
    failed_text: str
    missing_text: str | None = None
    # Seed 001 shows call_cc's exact command: the prompt as given, its own flags, the model in the env.
    # The other tools keep the source's FEDERATION CONTEXT line (the seeds do not show their prompt).
    seed_command: bool = False


BACKENDS = {
    "call_cc": _Backend(
        "call_cc",
        "claude",
        "Claude execution timed out after {ms}ms",
        "Claude execution failed: {error}",
        seed_command=True,
    ),
    "call_gem": _Backend(
        "call_gem",
        "gemini",
        "Gemini execution failed: Gemini execution timed out after {ms}ms",
        "Gemini CLI error: {error}",
        "Gemini CLI not found",
    ),
    "call_codex": _Backend(
        "call_codex", "codex", "Codex execution timed out after {ms}ms", "Codex execution failed: {error}"
    ),
}


@dataclass(frozen=True)
class _Call:
    """A call_* tool's arguments, after the tool's own defaults."""

    prompt: str | None
    cwd: str | None
    model: str | None
    resume_session_id: str | None
    continue_latest: bool
    timeout_ms: float
    tool_timeout_ms: float
    expose_stream: bool
    fire_and_forget: bool
    task_name: str | None
    mode: str
    max_response_chars: int


Prompt = Annotated[str | None, Field(description="Task to delegate")]
Cwd = Annotated[str | None, Field(description="Working directory: absolute path, ~/ expanded")]
ResumeId = Annotated[str | None, Field(description="Session id to resume")]
ContinueLatest = Annotated[bool, Field(description="Continue the latest session in cwd")]
TimeoutMs = Annotated[float, Field(description="Overall timeout in milliseconds")]
ToolTimeoutMs = Annotated[float, Field(description="Longest the agent may go without output, in milliseconds")]
ExposeStream = Annotated[bool, Field(description="Add the agent's event stream as stream_events")]
FireAndForget = Annotated[bool, Field(description="Return a job id at once; read it with call_status")]
TaskName = Annotated[str | None, Field(description="Name shown for this job in call_jobs")]
Mode = Annotated[
    Literal["execute", "observe"], Field(description="execute (may edit files) or observe (read and report only)")
]
MaxChars = Annotated[int, Field(ge=0, description="Longest response returned, in characters; 0 = no limit")]


def build(reg: ToolRegistry, deps: Deps) -> None:
    env = deps.settings.environ
    claude_models = compat.env_list(env, "ANTHROPIC_MODELS", CLAUDE_MODELS_FALLBACK)
    claude_default = str(env.get("ANTHROPIC_MODEL") or CLAUDE_MODEL_FALLBACK)
    gemini_models = compat.env_list(env, "GEMINI_MODELS", "")
    gemini_default = str(env.get("GEMINI_MODEL") or GEMINI_MODEL_FALLBACK)
    codex_default: str | None = env.get("CODEX_MODEL") or None
    claude_enum = list(dict.fromkeys([*claude_models, claude_default]))
    claude_schema: JsonDict = {"enum": list[JsonValue](claude_enum)}
    # call_gem's model is a free string (seed 000); GEMINI_MODELS only names the usual ones.
    gemini_model_text = "Gemini model" + (f", e.g. {', '.join(gemini_models)}" if gemini_models else "")

    @reg.tool(
        description="Delegate a task to Claude Code CLI (synchronous; returns the response).",
        unknown_argument=compat.serde_unknown_field,
        annotations=RUNS_AGENT,
    )
    async def call_cc(
        ctx: Context[Any, Any],
        prompt: Prompt = None,
        cwd: Annotated[str | None, Field(description="Working directory (required)")] = None,
        model: Annotated[str | None, Field(description="Claude model", json_schema_extra=claude_schema)] = None,
        resume_session_id: ResumeId = None,
        continue_latest: ContinueLatest = False,
        timeout_ms: TimeoutMs = DEFAULT_TIMEOUT_MS,
        tool_timeout_ms: ToolTimeoutMs = DEFAULT_TOOL_TIMEOUT_MS,
        expose_stream: ExposeStream = False,
        task_name: TaskName = None,
        mode: Mode = "execute",
        max_response_chars: MaxChars = DEFAULT_MAX_RESPONSE_CHARS,
    ) -> CallToolResult:
        model = _model(model, claude_default, resume_session_id, continue_latest)
        if model is not None and model not in claude_enum and model.lower() not in MODEL_ALIASES:
            near = did_you_mean(model, [*claude_enum, *(a for a in MODEL_ALIASES if len(a) > 1)])
            return _error(
                ErrorCode.INVALID_ARGUMENT,
                f"model must be one of {', '.join(claude_enum)}" + (f"; {near}" if near else ""),
                f"pass one of {', '.join(claude_enum)}, or a short name: {', '.join(MODEL_ALIASES)}",
            )
        call = _Call(
            prompt=prompt,
            cwd=cwd,
            model=MODEL_ALIASES.get(model.lower(), model) if model else None,
            resume_session_id=resume_session_id,
            continue_latest=continue_latest,
            timeout_ms=timeout_ms,
            tool_timeout_ms=tool_timeout_ms,
            expose_stream=expose_stream,
            fire_and_forget=False,  # seed 001: call_cc is synchronous only
            task_name=task_name,
            mode=mode,
            max_response_chars=max_response_chars,
        )
        return await _run(deps, BACKENDS["call_cc"], call, ctx, cwd_required=True)

    @reg.tool(
        description="Delegate a task to Gemini CLI with full context and tracking",
        unknown_argument=compat.serde_unknown_field,
        annotations=RUNS_AGENT,
    )
    async def call_gem(
        ctx: Context[Any, Any],
        prompt: Prompt = None,
        model: Annotated[str | None, Field(description=gemini_model_text)] = None,
        cwd: Cwd = None,
        timeout_ms: TimeoutMs = DEFAULT_TIMEOUT_MS,
        tool_timeout_ms: ToolTimeoutMs = DEFAULT_TOOL_TIMEOUT_MS,
        fire_and_forget: FireAndForget = False,
        expose_stream: ExposeStream = False,
        task_name: TaskName = None,
        resume_session_id: ResumeId = None,
        continue_latest: ContinueLatest = False,
        mode: Mode = "execute",
        max_response_chars: MaxChars = DEFAULT_MAX_RESPONSE_CHARS,
    ) -> CallToolResult:
        call = _Call(
            prompt=prompt,
            cwd=cwd,
            model=_model(model, gemini_default, resume_session_id, continue_latest),
            resume_session_id=resume_session_id,
            continue_latest=continue_latest,
            timeout_ms=timeout_ms,
            tool_timeout_ms=tool_timeout_ms,
            expose_stream=expose_stream,
            fire_and_forget=fire_and_forget,
            task_name=task_name,
            mode=mode,
            max_response_chars=max_response_chars,
        )
        return await _run(deps, BACKENDS["call_gem"], call, ctx, cwd_required=False)

    @reg.tool(
        description="Delegate a task to Codex CLI with full context and tracking",
        unknown_argument=compat.serde_unknown_field,
        annotations=RUNS_AGENT,
    )
    async def call_codex(
        ctx: Context[Any, Any],
        prompt: Prompt = None,
        model: Annotated[str | None, Field(description="Codex model; default the CLI's")] = None,
        cwd: Annotated[str | None, Field(description="Working directory (required)")] = None,
        timeout_ms: TimeoutMs = DEFAULT_TIMEOUT_MS,
        tool_timeout_ms: ToolTimeoutMs = DEFAULT_TOOL_TIMEOUT_MS,
        fire_and_forget: FireAndForget = False,
        expose_stream: ExposeStream = False,
        task_name: TaskName = None,
        resume_session_id: ResumeId = None,
        continue_latest: ContinueLatest = False,
        mode: Mode = "execute",
        max_response_chars: MaxChars = DEFAULT_MAX_RESPONSE_CHARS,
    ) -> CallToolResult:
        call = _Call(
            prompt=prompt,
            cwd=cwd,
            model=_model(model, codex_default, resume_session_id, continue_latest),
            resume_session_id=resume_session_id,
            continue_latest=continue_latest,
            timeout_ms=timeout_ms,
            tool_timeout_ms=tool_timeout_ms,
            expose_stream=expose_stream,
            fire_and_forget=fire_and_forget,
            task_name=task_name,
            mode=mode,
            max_response_chars=max_response_chars,
        )
        return await _run(deps, BACKENDS["call_codex"], call, ctx, cwd_required=True)

    @reg.tool(
        description="A delegated job's status, timing and response.",
        annotations=READ_ONLY,
        unknown_argument=compat.serde_unknown_field,
    )
    async def call_status(
        job_id: Annotated[str, Field(description="Job id from call_gem/call_codex")],
    ) -> CallToolResult:
        engine = deps.engine()
        found = _job(engine, job_id)
        if isinstance(found, CallToolResult):
            return found
        return json_result(_status_view(engine, found))

    @reg.tool(
        description="List recent delegated jobs, newest first.",
        annotations=READ_ONLY,
        unknown_argument=compat.serde_unknown_field,
    )
    async def call_jobs(
        limit: Annotated[int, Field(ge=1, le=100, description="How many jobs (1-100)")] = 20,
        status_filter: Annotated[
            Literal["queued", "running", "completed", "failed", "cancelled"] | None,
            Field(description="Only jobs in this status"),
        ] = None,
        tool_name: Annotated[str | None, Field(description="Only jobs of this tool, e.g. call_gem")] = None,
    ) -> CallToolResult:
        engine = deps.engine()
        found = compat.profile_jobs(
            engine,
            PROFILE,
            statuses=compat.relay_statuses(status_filter),
            tools=(tool_name,) if tool_name else (),
            limit=limit,
        )
        jobs = [_job_row(rec, org.tool) for rec, org in found]
        return json_result({"jobs": jobs, "total": len(jobs)})

    @reg.tool(
        description="Cancel a queued or running job (kills its process group).",
        unknown_argument=compat.serde_unknown_field,
        annotations=DESTROYS_STATE,
    )
    async def call_cancel(job_id: Annotated[str, Field(description="Job id to cancel")]) -> CallToolResult:
        engine = deps.engine()
        found = _job(engine, job_id)
        if isinstance(found, CallToolResult):
            return found
        return await compat.cancel_as_seed(
            engine,
            found,
            TEXTS,
            lambda message, previous: _error(
                ErrorCode.INVALID_ARGUMENT,
                message,
                f"the job already ended ({previous}); call_status {found.id} reads its result",
            ),
        )

    compat.seed_default(reg, "call_cc", "model", claude_default)
    compat.seed_default(reg, "call_gem", "model", gemini_default)
    if codex_default:
        compat.seed_default(reg, "call_codex", "model", codex_default)
    compat.seed_required(reg, "call_cc", "prompt", "cwd")
    compat.seed_required(reg, "call_gem", "prompt")
    compat.seed_required(reg, "call_codex", "prompt", "cwd")


async def _run(
    deps: Deps, backend: _Backend, call: _Call, ctx: Context[Any, Any], *, cwd_required: bool
) -> CallToolResult:
    """Validate as the seed does, submit the job, then answer as the seed does (sync, or queued)."""
    if compat.blank(call.prompt):
        return _invalid(TEXTS["prompt_empty"])
    if cwd_required and compat.blank(call.cwd):
        return _invalid(TEXTS["cwd_required"])
    if call.resume_session_id and call.continue_latest:
        return _invalid(TEXTS["resume_conflict"])
    if call.timeout_ms <= 0 or call.tool_timeout_ms <= 0:
        return _invalid("timeout_ms and tool_timeout_ms must be positive")
    prompt = str(call.prompt).strip()
    lines = [] if backend.seed_command else [TEXTS["federation"].format(tool=backend.tool)]
    if call.mode == "observe":
        lines.append(TEXTS["observe"])
    execute = call.mode != "observe"
    req = JobRequest(
        agent=backend.agent,
        prompt="\n".join([*lines, "", prompt]) if lines else prompt,
        cli_args=CLAUDE_EXECUTE_ARGS if backend.seed_command and execute else (),
        model_via_env=backend.seed_command,
        cwd=call.cwd.strip() if call.cwd and call.cwd.strip() else None,
        model=call.model,
        session_id=call.resume_session_id or None,
        continue_latest=call.continue_latest,
        # seed 001 runs the CLI with its permission prompts skipped; observe mode only reads
        permission="full" if execute else "read-only",
        timeout_s=compat.ms_to_s(call.timeout_ms),
        idle_timeout_s=compat.ms_to_s(call.tool_timeout_ms),
    )
    engine = deps.engine()
    task_name = call.task_name or backend.tool
    try:
        job_id = await compat.start(
            engine,
            req,
            profile=PROFILE,
            tool=backend.tool,
            task_name=task_name,
            prompt=prompt,
            model_override=call.model,
            cwd=call.cwd,
            timeout_ms=call.timeout_ms,
        )
    except RelayError as err:
        return _submit_error(backend, err)
    if call.fire_and_forget:
        return json_result({"status": "queued", "job_id": job_id, "message": TEXTS["queued"]})
    rec = await compat.wait_sync(engine, job_id, ctx)
    if rec.status != "completed":
        return _job_failed(backend, rec, call)
    result: dict[str, Any] = {
        "status": "completed",
        "response": compat.output_text(engine, job_id, call.max_response_chars),
        "session_id": rec.session_id,
        "metadata": {
            "job_id": rec.id,
            "task_name": task_name,
            "model": rec.model,
            "duration_ms": compat.duration_ms(rec),
            "usage": (rec.result or {}).get("usage"),
            "cost_usd": (rec.result or {}).get("cost_usd"),
        },
    }
    if call.expose_stream:
        result["stream_events"] = compat.stream_events(engine, job_id)
    return json_result(result)


def _model(given: str | None, default: str | None, resume_id: str | None, continue_latest: bool) -> str | None:
    """The model to run: the call's, else none on a resume (the session keeps its own), else the default."""
    if given:
        return given
    return None if resume_id or continue_latest else default


def _submit_error(backend: _Backend, err: RelayError) -> CallToolResult:
    if err.code == ErrorCode.AGENT_NOT_INSTALLED and backend.missing_text:
        return _error(err.code, backend.missing_text, err.hint)
    if err.code in (ErrorCode.INVALID_ARGUMENT, ErrorCode.CWD_NOT_ALLOWED):
        return _error(err.code, TEXTS["invalid"].format(detail=err.message), err.hint)
    return _error(err.code, backend.failed_text.format(error=err.message), err.hint)


def _job_failed(backend: _Backend, rec: JobRecord, call: _Call) -> CallToolResult:
    hint = f"call_status(job_id='{rec.id}') shows the job"
    if compat.timed_out(rec) and compat.idle_stopped(rec):
        message = backend.timeout_text.format(ms=int(call.tool_timeout_ms)) + TEXTS["idle"]
        return _error(ErrorCode.TIMEOUT, message, f"raise tool_timeout_ms; {hint}")
    if compat.timed_out(rec):
        return _error(ErrorCode.TIMEOUT, backend.timeout_text.format(ms=int(call.timeout_ms)), hint)
    code = ErrorCode.CANCELLED if rec.status == "cancelled" else ErrorCode.AGENT_FAILED
    return _error(code, backend.failed_text.format(error=compat.error_message(rec)), hint)


def _job(engine: Engine, job_id: str) -> JobRecord | CallToolResult:
    """The job, or the seed's error result for a blank or unknown id."""
    if compat.blank(job_id):
        return _invalid(TEXTS["job_id_empty"])
    rec = compat.find_job(engine, job_id.strip())
    if rec is None:
        return _error(ErrorCode.JOB_NOT_FOUND, TEXTS["job_not_found"].format(job_id=job_id), "call_jobs lists jobs")
    return rec


def _status_view(engine: Engine, rec: JobRecord) -> dict[str, Any]:
    org = compat.origin(engine, rec.id)
    fields = org.fields if org else {}
    status = compat.seed_status(rec.status)
    result = rec.result or {}
    return {
        "job_id": rec.id,
        "status": status,
        "created_at": compat.iso(rec.created_at),
        "started_at": compat.iso(rec.started_at),
        "completed_at": compat.iso(rec.finished_at),
        "duration_ms": compat.duration_ms(rec),
        "error": compat.error_message(rec) if rec.is_final and status != "completed" else None,
        "session_id": rec.session_id,
        "exchange_id": None,
        "metadata": {
            "agent": rec.agent,
            "tool_name": org.tool if org else None,
            "model": rec.model,
            "usage": result.get("usage"),
            "cost_usd": result.get("cost_usd"),
            "exit_code": rec.exit_code,
        },
        "response": compat.output_text(engine, rec.id) if status == "completed" else None,
        "prompt": fields.get("prompt", rec.request.get("prompt")),
        "task_name": fields.get("task_name"),
        "model_override": fields.get("model_override"),
        "cwd": fields.get("cwd", rec.cwd),
        "timeout_ms": fields.get("timeout_ms"),
    }


def _job_row(rec: JobRecord, tool: str) -> dict[str, Any]:
    return {
        "job_id": rec.id,
        "status": compat.seed_status(rec.status),
        "tool_name": tool,
        "created_at": compat.iso(rec.created_at),
        "started_at": compat.iso(rec.started_at),
        "completed_at": compat.iso(rec.finished_at),
        "duration_ms": compat.duration_ms(rec),
    }


def _invalid(detail: str) -> CallToolResult:
    return _error(ErrorCode.INVALID_ARGUMENT, detail, "fix the argument as the message says")


def _error(code: ErrorCode, message: str, hint: str) -> CallToolResult:
    return error_result(RelayError(code, message, hint))


TOOLSET = Toolset(
    name=PROFILE,
    description="surreal-mind's call_cc, call_gem, call_codex and their job tools (seeds 000, 001), as relay jobs",
    build=build,
)
