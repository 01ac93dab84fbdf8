"""Toolset `core`: delegate to agent CLIs, ask model APIs, and read, wait on and cancel jobs."""

import os
import shutil
import time
from typing import Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult
from pydantic import Field

from relay import __version__
from relay.agents import get_adapter, known_agents
from relay.jobs.engine import Engine, JobRequest, job_cursor
from relay.jobs.envelope import job_title
from relay.jobs.request import via_of
from relay.principal import visible_to
from relay.server.approvals import Approver, answering, resumed_job, wait_answering
from relay.server.confirm import Seals, principal_of
from relay.server.models import (
    AgentInfo,
    AllowedRoot,
    AskEnvelope,
    Envelope,
    GrantInfo,
    JobList,
    JobSummary,
    McpServerState,
    ModelInfoOut,
    ModelList,
    OutputPage,
    ProviderOut,
    SessionInfo,
    SessionList,
    StatusInfo,
    ThreadInfo,
    ThreadList,
    WaitResult,
)
from relay.server.results import envelope_result, json_result, model_result, run_guarded, wait_for_mode
from relay.server.steering import SentMessage, send_message
from relay.server.toolsets import full_access_notice
from relay.server.toolsets._registry import (
    DESTROYS_STATE,
    READ_ONLY,
    READS_OUTSIDE,
    RUNS_AGENT,
    Deps,
    ToolRegistry,
    Toolset,
)

JOB_STATUSES = Literal["queued", "running", "completed", "failed", "cancelled", "timed_out", "interrupted"]


def build(reg: ToolRegistry, deps: Deps) -> None:
    models = deps.settings.agent("claude").models

    def approver(ctx: Context[Any, Any]) -> Approver:
        """Who asks the person, in this call, about the permission requests of the caller's ACP jobs."""
        asking = deps.service("approvals_asking", lambda: set[str]())
        return Approver(deps.engine(), ctx, deps.service("confirmation_seals", Seals), asking)

    @reg.tool(
        description=(
            "Delegate a task to another AI coding agent CLI (claude, codex, gemini, copilot) as a durable job. "
            "mode: auto (default) waits up to ~45 s then returns the job_id to job_wait on; sync waits; async returns at once. "
            "Resume a conversation with session_id. Runs read-only unless permission is edit or full."
        ),
        annotations=RUNS_AGENT,
        publish_output=True,
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
        timeout_s: Annotated[float | None, Field(gt=0, description="wall-clock limit for the job")] = None,
        idle_timeout_s: Annotated[
            float | None, Field(gt=0, description="stop if the agent prints nothing this long")
        ] = None,
        permission: Annotated[
            Literal["read-only", "edit", "full"] | None,
            Field(description="default read-only; above the person's grant they are asked, else refused"),
        ] = None,
        system_prompt: Annotated[str | None, Field(description="appended to the agent's system prompt")] = None,
        max_turns: Annotated[int | None, Field(ge=1, description="limit on agent turns")] = None,
        workspace: Annotated[
            str | None,
            Field(description="worktree: own git worktree+branch relay/<job-id>; job:<id>: that job's; default cwd"),
        ] = None,
        base: Annotated[str | None, Field(description="ref a new worktree starts from; default HEAD")] = None,
        repo: Annotated[
            str | None, Field(description="git URL: a worker runs it in a worktree at base, pushes back")
        ] = None,
        subdir: Annotated[str, Field(description="with repo: folder it runs in")] = "",
        carry_changes: Annotated[bool, Field(description="new worktree starts from uncommitted changes")] = False,
        reasoning_effort: Annotated[
            Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None,
            Field(description="claude, codex, copilot: how hard the model thinks (each CLI's nearest level)"),
        ] = None,
    ) -> Annotated[CallToolResult, Envelope]:
        async def go() -> CallToolResult:
            engine = deps.engine()
            req = JobRequest(
                workspace=workspace,
                base=base,
                carry_changes=carry_changes,
                repo=repo,
                subdir=subdir,
                agent=agent,
                prompt=prompt,
                cwd=cwd,
                model=model,
                session_id=session_id,
                continue_latest=continue_latest,
                permission=permission,
                system_prompt=system_prompt,
                max_turns=max_turns,
                reasoning_effort=reasoning_effort,
                timeout_s=timeout_s,
                idle_timeout_s=idle_timeout_s,
            )
            # A retry that answers its job's permission request (2026-07-28) waits on that job: it started already.
            job_id = resumed_job(engine, ctx) or await engine.submit_confirmed(req)
            waited = await wait_answering(engine, approver(ctx), job_id, mode)
            return envelope_result(engine.envelope(job_id, waited))

        return await run_guarded(go)

    @reg.tool(description="A job's current status and result envelope.", annotations=READ_ONLY)
    async def job_status(job_id: str) -> Annotated[CallToolResult, Envelope]:
        async def go() -> CallToolResult:
            return envelope_result(deps.engine().envelope(job_id))

        return await run_guarded(go)

    @reg.tool(
        description=(
            "Read a job's full output in pages: view final (answer), transcript, events (raw stream), stderr; "
            "worktree jobs: diff (against base), test (last test run), setup (files copied in, setup command's output)."
        ),
        annotations=READ_ONLY,
        publish_output=True,
    )
    async def job_result(
        job_id: str,
        view: Literal["final", "transcript", "events", "stderr", "diff", "test", "setup"] = "final",
        offset: Annotated[int, Field(ge=0, description="character offset")] = 0,
        limit: Annotated[int, Field(ge=1, le=200_000, description="characters per page")] = 20_000,
    ) -> Annotated[CallToolResult, OutputPage]:
        async def go() -> CallToolResult:
            engine = deps.engine()
            if view == "diff":  # git, and for a job by repository URL a fetch of its branch: off the event loop
                page = await anyio.to_thread.run_sync(engine.read_output, job_id, view, offset, limit)
            else:
                page = engine.read_output(job_id, view, offset, limit)
            return model_result(OutputPage.model_validate(page))

        return await run_guarded(go)

    @reg.tool(
        description="Wait server-side until any or all of the jobs end, or timeout_s passes. One call per state change.",
        annotations=READ_ONLY,
    )
    async def job_wait(
        ctx: Context[Any, Any],
        job_ids: Annotated[list[str], Field(min_length=1)],
        mode: Literal["any", "all"] = "any",
        timeout_s: Annotated[float, Field(ge=0, le=3600)] = 30.0,
    ) -> Annotated[CallToolResult, WaitResult]:
        async def go() -> CallToolResult:
            engine = deps.engine()
            # Meanwhile the person is asked about what the caller's own agents ask permission for (ACP jobs).
            records = await answering(approver(ctx), job_ids, lambda: engine.wait(job_ids, mode, timeout_s))
            finals = [r.is_final for r in records]
            done = any(finals) if mode == "any" else all(finals)
            envs = [Envelope.model_validate(engine.envelope(r.id)) for r in records]
            return model_result(WaitResult(done=done, jobs=envs))

        return await run_guarded(go)

    @reg.tool(
        description="Steer a running ACP job: a message into its live session, read after the current turn.",
        annotations=RUNS_AGENT,
    )
    async def job_send(
        ctx: Context[Any, Any],
        job_id: str,
        message: Annotated[str, Field(min_length=1)],
    ) -> Annotated[CallToolResult, SentMessage]:
        async def go() -> CallToolResult:
            return model_result(await send_message(deps.engine(), job_id, message, principal_of(ctx)))

        return await run_guarded(go)

    @reg.tool(
        description="Cancel a job: kills its whole process group. Output so far is kept.", annotations=DESTROYS_STATE
    )
    async def job_cancel(job_id: str) -> Annotated[CallToolResult, Envelope]:
        async def go() -> CallToolResult:
            engine = deps.engine()
            rec = await engine.cancel(job_id)
            return envelope_result(engine.envelope(rec.id))

        return await run_guarded(go)

    @reg.tool(description="List recent jobs, newest first.", annotations=READ_ONLY)
    async def job_list(
        status: Annotated[list[JOB_STATUSES] | None, Field(description="e.g. ['running']")] = None,
        agent: str | None = None,
        since: Annotated[float | None, Field(description="unix time")] = None,
        session_id: str | None = None,
        limit: Annotated[int, Field(ge=1, le=500)] = 20,
        cursor: Annotated[str | None, Field(description="next_cursor of the previous page")] = None,
        via: Annotated[str | None, Field(description="prefix of the starting tool, e.g. powerspawn/")] = None,
    ) -> Annotated[CallToolResult, JobList]:
        async def go() -> CallToolResult:
            records = deps.engine().list(
                statuses=tuple(status or ()),
                agent=agent,
                since=since,
                session_id=session_id,
                limit=limit,
                cursor=cursor,
                via=via,
            )
            jobs = [
                JobSummary(
                    job_id=r.id,
                    agent=r.agent,
                    via=via_of(r),
                    status=r.status,
                    model=r.model,
                    created_at=r.created_at,
                    title=job_title(r.request),
                    session_id=r.session_id,
                )
                for r in records
            ]
            more = job_cursor(records[-1]) if len(records) == limit else None
            return model_result(JobList(jobs=jobs, next_cursor=more))

        return await run_guarded(go)

    @reg.tool(
        description="List agent sessions that can be resumed with delegate(session_id=...).",
        annotations=READ_ONLY,
    )
    async def session_list(
        agent: str | None = None, limit: Annotated[int, Field(ge=1, le=500)] = 20
    ) -> Annotated[CallToolResult, SessionList]:
        from relay.hooks import merged_sessions
        from relay.server.toolsets.gobby import hooks_service

        async def go() -> CallToolResult:
            # relay's agent sessions and the sessions CLIs reported through call_hook, in one list.
            hooks = hooks_service(deps).store
            rows = merged_sessions(deps.engine().store, hooks, agent=agent, limit=limit, principal=visible_to())
            return model_result(SessionList(sessions=[SessionInfo.model_validate(r) for r in rows]))

        return await run_guarded(go)

    @reg.tool(
        description="relay's version, uptime, which agent CLIs are installed, running jobs, MCP servers.",
        annotations=READ_ONLY,
    )
    async def status() -> Annotated[CallToolResult, StatusInfo]:
        async def go() -> CallToolResult:
            return model_result(status_info(deps))

        return await run_guarded(go)

    @reg.tool(
        description=(
            "Ask a model API (Anthropic, OpenAI, Gemini, Grok, Mistral, OpenRouter, ollama...) for an answer or a "
            "second opinion. It cannot read files: pass files to show it code. Pass the returned continuation_id "
            "back to continue, with any model. mode: as in delegate. Returns delegate's envelope + continuation_id."
        ),
        annotations=READS_OUTSIDE,
    )
    async def ask(
        ctx: Context[Any, Any],
        prompt: Annotated[str, Field(description="the question, self-contained")],
        model: Annotated[
            str | None,
            Field(
                description="provider:model (xai:grok-4, ollama:llama3.1) or alias (sonnet, gpt5, grok, pro, flash); "
                "default: the thread's model, else the first with a key; see list_models"
            ),
        ] = None,
        system_prompt: Annotated[str | None, Field(description="system instructions for the model")] = None,
        continuation_id: Annotated[
            str | None, Field(description="continue this thread (from an earlier answer)")
        ] = None,
        files: Annotated[
            list[str] | None, Field(description="absolute paths of files/dirs to inline (line-numbered)")
        ] = None,
        images: Annotated[
            list[str] | None, Field(description="absolute image paths (png/jpeg/gif/webp) or data URLs")
        ] = None,
        temperature: Annotated[
            float | None, Field(ge=0, le=2, description="0 focused .. 1 creative; default the model's")
        ] = None,
        thinking_mode: Annotated[
            Literal["minimal", "low", "medium", "high", "max"] | None,
            Field(description="reasoning depth for models that support it; default none"),
        ] = None,
        mode: Literal["auto", "sync", "async"] = "auto",
        timeout_s: Annotated[float | None, Field(gt=0, description="wall-clock limit for the job")] = None,
    ) -> Annotated[CallToolResult, AskEnvelope]:
        from relay.ask import AskArgs, ask_envelope, submit_ask

        async def go() -> CallToolResult:
            engine = deps.engine()
            args = AskArgs(
                prompt=prompt,
                model=model,
                system_prompt=system_prompt,
                continuation_id=continuation_id,
                files=tuple(files or ()),
                images=tuple(images or ()),
                temperature=temperature,
                thinking_mode=thinking_mode,
                timeout_s=timeout_s,
            )
            job_id = await submit_ask(engine, args)
            await wait_for_mode(engine, job_id, mode, ctx)
            env = ask_envelope(engine, job_id)
            result = envelope_result(env)
            data = AskEnvelope.model_validate(env).model_dump(mode="json")
            return json_result(data, is_error=bool(result.is_error))

        return await run_guarded(go)

    @reg.tool(description="List conversation threads (continuation ids), most recent first.", annotations=READ_ONLY)
    async def thread_list(
        limit: Annotated[int, Field(ge=1, le=500, description="how many")] = 20,
    ) -> Annotated[CallToolResult, ThreadList]:
        from relay.threads import open_threads

        async def go() -> CallToolResult:
            threads = open_threads(deps.settings)
            try:
                items = [
                    ThreadInfo.model_validate(t.to_dict(threads.config.max_turns, with_turns=False))
                    for t in threads.list(limit=limit)
                ]
            finally:
                threads.close()
            return model_result(ThreadList(threads=items))

        return await run_guarded(go)

    @reg.tool(description="Show one conversation thread with all its turns.", annotations=READ_ONLY)
    async def thread_show(
        continuation_id: Annotated[str, Field(description="the thread's continuation_id")],
    ) -> Annotated[CallToolResult, ThreadInfo]:
        from relay.threads import open_threads

        async def go() -> CallToolResult:
            threads = open_threads(deps.settings)
            try:
                thread = threads.get(continuation_id)
                info = ThreadInfo.model_validate(thread.to_dict(threads.config.max_turns))
            finally:
                threads.close()
            return model_result(info)

        return await run_guarded(go)

    @reg.tool(
        description="Models that ask can use now (a key is set), with aliases, context windows and prices; "
        "and every provider with the variables that enable it.",
        annotations=READ_ONLY,
    )
    async def list_models() -> Annotated[CallToolResult, ModelList]:
        from relay import ask as core

        async def go() -> CallToolResult:
            settings = deps.settings
            models = [ModelInfoOut.model_validate(m) for m in core.list_models(settings)]
            providers = [ProviderOut.model_validate(p) for p in core.list_providers(settings)]
            return model_result(ModelList(models=models, providers=providers))

        return await run_guarded(go)


def format_uptime(seconds: float) -> str:
    """2h 15m 30s, as seed 003's status shows it."""
    total = int(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes}m {secs}s" if hours else (f"{minutes}m {secs}s" if minutes else f"{secs}s")


def status_info(deps: Deps) -> StatusInfo:
    engine: Engine = deps.engine()
    settings = engine.settings
    agents: list[AgentInfo] = []
    for name in known_agents(settings):
        cfg = settings.agent(name)
        command = cfg.command or get_adapter(name, settings).executable
        path = shutil.which(command)
        agents.append(AgentInfo(name=name, found=path is not None, path=path))
    queued = len(engine.list(statuses=("queued",), limit=10_000))
    uptime = time.time() - deps.started
    servers = mcp_server_states(deps)
    running = engine.running_count()
    found = sum(1 for a in agents if a.found)
    notice = full_access_notice(settings.profile, settings.toolsets)
    return StatusInfo(
        version=__version__,
        pid=os.getpid(),
        port=deps.port,
        uptime=format_uptime(uptime),
        uptime_s=round(uptime, 3),
        uptime_seconds=int(uptime),
        home=str(settings.home),
        agents=agents,
        running_jobs=running,
        queued_jobs=queued,
        models={"claude": list(settings.agent("claude").models)},
        toolsets=deps.exposed_toolsets,
        allowed_roots=[AllowedRoot(path=str(root), source=source) for root, source in settings.root_sources()],
        mcp_servers=servers,
        mcp_server_count=len(servers),
        grant=GrantInfo(
            level=settings.grant, source=settings.grant_source, profile_grants=dict(settings.toolset_grants)
        ),
        formatted_message=(
            f"relay {__version__} running for {format_uptime(uptime)} (pid {os.getpid()}): "
            f"{running} running / {queued} queued jobs, {found} of {len(agents)} agent CLIs installed, "
            f"{len(servers)} MCP servers; calling models get up to '{settings.grant}' without asking"
            + (f"; {notice}" if notice else "")
        ),
    )


def mcp_server_states(deps: Deps) -> list[McpServerState]:
    """The downstream MCP servers the gateway knows (global and this project's), with their connection state."""
    from relay.server.toolsets.gateway import gateway_service

    return [
        McpServerState(
            name=s["name"],
            state=s["state"],
            project_id=s["project_id"],
            description=s["description"],
            connected=s["connected"],
            tools=s["tool_count"],
            last_error=s["last_error"],
        )
        for s in gateway_service(deps).statuses()
    ]


TOOLSET = Toolset(
    name="core",
    description="delegate to agent CLIs and model APIs as durable jobs; wait on, read and cancel them",
    build=build,
)
