"""Which model a workflow uses (`auto` per tool category, as Zen does) and running it as a job.

Every model call of a workflow is a job of relay's engine (listed, cancellable, its output
paged), made through relay's model APIs (`relay.ask`); CLI agents go through `Engine.submit`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from relay.agents.api._chat import run_chat
from relay.agents.api.keys import find_key
from relay.agents.api.registry import ModelInfo, load_registry
from relay.ask import AskArgs, list_models, make_task, prepare_ask
from relay.config import Settings
from relay.errors import ErrorCode, RelayError
from relay.events import WARNING, AgentResult, Event
from relay.jobs.engine import Engine, JobRequest
from relay.threads import Thread, open_threads
from relay.workflows.messages import TOOL_CATEGORIES

AUTO = "auto"
# Claude Code's short model names (seed 000), resolved before the CLI sees them.
CLAUDE_SHORT_NAMES = {"h": "haiku", "s": "sonnet", "o": "opus"}
# Prefix that makes a consensus entry an agent CLI instead of a model API: `cli:codex`, `cli:claude/o`.
CLI_PREFIX = "cli:"


def _pick(category: str, available: list[dict[str, Any]]) -> dict[str, Any]:
    """The preferred reachable model for a category (registry order breaks ties)."""
    if category == "extended_reasoning":
        reasoning = [m for m in available if m["reasoning"]]
        return reasoning[0] if reasoning else available[0]
    if category == "fast_response":
        priced = [m for m in available if m["input_per_mtok"] is not None]
        return min(priced, key=lambda m: m["input_per_mtok"]) if priced else available[0]
    return available[0]


def _unavailable(name: str, tool: str, settings: Settings) -> RelayError:
    available = list_models(settings)
    category = TOOL_CATEGORIES.get(tool, "balanced")
    names = ", ".join(m["id"] for m in available) or "none (no API key is set)"
    suggestion = (
        f" Suggested model for {tool}: '{_pick(category, available)['id']}' (category: {category})."
        if (available)
        else ""
    )
    return RelayError(
        ErrorCode.MODEL_NOT_FOUND,
        f"Model '{name}' is not available with current API keys. Available models: {names}.{suggestion}",
        "pass one of the available models, or 'auto'; list_models shows aliases",
    )


def resolve_model(settings: Settings, name: str | None, tool: str, thread: Thread | None = None) -> ModelInfo:
    """The API model for `name` (an id or alias), or for `auto`/none: the thread's, else the category's pick."""
    registry = load_registry(settings)
    if name is None or not name.strip() or name.strip().lower() == AUTO:
        if thread is not None and thread.last_model and (name is None or not name.strip()):
            try:
                return _reachable(settings, thread.last_model, tool)
            except RelayError:
                pass  # the thread's model (or a CLI's name) is not callable here: pick by category
        available = list_models(settings)
        if not available:
            raise _unavailable(name or AUTO, tool, settings)
        return registry.resolve(_pick(TOOL_CATEGORIES.get(tool, "balanced"), available)["id"])
    return _reachable(settings, name, tool)


def _reachable(settings: Settings, name: str, tool: str) -> ModelInfo:
    registry = load_registry(settings)
    try:
        model = registry.resolve(name)
    except RelayError:
        raise _unavailable(name, tool, settings) from None
    provider = registry.providers[model.provider]
    if not provider.local and find_key(provider, settings) is None:
        raise _unavailable(name, tool, settings)
    return model


@dataclass(frozen=True)
class CliTarget:
    """An agent CLI named in a workflow (`cli:claude/o`): the agent and its model (short names resolved)."""

    agent: str
    model: str | None


def cli_target(spec: str) -> CliTarget | None:
    """The CLI a `cli:` spec names, or None for a model API name."""
    if not spec.startswith(CLI_PREFIX):
        return None
    agent, _, model = spec[len(CLI_PREFIX) :].partition("/")
    return CliTarget(agent.strip(), cli_model(agent.strip(), model.strip() or None))


def cli_model(agent: str, model: str | None) -> str | None:
    """Claude's h/s/o become haiku/sonnet/opus; everything else passes through."""
    if model is not None and agent == "claude":
        return CLAUDE_SHORT_NAMES.get(model.lower(), model)
    return model


@dataclass(frozen=True)
class Answer:
    """A finished model or CLI job: its text, or its error."""

    job_id: str
    ok: bool
    text: str
    model: str
    provider: str
    error: dict[str, Any] | None
    duration_s: float | None
    exit_code: int | None = None


def start_model_job(engine: Engine, args: AskArgs, *, record: bool) -> str:
    """Start a model API call as a job; `record` adds the exchange to the thread as `ask` does."""
    threads = open_threads(engine.settings)
    try:
        prepared = prepare_ask(engine.settings, args, threads)
    except BaseException:
        threads.close()
        raise
    ids: list[str] = []

    async def unrecorded(emit: Callable[[Event], None]) -> AgentResult:
        for message in prepared.warnings:
            emit(Event(WARNING, {"message": message}))
        return await run_chat(prepared.call, emit, fallback=prepared.fallback)

    if record:
        task = make_task(prepared, args, threads, lambda: ids[0] if ids else None)
    else:
        threads.close()
        task = unrecorded

    try:
        job_id = engine.submit_task(
            prepared.call.provider.name,
            prepared.request,
            task,
            model=prepared.call.model.id,
            timeout_s=args.timeout_s,
        )
    except BaseException:
        if record:
            threads.close()
        raise
    ids.append(job_id)
    return job_id


def default_cwd(settings: Settings) -> str | None:
    """Where a CLI runs when the tool names no directory: the first allowed root (relay's start directory)."""
    return str(settings.allowed_roots[0]) if settings.allowed_roots else None


def cli_job_request(
    settings: Settings, target: CliTarget, prompt: str, system_prompt: str | None, permission: str | None = None
) -> JobRequest:
    """An agent CLI's job (read-only unless config says otherwise) in relay's directory."""
    return JobRequest(
        agent=target.agent,
        prompt=prompt,
        cwd=default_cwd(settings),
        model=target.model,
        system_prompt=system_prompt,
        permission=permission,
    )


def start_cli_job(engine: Engine, target: CliTarget, prompt: str, system_prompt: str | None) -> str:
    """Start an agent CLI as a job at the default permission (always within the grant: relay.jobs.grants)."""
    return engine.submit(cli_job_request(engine.settings, target, prompt, system_prompt))


async def wait_job(engine: Engine, job_id: str) -> None:
    """Wait for a job to end; a caller that goes away cancels it."""
    try:
        while not (await engine.wait_one(job_id, float("inf"))).is_final:
            pass  # the engine bounds each wait; the job's own timeout bounds the whole
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await engine.cancel(job_id)
        raise


def answer(engine: Engine, job_id: str) -> Answer:
    """The answer of a finished job: full text (not the envelope's bounded output), model and error."""
    rec = engine.get(job_id)
    page = engine.read_output(job_id, "final", 0, 10_000_000)
    duration = rec.finished_at - rec.started_at if rec.finished_at and rec.started_at else None
    model = rec.model or rec.agent
    return Answer(
        job_id=rec.id,
        ok=rec.status == "completed",
        text=str(page["text"]),
        model=model,
        provider=rec.agent,
        error=rec.error
        or ({"code": rec.status.upper(), "message": f"job {rec.status}"} if rec.status != "completed" else None),
        duration_s=round(duration, 3) if duration is not None else None,
        exit_code=rec.exit_code,
    )


async def run_model(engine: Engine, args: AskArgs, *, record: bool = False) -> Answer:
    """Ask a model as a job and wait for its answer."""
    job_id = start_model_job(engine, args, record=record)
    await wait_job(engine, job_id)
    return answer(engine, job_id)
