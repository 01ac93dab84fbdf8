"""Profile `codex-mcp`: tuannvm/codex-mcp-server's codex, review, listSessions, ping, help, websearch (seed 000).

`codex` runs Codex CLI as a relay job; a `sessionId` names a conversation the caller chose, mapped to
the Codex thread its first turn started, so later turns resume it. Sessions come from relay's job
records, so they survive restarts (the original keeps them in memory: 100 sessions, 24 h).
"""

import json
import time
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine, JobRequest
from relay.server.results import error_result
from relay.server.toolsets import _compat as compat
from relay.server.toolsets._registry import (
    READ_ONLY,
    READS_OUTSIDE,
    RUNS_AGENT,
    Deps,
    ToolRegistry,
    Toolset,
    publish_output_schema,
    seed_errors,
)

PROFILE = "codex-mcp"
DEFAULT_MODEL = "gpt-5.2-codex"
# The original reads a static callback URI from its environment; Codex CLI gets it in its own.
CALLBACK_ENV = "CODEX_MCP_CALLBACK_URI"
# The original's session store: at most 100 sessions, each kept 24 hours after its last use.
MAX_SESSIONS = 100
SESSION_TTL_S = 24 * 3600.0
# codex sandbox policy -> relay permission.
SANDBOXES = {"read-only": "read-only", "workspace-write": "edit", "danger-full-access": "full"}

# The original's texts, in one place.
TEXTS = {
    "codex_failed": "Failed to execute codex command: {error}",
    "review_failed": "Failed to execute code review: {error}",
    "help_failed": "Failed to execute help command: {error}",
    "websearch_failed": "Failed to execute web search: {error}",
    "no_output": "No output from Codex",
    "no_review": "No review output from Codex",
    "no_sessions": "No active sessions",
    "no_help": "No help information available",
    "review_conflict": (
        "The review prompt cannot be combined with uncommitted=true. Use a base/commit review or omit the prompt."
    ),
    "review": "Review {target} and report the problems you find (bugs, risks, missing tests), with file and line.",
    "review_uncommitted": "the uncommitted changes in this repository (staged, unstaged and untracked files)",
    "review_base": "the changes on the current branch against the base branch {base}",
    "review_commit": "the changes introduced by commit {commit}",
    "review_default": "the current changes in this repository",
    "websearch": (
        "Search the web for: {query}\nReturn the {count} most relevant results ({depth} search): title, URL and "
        "a one-line summary each."
    ),
}
# What `codex` returns besides its text (the original's content[0]._meta and structuredContent).
CODEX_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "threadId": {"type": "string", "description": "the Codex thread this turn ran in"},
        "model": {"type": "string", "description": "the model Codex ran"},
        "sessionId": {"type": "string", "description": "the conversation, when sessionId was given"},
        "callbackUri": {
            "type": "string",
            "description": "the callbackUri, when given or set in relay's environment as CODEX_MCP_CALLBACK_URI",
        },
    },
    "required": ["model"],
}
Sandbox = Literal["read-only", "workspace-write", "danger-full-access"]
Effort = Literal["minimal", "low", "medium", "high"]


def build(reg: ToolRegistry, deps: Deps) -> None:
    default_model = str(deps.settings.environ.get("CODEX_DEFAULT_MODEL") or DEFAULT_MODEL)
    # The original's static callback URI: a call's callbackUri wins over it.
    default_callback = str(deps.settings.environ.get(CALLBACK_ENV) or "") or None

    @reg.tool(description="Execute Codex CLI in non-interactive mode for AI assistance", annotations=RUNS_AGENT)
    async def codex(
        ctx: Context[Any, Any],
        prompt: Annotated[str, Field(description="The coding task, question, or analysis request")],
        sessionId: Annotated[str | None, Field(description="Optional session ID for conversational context")] = None,
        resetSession: Annotated[
            bool | None, Field(description="Reset the session history before processing this request")
        ] = None,
        model: Annotated[
            str | None,
            Field(
                description=f"Specify which model to use (defaults to {default_model}). Options: gpt-5.2-codex, "
                "gpt-5.1-codex, gpt-5.1-codex-max, gpt-5-codex, gpt-4o, gpt-4, o3, o4-mini"
            ),
        ] = None,
        reasoningEffort: Annotated[
            Effort | None, Field(description="Control reasoning depth (minimal < low < medium < high)")
        ] = None,
        sandbox: Annotated[
            Sandbox | None,
            Field(
                description="Sandbox policy for shell command execution. read-only: no writes allowed, "
                "workspace-write: writes only in workspace, danger-full-access: full system access"
            ),
        ] = None,
        fullAuto: Annotated[
            bool | None,
            Field(description="Enable full-auto mode: sandboxed automatic execution without approval prompts"),
        ] = None,
        workingDirectory: Annotated[
            str | None, Field(description="Working directory for the agent to use as its root (passed via -C flag)")
        ] = None,
        callbackUri: Annotated[str | None, Field(description="Optional callback URI passed to Codex")] = None,
    ) -> CallToolResult:
        engine = deps.engine()
        chosen = model or default_model
        thread = _thread_of(engine, sessionId) if sessionId and not resetSession else None
        permission = SANDBOXES[sandbox] if sandbox else ("edit" if fullAuto else None)
        req = JobRequest(
            agent="codex",
            prompt=prompt,
            # A later turn resumes the thread in its own directory, with the sandbox it was started with
            # unless this call names another (the original drops both on resume: turn 2 ran read-only).
            cwd=None if thread else workingDirectory,
            model=chosen,
            session_id=thread,
            permission=permission,
            reasoning_effort=reasoningEffort,
        )
        fields = {"sessionId": sessionId, "reset": bool(resetSession)}
        reply = await _run(deps, ctx, "codex", req, fields, TEXTS["codex_failed"], TEXTS["no_output"])
        if isinstance(reply, CallToolResult):
            return reply
        text, rec_thread = reply
        meta: dict[str, Any] = {"model": chosen}
        if sessionId:
            meta["sessionId"] = sessionId
        if rec_thread:
            meta["threadId"] = rec_thread
        callback = callbackUri or default_callback
        if callback:
            meta["callbackUri"] = callback
        return _with_meta(text, meta)

    reg.tools["codex"].output_schema = publish_output_schema(CODEX_OUTPUT)

    @reg.tool(
        description="Run a code review with Codex (uncommitted changes, against a base branch, or a commit)",
        annotations=READS_OUTSIDE,
    )
    async def review(
        ctx: Context[Any, Any],
        prompt: Annotated[str | None, Field(description="Custom review instructions")] = None,
        uncommitted: Annotated[bool | None, Field(description="Review staged, unstaged and untracked changes")] = None,
        base: Annotated[str | None, Field(description="Review changes against this base branch")] = None,
        commit: Annotated[str | None, Field(description="Review the changes introduced by this commit SHA")] = None,
        title: Annotated[str | None, Field(description="Optional title shown in the review summary")] = None,
        model: Annotated[str | None, Field(description=f"Model to use (defaults to {default_model})")] = None,
        workingDirectory: Annotated[
            str | None, Field(description="Working directory of the repository to review (passed via -C flag)")
        ] = None,
    ) -> CallToolResult:
        if prompt and uncommitted:
            return error_result(
                RelayError(
                    ErrorCode.INVALID_ARGUMENT,
                    TEXTS["review_conflict"],
                    "drop the prompt to review the uncommitted changes, or pass base or commit with the prompt",
                )
            )
        if uncommitted:
            target = TEXTS["review_uncommitted"]
        elif base:
            target = TEXTS["review_base"].format(base=base)
        elif commit:
            target = TEXTS["review_commit"].format(commit=commit)
        else:
            target = TEXTS["review_default"]
        lines = [TEXTS["review"].format(target=target)]
        if title:
            lines.append(f"Title of the review: {title}")
        if prompt:
            lines.append(prompt)
        chosen = model or default_model
        req = JobRequest(
            agent="codex", prompt="\n".join(lines), cwd=workingDirectory, model=chosen, permission="read-only"
        )
        reply = await _run(deps, ctx, "review", req, {}, TEXTS["review_failed"], TEXTS["no_review"])
        if isinstance(reply, CallToolResult):
            return reply
        meta: dict[str, Any] = {
            "model": chosen,
            **({"base": base} if base else {}),
            **({"commit": commit} if commit else {}),
        }
        return _with_meta(reply[0], meta)

    @reg.tool(description="List all active conversation sessions with metadata", annotations=READ_ONLY)
    async def listSessions() -> CallToolResult:
        sessions = _sessions(deps.engine())
        return _text(json.dumps(sessions, indent=2) if sessions else TEXTS["no_sessions"])

    @reg.tool(description="Test MCP server connection", annotations=READ_ONLY)
    async def ping(message: Annotated[str, Field(description="Message to echo back")] = "pong") -> CallToolResult:
        return _text(message)

    @reg.tool(name="help", description="Get Codex CLI help information", annotations=READ_ONLY)
    async def help_() -> CallToolResult:
        try:
            return _text(await compat.cli_output(deps.settings, "codex", ["--help"]) or TEXTS["no_help"])
        except RelayError as err:
            return error_result(RelayError(err.code, TEXTS["help_failed"].format(error=err.message), err.hint))

    @reg.tool(description="Search the web with Codex and return the most relevant results", annotations=READS_OUTSIDE)
    async def websearch(
        ctx: Context[Any, Any],
        query: Annotated[str, Field(description="What to search for")],
        numResults: Annotated[int, Field(ge=1, le=50, description="How many results (1-50)")] = 10,
        searchDepth: Annotated[
            Literal["basic", "full"], Field(description="basic (fast) or full (thorough)")
        ] = "basic",
    ) -> CallToolResult:
        req = JobRequest(
            agent="codex",
            prompt=TEXTS["websearch"].format(query=query, count=numResults, depth=searchDepth),
            model=default_model,
            permission="read-only",
        )
        reply = await _run(deps, ctx, "websearch", req, {}, TEXTS["websearch_failed"], TEXTS["no_output"])
        return reply if isinstance(reply, CallToolResult) else _text(reply[0])


async def _run(
    deps: Deps,
    ctx: Context[Any, Any],
    tool: str,
    req: JobRequest,
    fields: dict[str, Any],
    failed: str,
    empty: str,
) -> tuple[str, str | None] | CallToolResult:
    """Run the job to its end: (answer text, codex thread id), or the original's error for a failure."""
    engine = deps.engine()
    try:
        job_id = await compat.start(engine, req, profile=PROFILE, tool=tool, **fields)
    except RelayError as err:
        return error_result(RelayError(err.code, failed.format(error=err.message), err.hint))
    rec = await compat.wait_sync(engine, job_id, ctx)
    if rec.status != "completed":
        code = ErrorCode.TIMEOUT if compat.timed_out(rec) else ErrorCode.AGENT_FAILED
        hint = f"job_result(job_id='{rec.id}') in relay's core tools shows the whole job"
        return error_result(RelayError(code, failed.format(error=compat.error_message(rec)), hint))
    return compat.output_text(engine, job_id) or empty, rec.session_id


def _session_jobs(engine: Engine) -> dict[str, list[Any]]:
    """codex jobs per caller-chosen sessionId, newest first, within the session lifetime."""
    found: dict[str, list[Any]] = {}
    since = time.time() - SESSION_TTL_S
    for rec, org in compat.profile_jobs(engine, PROFILE, tools=("codex",), since=since, limit=compat.SCAN_LIMIT):
        sid = org.fields.get("sessionId")
        if isinstance(sid, str) and sid:
            found.setdefault(sid, []).append((rec, org))
    return found


def _thread_of(engine: Engine, session: str) -> str | None:
    """The codex thread to resume for a sessionId: the newest completed turn's, back to the last reset."""
    for rec, org in _session_jobs(engine).get(session, []):
        if rec.status == "completed" and rec.session_id:
            return str(rec.session_id)
        if org.fields.get("reset"):
            return None
    return None


def _sessions(engine: Engine) -> list[dict[str, Any]]:
    """listSessions' rows, most recently used first."""
    rows: list[dict[str, Any]] = []
    for sid, jobs in _session_jobs(engine).items():
        turns = 0
        for rec, org in jobs:
            turns += rec.status == "completed"
            if org.fields.get("reset"):
                break
        rows.append(
            {
                "id": sid,
                "createdAt": compat.iso_ms(jobs[-1][0].created_at),
                "lastAccessedAt": compat.iso_ms(jobs[0][0].created_at),
                "turnCount": turns,
            }
        )
    return rows[:MAX_SESSIONS]


def _with_meta(text: str, meta: dict[str, Any]) -> CallToolResult:
    """The answer as text with its metadata both in content[0]._meta and as structuredContent, as the original."""
    return CallToolResult(content=[TextContent(type="text", text=text, _meta=meta)], structured_content=meta)


def _text(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)])


TOOLSET = Toolset(
    name=PROFILE,
    description="tuannvm/codex-mcp-server's codex, review, listSessions, ping, help, websearch (seed 000)",
    build=build,
    error_envelope=seed_errors(compat.words_error),
)
