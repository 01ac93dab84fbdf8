"""relay's MCP server: a thin layer of tools over the job engine (validation, waiting, progress)."""

import json
import os
import shutil
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from relay import __version__
from relay.agents import known_agents
from relay.config import Settings
from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine, JobRequest
from relay.jobs.envelope import job_title
from relay.server.models import (
    AgentInfo,
    Envelope,
    JobList,
    JobSummary,
    OutputPage,
    SessionInfo,
    SessionList,
    StatusInfo,
    WaitResult,
)

INSTRUCTIONS = (
    "relay delegates work to other AI agents (claude, codex, gemini, copilot CLIs) as durable jobs. "
    "Call delegate; if it returns status 'running', call job_wait with its job_id, then job_result for long output."
)

# Tools whose output schema is published in tools/list. Every tool returns structured content
# (validated against its model on the server); the envelope's shape is advertised once, on the
# tools that produce it first, so tools/list stays small (each repeat costs ~400 tokens).
PUBLISHED_OUTPUT_SCHEMAS = frozenset({"delegate", "ask", "job_result"})

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)


class EngineHolder:
    """The engine lives in the server's lifespan; tools reach it through this holder."""

    def __init__(self) -> None:
        self.engine: Engine | None = None

    def get(self) -> Engine:
        if self.engine is None:
            raise RelayError(ErrorCode.INTERNAL, "relay's job engine is not running", "restart relay")
        return self.engine


def error_result(err: RelayError) -> CallToolResult:
    payload = {"error": err.to_dict()}
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(payload))],
        structured_content=payload,
        is_error=True,
    )


def model_result(model: BaseModel, is_error: bool = False) -> CallToolResult:
    data = model.model_dump(mode="json")
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(data))], structured_content=data, is_error=is_error
    )


def envelope_result(env: dict[str, Any]) -> CallToolResult:
    """A job envelope as a tool result; a failed job is an `isError` result that still carries the envelope."""
    failed = env["status"] in ("failed", "cancelled", "timed_out", "interrupted")
    return model_result(Envelope.model_validate(env), is_error=failed)


def compact_schema(node: Any, output: bool = False) -> Any:
    """A JSON schema without what costs the calling model tokens and tells it nothing.

    Drops pydantic's generated `title`s and folds `anyOf: [{type: T}, {type: null}]` into
    `type: [T, "null"]`; the validating schema the SDK keeps is untouched.
    """
    if isinstance(node, list):
        return [compact_schema(v, output) for v in node]  # pyright: ignore[reportUnknownVariableType]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():  # pyright: ignore[reportUnknownVariableType]
        if key == "title" and isinstance(value, str):
            continue
        if output and key in ("default", "description"):
            continue  # the values the server sends explain themselves; the input schema is what guides a model
        if key == "properties" and isinstance(value, dict):
            out[key] = {k: compact_schema(v, output) for k, v in value.items()}  # pyright: ignore[reportUnknownVariableType]
            continue
        out[str(key)] = compact_schema(value, output)  # pyright: ignore[reportUnknownArgumentType]
    variants = out.get("anyOf")
    if isinstance(variants, list) and len(variants) == 2 and {"type": "null"} in variants:  # pyright: ignore[reportUnknownArgumentType]
        others: list[Any] = [v for v in variants if v != {"type": "null"}]  # pyright: ignore[reportUnknownVariableType]
        other: dict[str, Any] = others[0] if isinstance(others[0], dict) else {}  # pyright: ignore[reportUnknownVariableType]
        if isinstance(other.get("type"), str) and len(other) <= 2:
            del out["anyOf"]
            out.update(other)  # pyright: ignore[reportUnknownArgumentType]
            out["type"] = [other["type"], "null"]
    return out


class RelayServer(MCPServer[Any]):
    """MCPServer whose argument-validation failures come back as relay errors with a code and a hint."""

    async def list_tools(self) -> list[Any]:
        tools = await super().list_tools()
        return [
            t.model_copy(
                update={
                    "input_schema": compact_schema(t.input_schema),
                    "output_schema": (
                        compact_schema(t.output_schema, output=True)
                        if t.output_schema and t.name in PUBLISHED_OUTPUT_SCHEMAS
                        else None
                    ),
                }
            )
            for t in tools
        ]

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):
                problems = "; ".join(
                    f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in cause.errors()[:5]
                )
                return error_result(
                    RelayError(
                        ErrorCode.INVALID_ARGUMENT,
                        f"invalid arguments for {name}: {problems}",
                        "fix the arguments as the tool's input schema describes",
                    )
                )
            if isinstance(cause, RelayError):
                return error_result(cause)
            if cause is not None:
                return error_result(
                    RelayError(
                        ErrorCode.INTERNAL,
                        f"{name} failed: {type(cause).__name__}: {cause}",
                        "report this as a relay bug",
                    )
                )
            raise


async def run_guarded(fn: Callable[[], Awaitable[CallToolResult]]) -> CallToolResult:
    try:
        return await fn()
    except RelayError as err:
        return error_result(err)


async def wait_with_progress(engine: Engine, job_id: str, timeout: float, ctx: Context[Any, Any] | None) -> None:
    """Wait for a job while turning its events into MCP progress notifications (when asked for)."""
    events = engine.subscribe(job_id)
    async with anyio.create_task_group() as tg:

        async def forward() -> None:
            async with events:
                async for seq, event in events:
                    if ctx is None:
                        continue
                    text = str(event.data.get("text") or event.data.get("name") or event.data.get("message") or "")
                    message = f"{event.type}: {text[:200]}" if text else event.type
                    try:
                        await ctx.report_progress(seq + 1, None, message)
                    except Exception:  # a client that went away must not fail the job
                        return

        tg.start_soon(forward)
        rec = await engine.wait_one(job_id, timeout)
        if not rec.is_final:
            # Handing back a still-running job: stop forwarding; a finished job's stream closes itself.
            tg.cancel_scope.cancel()


async def run_job(
    engine: Engine, submit: Callable[[], str], mode: str, ctx: Context[Any, Any] | None
) -> CallToolResult:
    """Submit, then wait as the mode says; a caller that goes away during a sync/auto wait cancels its job."""
    job_id = submit()
    if mode != "async":
        limit = engine.settings.auto_threshold_s if mode == "auto" else float("inf")
        try:
            await wait_with_progress(engine, job_id, limit, ctx)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await engine.cancel(job_id)
            raise
    return envelope_result(engine.envelope(job_id))


def build_server(settings: Settings, engine_factory: Callable[[Settings], Engine] = Engine) -> RelayServer:
    """The MCP server with relay's core tools; the engine starts in its lifespan."""
    holder = EngineHolder()
    started = time.time()

    @asynccontextmanager
    async def lifespan(_: MCPServer[Any]) -> AsyncGenerator[dict[str, Any]]:
        engine = engine_factory(settings)
        async with engine.running():
            holder.engine = engine
            try:
                yield {"engine": engine}
            finally:
                holder.engine = None

    server = RelayServer("relay", version=__version__, instructions=INSTRUCTIONS, lifespan=lifespan)
    models = settings.agent("claude").models

    @server.tool(
        description=(
            "Delegate a task to another AI coding agent CLI (claude, codex, gemini, copilot) as a durable job. "
            "mode: auto (default) waits up to ~45 s then returns the job_id to job_wait on; sync waits; async returns at once. "
            "Resume a conversation with session_id. Runs read-only unless permission is edit or full."
        )
    )
    async def delegate(
        ctx: Context[Any, Any],
        prompt: Annotated[str, Field(description="the task, self-contained")],
        agent: Annotated[str, Field(description="claude, codex, gemini, copilot or a configured CLI")] = "claude",
        cwd: Annotated[str | None, Field(description="absolute working directory; default relay's")] = None,
        model: Annotated[str | None, Field(description=f"model or alias; claude: {', '.join(models)}")] = None,
        session_id: Annotated[str | None, Field(description="the agent's session to resume")] = None,
        continue_latest: Annotated[bool, Field(description="continue the newest session in cwd")] = False,
        mode: Literal["auto", "sync", "async"] = "auto",
        timeout_s: Annotated[float | None, Field(description="wall-clock limit for the job")] = None,
        idle_timeout_s: Annotated[float | None, Field(description="stop if the agent prints nothing this long")] = None,
        permission: Annotated[
            Literal["read-only", "edit", "full"] | None, Field(description="default read-only")
        ] = None,
        system_prompt: Annotated[str | None, Field(description="appended to the agent's system prompt")] = None,
        max_turns: Annotated[int | None, Field(description="limit on agent turns")] = None,
    ) -> Annotated[CallToolResult, Envelope]:
        async def go() -> CallToolResult:
            engine = holder.get()
            req = JobRequest(
                agent=agent,
                prompt=prompt,
                cwd=cwd,
                model=model,
                session_id=session_id,
                continue_latest=continue_latest,
                permission=permission,
                system_prompt=system_prompt,
                max_turns=max_turns,
                timeout_s=timeout_s,
                idle_timeout_s=idle_timeout_s,
            )
            return await run_job(engine, lambda: engine.submit(req), mode, ctx)

        return await run_guarded(go)

    @server.tool(description="A job's current status and result envelope.", annotations=READ_ONLY)
    async def job_status(job_id: str) -> Annotated[CallToolResult, Envelope]:
        return await run_guarded(lambda: _value(envelope_result(holder.get().envelope(job_id))))

    @server.tool(
        description="Read a job's full output in pages: view final (answer), transcript, events (raw stream) or stderr.",
        annotations=READ_ONLY,
    )
    async def job_result(
        job_id: str,
        view: Literal["final", "transcript", "events", "stderr"] = "final",
        offset: Annotated[int, Field(ge=0, description="character offset")] = 0,
        limit: Annotated[int, Field(ge=1, le=200_000, description="characters per page")] = 20_000,
    ) -> Annotated[CallToolResult, OutputPage]:
        return await run_guarded(
            lambda: _value(
                model_result(OutputPage.model_validate(holder.get().read_output(job_id, view, offset, limit)))
            )
        )

    @server.tool(
        description="Wait server-side until any or all of the jobs end, or timeout_s passes. One call per state change.",
        annotations=READ_ONLY,
    )
    async def job_wait(
        job_ids: list[str],
        mode: Literal["any", "all"] = "any",
        timeout_s: Annotated[float, Field(ge=0, le=3600)] = 30.0,
    ) -> Annotated[CallToolResult, WaitResult]:
        async def go() -> CallToolResult:
            engine = holder.get()
            records = await engine.wait(job_ids, mode, timeout_s)
            finals = [r.is_final for r in records]
            done = any(finals) if mode == "any" else all(finals)
            envs = [Envelope.model_validate(engine.envelope(r.id)) for r in records]
            return model_result(WaitResult(done=done, jobs=envs))

        return await run_guarded(go)

    @server.tool(description="Cancel a job: kills its whole process group. Output so far is kept.")
    async def job_cancel(job_id: str) -> Annotated[CallToolResult, Envelope]:
        async def go() -> CallToolResult:
            engine = holder.get()
            rec = await engine.cancel(job_id)
            return model_result(Envelope.model_validate(engine.envelope(rec.id)))

        return await run_guarded(go)

    @server.tool(description="List recent jobs, newest first.", annotations=READ_ONLY)
    async def job_list(
        status: Annotated[list[str] | None, Field(description="e.g. ['running']")] = None,
        agent: str | None = None,
        since: Annotated[float | None, Field(description="unix time")] = None,
        session_id: str | None = None,
        limit: Annotated[int, Field(ge=1, le=500)] = 20,
    ) -> Annotated[CallToolResult, JobList]:
        async def go() -> CallToolResult:
            records = holder.get().list(
                statuses=status or (), agent=agent, since=since, session_id=session_id, limit=limit
            )
            jobs = [
                JobSummary(
                    job_id=r.id,
                    agent=r.agent,
                    status=r.status,
                    model=r.model,
                    created_at=r.created_at,
                    title=job_title(r.request),
                    session_id=r.session_id,
                )
                for r in records
            ]
            return model_result(JobList(jobs=jobs))

        return await run_guarded(go)

    @server.tool(
        description="List agent sessions that can be resumed with delegate(session_id=...).",
        annotations=READ_ONLY,
    )
    async def session_list(
        agent: str | None = None, limit: Annotated[int, Field(ge=1, le=500)] = 20
    ) -> Annotated[CallToolResult, SessionList]:
        async def go() -> CallToolResult:
            sessions = [
                SessionInfo(
                    agent=s.agent,
                    session_id=s.session_id,
                    cwd=s.cwd,
                    model=s.model,
                    permission=s.permission,
                    title=s.title,
                    turns=s.turns,
                    total_cost_usd=s.total_cost_usd,
                    last_used_at=s.last_used_at,
                )
                for s in holder.get().store.list_sessions(agent=agent, limit=limit)
            ]
            return model_result(SessionList(sessions=sessions))

        return await run_guarded(go)

    @server.tool(
        description="relay's version, uptime, which agent CLIs are installed, running jobs.",
        annotations=READ_ONLY,
    )
    async def status() -> Annotated[CallToolResult, StatusInfo]:
        async def go() -> CallToolResult:
            engine = holder.get()
            return model_result(status_info(engine, started))

        return await run_guarded(go)

    try:
        from relay.server import api_tools
    except ImportError:  # the model-API tools are optional
        pass
    else:
        api_tools.register(server, holder.get, envelope_result)

    return server


def status_info(engine: Engine, started: float) -> StatusInfo:
    settings = engine.settings
    agents: list[AgentInfo] = []
    for name in known_agents(settings):
        cfg = settings.agent(name)
        from relay.agents import get_adapter

        command = cfg.command or get_adapter(name, settings).executable
        path = shutil.which(command)
        agents.append(AgentInfo(name=name, found=path is not None, path=path))
    queued = len(engine.list(statuses=("queued",), limit=10_000))
    return StatusInfo(
        version=__version__,
        pid=os.getpid(),
        uptime_s=round(time.time() - started, 3),
        home=str(settings.home),
        agents=agents,
        running_jobs=engine.running_count(),
        queued_jobs=queued,
        models={"claude": list(settings.agent("claude").models)},
    )


async def _value(result: CallToolResult) -> CallToolResult:
    return result
