"""Toolset `gobby`: seed 003's direct tools beyond the gateway: call_hook, execute_code, process_large_dataset, codex.

Shapes are seed 003's (`{success, ...}`; failures `{success: false, error, error_type}`). Session hooks
run over `relay.hooks`, code over `relay.sandbox` (each run a relay job), and the codex tools over
relay's codex adapter (each turn a relay job) with its sessions; the codex tools exist only when a
codex CLI is found (seed-decisions 13).
"""

import base64
import binascii
import json
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal, cast

import anyio
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult
from pydantic import Field

from relay.agents import get_adapter
from relay.errors import ErrorCode, RelayError
from relay.hooks import HOOK_TYPES, Hooks, HookStore
from relay.jobs.engine import Engine, JobRequest
from relay.principal import visible_to
from relay.sandbox import LANGUAGES, datasets, read_outcome, submit_execute
from relay.sandbox.runner import ALIASES as LANGUAGE_ALIASES
from relay.server.results import json_result, wait_for_mode
from relay.server.toolsets._registry import (
    READ_ONLY,
    READS_OUTSIDE,
    RUNS_AGENT,
    WRITES_STATE,
    Deps,
    ToolRegistry,
    Toolset,
    did_you_mean,
    did_you_mean_first,
)
from relay.tracker import TaskStore
from relay.tracker.ai import engine_asker

# Seed 003's names for relay's error codes (the rest keep relay's code).
ERROR_TYPES = {
    ErrorCode.INVALID_ARGUMENT: "ValueError",
    ErrorCode.TIMEOUT: "TimeoutError",
    ErrorCode.AGENT_FAILED: "ExecutionError",
}
# codex's sandbox modes (its app-server's camelCase and its CLI's kebab-case) -> relay permission.
SANDBOXES = {
    "readOnly": "read-only",
    "workspaceWrite": "edit",
    "dangerFullAccess": "full",
    "read-only": "read-only",
    "workspace-write": "edit",
    "danger-full-access": "full",
}
Sandbox = Literal[
    "readOnly", "workspaceWrite", "dangerFullAccess", "read-only", "workspace-write", "danger-full-access"
]
Approval = Literal[
    "never", "unlessTrusted", "onRequest", "onFailure", "always", "untrusted", "on-request", "on-failure"
]
DEFAULT_THREADS = 25
# Keys of codex_threads' rows that codex_list_threads does not show.
INTERNAL = ("archived", "principal")
MAX_THREADS = 200
# How many of a codex turn's items come back in its reply (the job keeps them all: job_result view=events).
MAX_ITEMS = 50
ITEM_TYPES = ("message", "reasoning", "tool.started", "tool.completed")
# How long a session summary may take the model before the hook falls back to prompts and tasks.
SUMMARY_TIMEOUT_S = 60.0
# How long the model may take to write a dataset function.
FUNCTION_TIMEOUT_S = 120.0


def failure(err: RelayError, **extra: Any) -> CallToolResult:
    data: dict[str, Any] = {
        "success": False,
        **extra,
        "error": err.message,
        "error_type": ERROR_TYPES.get(err.code, err.code.value),
        "hint": err.hint,
    }
    return json_result(data, is_error=True)


def seed_envelope(result: CallToolResult) -> CallToolResult:
    """Any error result as seed 003's `{success: false, error, error_type}` (argument errors included).

    A result already in that shape is kept; relay's own `{"error": {code, message, hint}}` is rewritten.
    """
    data: dict[str, Any] = result.structured_content or {}
    if data.get("success") is False and "error_type" in data:
        return result
    raw: Any = data.get("error")
    if isinstance(raw, dict):
        err = RelayError.from_dict(cast(dict[str, Any], raw))
    else:
        text = " ".join(str(getattr(c, "text", "")) for c in result.content).strip()
        err = RelayError(ErrorCode.INTERNAL, str(raw or text or "the tool failed"), "")
    return failure(err)


def hooks_service(deps: Deps) -> Hooks:
    """The hook handlers of this server (one store connection each for sessions and tasks, closed at shutdown)."""

    def make() -> Hooks:
        settings = deps.settings
        store = HookStore(settings.db_path)
        tasks = TaskStore(settings.db_path)

        async def close() -> None:
            store.close()
            tasks.close()

        deps.on_close(close)
        return Hooks(settings, store, tasks, lambda: engine_asker(deps.engine(), "session summary", SUMMARY_TIMEOUT_S))

    return deps.service("hooks", make)


def codex_found(deps: Deps) -> bool:
    """Whether a codex CLI is found (on the PATH relay was started with, or as configured)."""
    settings = deps.settings
    command = settings.agent("codex").command or get_adapter("codex", settings).executable
    return shutil.which(command, path=settings.environ.get("PATH")) is not None


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def _cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"offset:{offset}".encode()).decode()


def _offset(cursor: str | None) -> int:
    if not cursor:
        return 0
    try:
        kind, _, value = base64.urlsafe_b64decode(cursor.encode()).decode().partition(":")
        if kind == "offset" and value.isdigit():
            return int(value)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise RelayError(ErrorCode.INVALID_ARGUMENT, f"cursor {cursor[:60]!r} is not valid", "pass next_cursor as given")


def codex_threads(deps: Deps) -> list[dict[str, Any]]:
    """Every codex thread relay knows (its jobs' and the hooks') that the caller may see, newest first, archived
    ones included; each with the `principal` it belongs to (a `user` sees only its own, an admin everyone's)."""
    engine = deps.engine()
    hooks = hooks_service(deps)
    tracked = {(h.principal, h.id): h for h in hooks.store.list(source="codex", limit=10_000, principal=visible_to())}
    threads: dict[tuple[str, str], dict[str, Any]] = {}
    for s in engine.sessions(agent="codex", limit=10_000):
        hook = tracked.get((s.principal, s.session_id))
        threads[(s.principal, s.session_id)] = {
            "id": s.session_id,
            "principal": s.principal,
            "preview": (hook.title if hook and hook.title else s.title),
            "model_provider": "openai",
            "model": s.model,
            "cwd": s.cwd,
            "turns": s.turns,
            "created_at": _iso(s.created_at),
            "updated_at": _iso(max(s.last_used_at, hook.updated_at if hook else 0)),
            "archived": bool(hook and hook.status == "archived"),
        }
    for key, h in tracked.items():
        if key not in threads:
            threads[key] = {
                "id": h.id,
                "principal": h.principal,
                "preview": h.title,
                "model_provider": "openai",
                "model": None,
                "cwd": h.cwd,
                "turns": h.prompt_count,
                "created_at": _iso(h.created_at),
                "updated_at": _iso(h.updated_at),
                "archived": h.status == "archived",
            }
    return sorted(threads.values(), key=lambda t: t["updated_at"], reverse=True)


def _items(engine: Engine, job_id: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for _, _, event in engine.events(job_id, limit=5000):
        if event.type in ITEM_TYPES:
            out.append({"type": event.type, **event.data})
    return out[-MAX_ITEMS:]


def build(reg: ToolRegistry, deps: Deps) -> None:
    @reg.tool(
        description="Trigger a session hook for CLIs without native hooks (Codex, Gemini...): SessionStart registers "
        "the session and returns the project's last summary; PromptSubmit sets its title; Stop pauses it; "
        "SessionEnd writes its summary. Kebab-case forms (session-start) work too.",
        annotations=WRITES_STATE,
    )
    async def call_hook(
        hook_type: Annotated[
            str,
            Field(
                description="SessionStart, PromptSubmit (UserPromptSubmit), Stop, SessionEnd, PreToolUse, "
                "PostToolUse, PreCompact, SubagentStart, SubagentStop or Notification"
            ),
        ],
        params: Annotated[
            dict[str, Any] | None,
            Field(
                description="hook parameters: session_id (required); SessionStart: source (startup, clear, resume), "
                "cwd, transcript_path, parent_session_id; PromptSubmit: prompt"
            ),
        ] = None,
        source: Annotated[str | None, Field(description="the CLI, e.g. Codex or Gemini")] = None,
    ) -> CallToolResult:
        reply = await hooks_service(deps).call(hook_type, params, source)
        if "available_types" in reply and "hint" not in reply:
            reply["hint"] = did_you_mean_first(hook_type, list(HOOK_TYPES)) + f"hook types: {', '.join(HOOK_TYPES)}"
        return json_result(reply, is_error=not reply["success"])

    @reg.tool(
        description="Execute code (python, bash or node) in a sandbox as a relay job: fresh temp dir, no secrets, "
        "CPU/memory/file limits, no network when bubblewrap is available. Returns stdout as result.",
        annotations=RUNS_AGENT,
    )
    async def execute_code(
        ctx: Context[Any, Any],
        code: Annotated[str, Field(description="Code to execute")],
        language: Annotated[str, Field(description="python, bash or node")] = "python",
        context: Annotated[str | None, Field(description="what the code is for (kept with the job)")] = None,
        timeout: Annotated[int | None, Field(description="Max execution time in seconds (default 30, max 600)")] = None,
    ) -> CallToolResult:
        engine = deps.engine()
        try:
            job_id = submit_execute(
                engine, code, language, timeout=timeout, context=context, hidden=(deps.settings.home, Path.home())
            )
        except RelayError as err:
            near = did_you_mean(language, list(LANGUAGES)) if language.lower() not in LANGUAGE_ALIASES else ""
            if near:
                err = RelayError(err.code, err.message, f"{near} {err.hint}")
            return failure(err, language=language)
        return await _sandbox_reply(engine, job_id, ctx, language)

    @reg.tool(
        description="Reduce a large JSON dataset before it reaches your context. Built-in operations (by name, "
        "driven by parameters): filter, select, sort, top_k, group_count, sample, dedupe, stats, head; any other "
        "operation in plain language is done by model-written code in the sandbox.",
        annotations=READS_OUTSIDE,
    )
    async def process_large_dataset(
        ctx: Context[Any, Any],
        data: Annotated[list[Any] | dict[str, Any], Field(description="Dataset to process (array or object)")],
        operation: Annotated[
            str, Field(description="a built-in operation name, or a natural language operation description")
        ],
        parameters: Annotated[
            dict[str, Any] | None,
            Field(
                description="filter: field, op (eq ne gt gte lt lte contains in exists), value | where {field: value}; "
                "select: fields; sort/top_k: field, order, k; group_count: field; sample: n, seed; dedupe: fields; "
                "stats: fields; path: a list inside an object"
            ),
        ] = None,
        timeout: Annotated[int | None, Field(description="Max execution time in seconds (default 30)")] = None,
    ) -> CallToolResult:
        params = parameters or {}
        started = time.monotonic()
        original = datasets.size_of(data)
        builtin = datasets.operation_of(operation)
        extra: dict[str, Any] = {"operation": operation}
        try:
            if builtin is not None:
                result = await anyio.to_thread.run_sync(datasets.run_builtin, builtin, data, params)
                extra["method"] = f"builtin:{builtin}"
            else:
                engine = deps.engine()
                ask = engine_asker(engine, "process_large_dataset", FUNCTION_TIMEOUT_S)
                try:
                    program = await datasets.write_function(ask, operation, data, params)
                except RelayError as err:
                    if err.code is not ErrorCode.AUTH_MISSING:
                        raise
                    hint = f"use a built-in operation ({', '.join(datasets.OPERATIONS)}), or {err.hint}"
                    raise RelayError(
                        err.code, f"{operation!r} is not a built-in operation and {err.message}", hint
                    ) from None
                payload = json.dumps({"data": data, "parameters": params}).encode()
                job_id = submit_execute(
                    engine,
                    program,
                    "python",
                    timeout=timeout,
                    context=operation,
                    tool="process_large_dataset",
                    hidden=(deps.settings.home, Path.home()),
                    inputs={"input.json": payload},
                )
                extra.update(method="model", job_id=job_id)
                await wait_for_mode(engine, job_id, "sync", ctx)
                outcome = read_outcome(engine, job_id)
                if outcome is None or not outcome.get("success"):
                    detail = (outcome or {}).get("stderr") or engine.envelope(job_id).get("error") or "it did not run"
                    raise RelayError(
                        ErrorCode.AGENT_FAILED,
                        f"the model-written function failed: {str(detail)[-500:]}",
                        "rephrase the operation, or use a built-in operation",
                    )
                try:
                    result = json.loads(str(outcome["result"]))
                except ValueError:
                    result = outcome["result"]
        except RelayError as err:
            return failure(err, **extra)
        processed = datasets.size_of(result)
        return json_result(
            {
                "success": True,
                "result": result,
                "original_size": original,
                "processed_size": processed,
                "reduction_percent": datasets.reduction(original, processed),
                "execution_time": round(time.monotonic() - started, 3),
                **extra,
            }
        )

    if codex_found(deps) or deps.documenting:
        _codex_tools(reg, deps)


async def _sandbox_reply(engine: Engine, job_id: str, ctx: Context[Any, Any], language: str) -> CallToolResult:
    await wait_for_mode(engine, job_id, "sync", ctx)
    outcome = read_outcome(engine, job_id)
    if outcome is None:
        env = engine.envelope(job_id)
        err = RelayError.from_dict(env.get("error") or {"code": "CANCELLED", "message": f"the job {env['status']}"})
        return failure(err, language=language, execution_time=0.0, job_id=job_id, status=env["status"])
    reply: dict[str, Any] = {
        "success": outcome["success"],
        "result": outcome["result"],
        "language": outcome["language"],
        "execution_time": outcome["execution_time"],
        "job_id": job_id,
        "isolation": outcome["isolation"],
        "isolation_details": outcome["isolation_details"],
        "network": outcome["network"],
        "cannot_stop": list(outcome.get("cannot_stop") or []),
    }
    if outcome.get("truncated"):
        reply["truncated"] = True
    if outcome["success"]:
        return json_result(reply)
    timed_out = bool(outcome["timed_out"])
    reply.update(
        error=f"Execution timed out after {outcome['timeout_s']:g} seconds"
        if timed_out
        else f"{outcome['language']} exited with code {outcome['exit_code']}",
        error_type="TimeoutError" if timed_out else "ExecutionError",
        hint="give it a larger timeout (at most 600 seconds), or make it do less"
        if timed_out
        else "the code's own error is in stderr: fix the code and run it again",
        stderr=outcome["stderr"],
        exit_code=outcome["exit_code"],
        timed_out=timed_out,
    )
    return json_result(reply, is_error=True)


def _codex_tools(reg: ToolRegistry, deps: Deps) -> None:
    @reg.tool(
        description="Run Codex (relay's codex adapter, as a relay job) with automatic session tracking; "
        "thread_id continues a thread.",
        annotations=RUNS_AGENT,
    )
    async def codex(
        ctx: Context[Any, Any],
        prompt: Annotated[str, Field(description="User prompt")],
        thread_id: Annotated[str | None, Field(description="Continue existing thread")] = None,
        cwd: Annotated[str | None, Field(description="Working directory (default relay's)")] = None,
        model: Annotated[str | None, Field(description="Model override")] = None,
        sandbox: Annotated[
            Sandbox | None, Field(description="Sandbox mode: readOnly (default), workspaceWrite, dangerFullAccess")
        ] = None,
        approval_policy: Annotated[
            Approval | None, Field(description="Approval policy (codex exec never stops to ask: recorded only)")
        ] = None,
    ) -> CallToolResult:
        engine = deps.engine()
        req = JobRequest(
            agent="codex",
            prompt=prompt,
            cwd=cwd,
            model=model,
            session_id=thread_id,
            permission=SANDBOXES[sandbox] if sandbox else None,
        )
        try:
            job_id = await engine.submit_confirmed(req)
        except RelayError as err:
            return failure(err, thread_id=thread_id)
        await wait_for_mode(engine, job_id, "sync", ctx)
        env = engine.envelope(job_id)
        thread = env.get("session_id") or thread_id
        if thread:
            hooks_service(deps).track(str(thread), source="Codex", cwd=str(env.get("cwd") or cwd or ""), prompt=prompt)
        if env["status"] != "completed":
            err = RelayError.from_dict(env.get("error") or {"code": "AGENT_FAILED", "message": env["status"]})
            return failure(err, thread_id=thread, turn_id=job_id, job_id=job_id, status=env["status"])
        return json_result(
            {
                "success": True,
                "thread_id": thread,
                "session_id": thread,
                "turn_id": job_id,
                "job_id": job_id,
                "response": env.get("output", ""),
                "items": _items(engine, job_id),
                "usage": env.get("usage"),
                "model": env.get("model"),
                "is_continuation": thread_id is not None,
                "approval_policy": approval_policy,
            }
        )

    @reg.tool(description="List Codex conversation threads, most recent first.", annotations=READ_ONLY)
    async def codex_list_threads(
        limit: Annotated[int, Field(ge=1, le=MAX_THREADS, description="Maximum threads to return")] = DEFAULT_THREADS,
        cursor: Annotated[str | None, Field(description="Pagination cursor (next_cursor of the previous page)")] = None,
    ) -> CallToolResult:
        try:
            offset = _offset(cursor)
        except RelayError as err:
            return failure(err)
        threads = [t for t in codex_threads(deps) if not t["archived"]]
        page = [{k: v for k, v in t.items() if k not in INTERNAL} for t in threads[offset : offset + limit]]
        more = offset + limit < len(threads)
        return json_result({"success": True, "threads": page, "next_cursor": _cursor(offset + limit) if more else None})

    @reg.tool(description="Archive a Codex thread: codex_list_threads no longer shows it.", annotations=WRITES_STATE)
    async def codex_archive_thread(
        thread_id: Annotated[str, Field(description="ID of the thread to archive")],
    ) -> CallToolResult:
        # Only the caller's own threads (an admin's: anyone's); another's id is not found, as an unknown one.
        known = [t for t in codex_threads(deps) if t["id"] == thread_id]
        if not known:
            err = RelayError(
                ErrorCode.SESSION_NOT_FOUND, f"Thread {thread_id[:100]} not found", "codex_list_threads lists them"
            )
            return failure(err, thread_id=thread_id)
        hooks = hooks_service(deps)
        for thread in known:
            hooks.archive(thread_id, principal=str(thread["principal"]), source="Codex", cwd=str(thread["cwd"] or ""))
        return json_result({"success": True, "thread_id": thread_id, "message": f"Thread {thread_id} archived"})


TOOLSET = Toolset(
    name="gobby",
    description="seed 003's session hooks, sandboxed code execution, dataset reduction and codex threads",
    build=build,
    error_envelope=seed_envelope,
)
