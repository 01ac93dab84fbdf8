"""Profile `powerspawn`: PowerSpawn's agent spawner (seed 004) as relay jobs.

spawn_claude / spawn_codex / spawn_copilot run the CLIs through relay's engine with their permission
prompts skipped, as PowerSpawn does; spawn_grok / spawn_gemini / spawn_mistral ask the model APIs
through relay's ask core, with their system_prompt. Every spawn returns at once; the agent id is the
first 8 hex characters of the relay job id, so it survives restarts (`result` finds it in the store).
Model enums and defaults are the seed's, with the v1.5 source's own values accepted as extras
(seed-decisions 18, 19). IAC.md and CONTEXT.md are rendered from relay's audit log (relay.audit).
"""

import logging
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult
from pydantic import Field

from relay.agents.api.keys import KEYS_FILE
from relay.ask import AskArgs, submit_ask
from relay.audit import replace_views, views_config
from relay.config import Settings
from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine, JobRequest
from relay.principal import LOCAL_NAME
from relay.server.results import json_result
from relay.server.toolsets import _compat as compat
from relay.server.toolsets._registry import READ_ONLY, RUNS_AGENT, Deps, ToolRegistry, Toolset, seed_errors
from relay.store import JobRecord

PROFILE = "powerspawn"
ID_CHARS = 8

logger = logging.getLogger("relay.audit")

# Seed 004's texts, in one place.
TEXTS = {
    "spawned": "Agent spawned. Use 'list' to monitor, 'result' to get output.",
    "still_running": "Agent still running. Check back later.",
    "not_found": "No agent found with this ID.",
    "tip": "Use 'result' with an agent_id for its output, or 'wait_for_agents' to wait for all running agents.",
    "api_note": "This is an API agent - returns text response only. Cannot modify files or run commands.",
    "no_key": (
        "{provider} API key not found. Set it via: 1. Local file: {file} (takes priority) "
        "2. Environment variable: {env} Get your key from: {url}"
    ),
}
# Seed 004's command-line settings for each CLI, added to relay's `full` permission flags.
CLAUDE_TOOLS = "Bash,Read,Write,Edit,Glob,Grep"
CLI_ARGS: dict[str, tuple[str, ...]] = {
    # the seed's tool set only: --tools makes just these available, --allowedTools lets them run unasked
    "claude": ("--tools", CLAUDE_TOOLS, "--allowedTools", CLAUDE_TOOLS),
    "codex": ("--dangerously-bypass-approvals-and-sandbox",),
    # (`-s -p <prompt> --allow-all-tools` are relay's own for copilot at `full`)
    "copilot": ("--allow-all-paths", "--allow-tool", "shell", "--allow-tool", "write"),
}
# Seed 004's timeouts, in seconds.
CLAUDE_TIMEOUT_S = 300
CODEX_TIMEOUT_S = 300
COPILOT_TIMEOUT_S = 600
API_TIMEOUT_S = 300
WAIT_TIMEOUT_S = 300
# Codex reports no cost: PowerSpawn's fixed estimate for a successful run.
CODEX_COST_ESTIMATE_USD = 0.005
# wait_for_agents: how much of each result the short summaries keep, and how many recent ones.
SUMMARY_CHARS = 500
RECENT_RESULTS = 5
RECENT_COMPLETED_IDS = 3
# Progress notifications while wait_for_agents blocks, so clients keep the call alive.
KEEPALIVE_S = 10.0

ClaudeModel = Literal["haiku", "sonnet", "opus"]
CopilotModel = Literal[
    "gpt-5.1", "gpt-5", "gpt-5-mini", "claude-sonnet", "claude-haiku", "claude-opus", "gemini", "gpt-5.1-codex"
]
GrokModel = Literal["grok-3", "grok-3-fast", "grok-4", "grok-4.1", "grok-code-fast"]
GeminiModel = Literal[
    "gemini-2.0-flash", "gemini-1.5-pro", "gemini-1.5-flash", "gemini-3-pro", "gemini-2.5-pro", "gemini-pro"
]
MistralModel = Literal[
    "mistral-large-latest",
    "mistral-small-latest",
    "codestral-latest",
    "open-mistral-nemo",
    "mistral-large",
    "mistral-medium",
    "mistral-small",
    "mixtral",
    "devstral",
    "codestral",
]

# The seed's model names as the CLIs and APIs know them (config aliases of the copilot agent win).
COPILOT_MODELS = {
    "claude-sonnet": "claude-sonnet-4.5",
    "claude-haiku": "claude-haiku-4.5",
    "claude-opus": "claude-opus-4.5",
    "gemini": "gemini-3-pro-preview",
}
API_MODELS = {
    "grok-code-fast": "grok-code-fast-1",
    "gemini-3-pro": "gemini-3-pro-preview",
    "mistral-large": "mistral-large-latest",
    "mistral-medium": "mistral-medium-latest",
    "mistral-small": "mistral-small-latest",
    "mixtral": "open-mixtral-8x22b",
    "devstral": "devstral-small-latest",
    "codestral": "codestral-latest",
}


@dataclass(frozen=True)
class _Api:
    """One API agent: relay's provider, how the seed names it, where its key comes from."""

    agent_type: str
    provider: str
    title: str
    env: str
    url: str


APIS = {
    "grok": _Api("grok", "xai", "Grok", "XAI_API_KEY", "https://console.x.ai"),
    "gemini": _Api("gemini", "gemini-api", "Gemini", "GEMINI_API_KEY", "https://aistudio.google.com/apikey"),
    "mistral": _Api("mistral", "mistral", "Mistral", "MISTRAL_API_KEY", "https://console.mistral.ai/api-keys"),
}

Prompt = Annotated[str, Field(description="The task to perform")]
SystemPrompt = Annotated[str | None, Field(description="Optional system role context")]


def build(reg: ToolRegistry, deps: Deps) -> None:
    @reg.tool(
        description=(
            "Spawn a Claude sub-agent for reasoning tasks. Tools: Bash, Read, Write, Edit, Glob, Grep; "
            "Claude CLI auto-loads CLAUDE.md from the project root. Returns an agent_id at once."
        ),
        annotations=RUNS_AGENT,
    )
    async def spawn_claude(
        prompt: Prompt,
        model: Annotated[ClaudeModel, Field(description="haiku | sonnet | opus (default: sonnet)")] = "sonnet",
        timeout: Annotated[int, Field(ge=1, description="Timeout in seconds (default: 300)")] = CLAUDE_TIMEOUT_S,
    ) -> CallToolResult:
        req = JobRequest(agent="claude", prompt=prompt, model=model, permission="full", timeout_s=float(timeout))
        return await _spawn_cli(deps, "spawn_claude", "claude", req, model)

    @reg.tool(
        description=(
            "Spawn a Codex sub-agent for any task (sandbox bypassed for write access; Codex CLI auto-loads "
            "AGENTS.md from the project root). Returns an agent_id at once."
        ),
        annotations=RUNS_AGENT,
    )
    async def spawn_codex(prompt: Prompt) -> CallToolResult:
        req = JobRequest(agent="codex", prompt=prompt, permission="full", timeout_s=float(CODEX_TIMEOUT_S))
        return await _spawn_cli(deps, "spawn_codex", "codex", req, None)

    @reg.tool(
        description=(
            "Spawn a GitHub Copilot CLI sub-agent with any supported model (all tools and paths allowed; "
            "auto-loads AGENTS.md). Returns an agent_id at once."
        ),
        annotations=RUNS_AGENT,
    )
    async def spawn_copilot(
        prompt: Prompt,
        model: Annotated[
            CopilotModel,
            Field(description="gpt-5.1 | gpt-5 | gpt-5-mini | claude-sonnet | claude-haiku | claude-opus | gemini"),
        ] = "gpt-5.1",
    ) -> CallToolResult:
        aliases = deps.settings.agent("copilot").aliases
        cli_model = aliases.get(model) or COPILOT_MODELS.get(model, model)
        req = JobRequest(
            agent="copilot", prompt=prompt, model=cli_model, permission="full", timeout_s=float(COPILOT_TIMEOUT_S)
        )
        return await _spawn_cli(deps, "spawn_copilot", "copilot", req, model)

    @reg.tool(
        description=f"Spawn a Grok sub-agent via X.ai API. {TEXTS['api_note']} Use for analysis, research, "
        "and getting second opinions.",
        annotations=RUNS_AGENT,
    )
    async def spawn_grok(
        prompt: Annotated[str, Field(description="The task for Grok to perform")],
        model: Annotated[GrokModel, Field(description="Model to use (default: grok-3)")] = "grok-3",
        system_prompt: SystemPrompt = None,
        timeout: Annotated[int, Field(ge=1, description="Timeout in seconds (default: 300)")] = API_TIMEOUT_S,
    ) -> CallToolResult:
        return await _spawn_api(deps, APIS["grok"], prompt, model, system_prompt, timeout)

    @reg.tool(
        description=f"Spawn a Gemini sub-agent via Google API. {TEXTS['api_note']} Ideal for long context "
        "analysis and research.",
        annotations=RUNS_AGENT,
    )
    async def spawn_gemini(
        prompt: Annotated[str, Field(description="The task for Gemini to perform")],
        model: Annotated[GeminiModel, Field(description="Model to use (default: gemini-2.0-flash)")] = (
            "gemini-2.0-flash"
        ),
        system_prompt: SystemPrompt = None,
    ) -> CallToolResult:
        return await _spawn_api(deps, APIS["gemini"], prompt, model, system_prompt, API_TIMEOUT_S)

    @reg.tool(
        description=f"Spawn a Mistral sub-agent via Mistral API. {TEXTS['api_note']} Good for code analysis "
        "and European compliance.",
        annotations=RUNS_AGENT,
    )
    async def spawn_mistral(
        prompt: Annotated[str, Field(description="The task for Mistral to perform")],
        model: Annotated[MistralModel, Field(description="Model to use (default: mistral-large-latest)")] = (
            "mistral-large-latest"
        ),
        system_prompt: SystemPrompt = None,
    ) -> CallToolResult:
        return await _spawn_api(deps, APIS["mistral"], prompt, model, system_prompt, API_TIMEOUT_S)

    @reg.tool(name="list", description="List running and recently completed agents.", annotations=READ_ONLY)
    async def list_agents() -> CallToolResult:
        engine = deps.engine()
        now = time.time()
        running = [
            {"id": _agent_id(rec), "sec": int(now - (rec.started_at or rec.created_at))}
            for rec, _ in reversed(_jobs(engine, active=True))
        ]
        done = [_agent_id(rec) for rec, _ in _jobs(engine, active=False, limit=RECENT_COMPLETED_IDS)]
        return json_result({"running": running, "completed_ids": list(reversed(done)), "tip": TEXTS["tip"]})

    @reg.tool(description="Get the result of a completed agent.", annotations=READ_ONLY)
    async def result(
        agent_id: Annotated[str, Field(description="ID returned from spawn")],
    ) -> CallToolResult:
        engine = deps.engine()
        found = _find(engine, agent_id)
        if found is None:
            return json_result({"agent_id": agent_id, "status": "not_found", "message": TEXTS["not_found"]})
        rec, org = found
        if not rec.is_final:
            return json_result(
                {
                    "agent_id": _agent_id(rec),
                    "status": "running",
                    "elapsed_seconds": round(time.time() - (rec.started_at or rec.created_at), 1),
                    "message": TEXTS["still_running"],
                }
            )
        return json_result(_record(engine, rec, org))

    @reg.tool(description="Block until all running agents complete, then return all results.", annotations=READ_ONLY)
    async def wait_for_agents(
        ctx: Context[Any, Any],
        timeout: Annotated[int, Field(ge=0, description="Max seconds to wait (default: 300)")] = WAIT_TIMEOUT_S,
    ) -> CallToolResult:
        engine = deps.engine()
        start = time.monotonic()
        active = _jobs(engine, active=True)
        if not active:
            recent = _jobs(engine, active=False, limit=RECENT_RESULTS)
            summaries = [_summary(engine, rec) for rec, _ in recent]
            return json_result({"status": "no_agents_running", "recent_results": summaries})
        ids = [rec.id for rec, _ in reversed(active)]
        records = await _wait_all(engine, ids, float(timeout), ctx)
        elapsed = round(time.monotonic() - start, 1)
        origins = {rec.id: org for rec, org in active}
        if all(rec.is_final for rec in records):
            results = [_wait_row(engine, rec, origins[rec.id]) for rec in records]
            return json_result({"status": "all_completed", "elapsed_seconds": elapsed, "results": results})
        return json_result(
            {
                "status": "timeout",
                "elapsed_seconds": elapsed,
                "still_running": [_agent_id(rec) for rec in records if not rec.is_final],
                "completed_results": [_summary(engine, rec) for rec in records if rec.is_final],
            }
        )


def on_start(engine: Engine, deps: Deps) -> None:
    """IAC.md and CONTEXT.md where a PowerSpawn user looks (the workspace, unless `[audit] views_dir` says
    otherwise), written before this server answers anything. CONTEXT.md starts afresh with this server, as
    the seed's does, but keeps the agents that outlived the last one (still queued or running once the engine
    has recovered its jobs: what `list` shows). On a relay that serves `user` tokens they hold only the local
    person's jobs: a file in the workspace is read by every job run there, so no token's prompts go into it."""
    settings = deps.settings
    where = Path(workspace(settings))
    config = views_config(settings.home, where, settings.environ, default_dir=where, context_since=deps.started)
    carried = engine.store.list_jobs(statuses=("queued", "running"), limit=compat.SCAN_LIMIT)
    config = replace(config, carried=frozenset(rec.id for rec in carried))
    if any(not named.principal.is_admin for named in settings.tokens):
        config = replace(config, principals=frozenset({LOCAL_NAME}))
    log = engine.store.audit
    replace_views(log, config)
    if log.views is not None:
        try:
            log.views.render()
        except Exception as exc:  # a view that cannot be written must not stop the server (the next change retries)
            logger.warning("rendering IAC.md / CONTEXT.md failed: %s", exc)


def workspace(settings: Settings) -> str:
    """Where the CLIs run (PowerSpawn's project root): relay's working directory, or its first allowed root."""
    here = Path.cwd()
    roots = settings.allowed_roots
    if not roots or any(here == r or here.is_relative_to(r) for r in roots):
        return str(here)
    return str(roots[0])


async def _spawn_cli(deps: Deps, tool: str, agent_type: str, req: JobRequest, model: str | None) -> CallToolResult:
    engine = deps.engine()
    req = replace(req, cwd=workspace(deps.settings), cli_args=CLI_ARGS[agent_type])
    try:
        job_id = await compat.start(engine, req, profile=PROFILE, tool=tool, agent_type=agent_type, model=model)
    except RelayError as err:
        return _failure(err)
    return _spawned(job_id, agent_type, model)


async def _spawn_api(
    deps: Deps, api: _Api, prompt: str, model: str, system_prompt: str | None, timeout: int
) -> CallToolResult:
    engine = deps.engine()
    api_model = f"{api.provider}:{API_MODELS.get(model, model)}"
    args = AskArgs(
        prompt=prompt,
        model=api_model,
        system_prompt=system_prompt or None,
        timeout_s=float(timeout),
        tool=f"spawn_{api.agent_type}",
    )
    try:
        job_id = await submit_ask(engine, args)
    except RelayError as err:
        if err.code == ErrorCode.AUTH_MISSING:
            file = deps.settings.home / KEYS_FILE
            text = TEXTS["no_key"].format(provider=api.title, file=file, env=api.env, url=api.url)
            return _failure(RelayError(err.code, text, err.hint), "ValueError")
        return _failure(err)
    compat.remember(
        engine, job_id, profile=PROFILE, tool=f"spawn_{api.agent_type}", agent_type=api.agent_type, model=model
    )
    return _spawned(job_id, api.agent_type, model)


def _spawned(job_id: str, agent_type: str, model: str | None) -> CallToolResult:
    reply: dict[str, Any] = {"agent_id": job_id[:ID_CHARS], "agent_type": agent_type}
    if model is not None:
        reply["model"] = model
    reply |= {"status": "running", "message": TEXTS["spawned"]}
    return json_result(reply)


def _failure(err: RelayError, error_type: str | None = None) -> CallToolResult:
    """PowerSpawn's answer to an exception: `{success: false, error, error_type}` (plus relay's code and hint)."""
    reply = {
        "success": False,
        "error": err.message,
        "error_type": error_type or err.code.value,
        "hint": err.hint,
    }
    return json_result(reply, is_error=True)


def _agent_id(rec: JobRecord) -> str:
    return rec.id[:ID_CHARS]


def _jobs(engine: Engine, *, active: bool, limit: int = compat.SCAN_LIMIT) -> list[tuple[JobRecord, compat.Origin]]:
    """The profile's jobs still running (or queued), or its finished ones; newest first."""
    statuses = ("queued", "running") if active else ("completed", "failed", "cancelled", "timed_out", "interrupted")
    return compat.profile_jobs(engine, PROFILE, statuses=statuses, limit=limit)


def _find(engine: Engine, agent_id: str) -> tuple[JobRecord, compat.Origin] | None:
    """The profile's job whose id starts with `agent_id` (the 8 hex characters a spawn returned)."""
    wanted = agent_id.strip().lower()
    if not (4 <= len(wanted) <= 32) or any(c not in "0123456789abcdef" for c in wanted):
        return None
    found: list[tuple[JobRecord, compat.Origin]] = []
    for rec in engine.find(wanted):
        org = compat.origin(engine, rec.id)
        if org is not None and org.profile == PROFILE:
            found.append((rec, org))
    return found[0] if len(found) == 1 else None


def _cost(rec: JobRecord, agent_type: str) -> float:
    reported = (rec.result or {}).get("cost_usd")
    if isinstance(reported, int | float):
        return float(reported)
    if agent_type == "codex" and rec.status == "completed":
        return CODEX_COST_ESTIMATE_USD
    return 0.0


def _error(rec: JobRecord) -> str | None:
    return None if rec.status == "completed" else compat.error_message(rec)


def _record(engine: Engine, rec: JobRecord, org: compat.Origin) -> dict[str, Any]:
    """A finished agent as PowerSpawn's completed record."""
    agent_type = str(org.fields.get("agent_type") or rec.agent)
    reply: dict[str, Any] = {"agent_id": _agent_id(rec), "agent_type": agent_type}
    if org.fields.get("model") is not None:
        reply["model"] = org.fields["model"]
    finished = datetime.fromtimestamp(rec.finished_at or time.time(), UTC).isoformat(timespec="seconds")
    reply |= {
        "success": rec.status == "completed",
        "result": compat.output_text(engine, rec.id),
        "cost_usd": _cost(rec, agent_type),
        "completed_at": finished,
        "error": _error(rec),
    }
    return reply


def _summary(engine: Engine, rec: JobRecord) -> dict[str, Any]:
    return {
        "id": _agent_id(rec),
        "success": rec.status == "completed",
        "result": compat.output_text(engine, rec.id, SUMMARY_CHARS),
    }


def _wait_row(engine: Engine, rec: JobRecord, org: compat.Origin) -> dict[str, Any]:
    agent_type = str(org.fields.get("agent_type") or rec.agent)
    return {
        "id": _agent_id(rec),
        "type": agent_type,
        "success": rec.status == "completed",
        "result": compat.output_text(engine, rec.id),
        "error": _error(rec),
        "cost_usd": _cost(rec, agent_type),
    }


async def _wait_all(engine: Engine, ids: list[str], timeout: float, ctx: Context[Any, Any]) -> list[JobRecord]:
    """Wait (bounded by `timeout`) for every job, sending a progress beat now and then to keep the call alive."""
    records: list[JobRecord] = []
    async with anyio.create_task_group() as tg:

        async def keepalive() -> None:
            beats = 0
            while True:
                await anyio.sleep(KEEPALIVE_S)
                beats += 1
                try:
                    await ctx.report_progress(beats, None, "waiting for agents")
                except Exception:  # a client that cannot take progress must not fail the wait
                    return

        tg.start_soon(keepalive)
        records = await engine.wait(ids, "all", timeout)
        tg.cancel_scope.cancel()
    by_id = {rec.id: rec for rec in records}
    return [by_id.get(job_id) or engine.get(job_id) for job_id in ids]


TOOLSET = Toolset(
    name=PROFILE,
    description="PowerSpawn's agent spawner (seed 004): CLI and API sub-agents as relay jobs, list/result/wait",
    build=build,
    on_start=on_start,
    error_envelope=seed_errors(_failure),
)
