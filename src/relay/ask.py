"""`ask`: one question to a model API as a durable job, optionally continuing a thread.

The MCP tool and the CLI both call `submit_ask`; everything that can be wrong with the
arguments, the model or the key is raised as a RelayError before a job exists.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from relay.agents.api import _content as content
from relay.agents.api._chat import ChatCall, ChatMessage, ImageData, run_chat
from relay.agents.api.anthropic_provider import THINKING_BUDGETS
from relay.agents.api.keys import KEYS_FILE, find_key, require_key
from relay.agents.api.registry import THINKING_MODES, ModelInfo, Registry, load_registry, read_config_table
from relay.config import Settings
from relay.errors import ErrorCode, RelayError, invalid
from relay.events import WARNING, AgentResult, Event
from relay.jobs.engine import Engine
from relay.threads import NewTurn, Thread, ThreadStore, new_thread_id, open_threads, select_history

# Output room kept free in the context window when the caller sets no max_output_tokens.
DEFAULT_OUTPUT_RESERVE = 8192
# Share of the remaining context the files named in this request may fill; history gets the rest.
CURRENT_FILES_SHARE = 0.7
# Token estimate for one image (vendors charge roughly 1-2k tokens per typical image).
IMAGE_TOKENS = 1600
# Kept free for message framing and estimate error (bytes/4 is rough for code).
SAFETY_MARGIN = 0.05
MAX_TEMPERATURE = 2.0
MAX_TIMEOUT_S = 7 * 86400


@dataclass(frozen=True)
class AskArgs:
    """What the caller asked; validated by `prepare_ask`."""

    prompt: str
    model: str | None = None
    system_prompt: str | None = None
    continuation_id: str | None = None
    files: tuple[str, ...] = ()
    images: tuple[str, ...] = ()
    temperature: float | None = None
    thinking_mode: str | None = None
    timeout_s: float | None = None
    max_output_tokens: int | None = None
    tool: str = "ask"


@dataclass(frozen=True)
class PreparedAsk:
    """A validated ask: the provider call (and fallback), the thread, and the job's stored request."""

    call: ChatCall
    fallback: ChatCall | None
    thread_id: str
    thread: Thread | None
    files: tuple[str, ...]
    images: tuple[str, ...]
    request: dict[str, Any]
    warnings: tuple[str, ...] = ()


def _default_model(settings: Settings, registry: Registry, thread: Thread | None) -> str:
    if thread is not None and thread.last_model:
        return thread.last_model
    configured = settings.environ.get("RELAY_ASK_MODEL") or read_config_table(settings, "api").get("default_model")
    if isinstance(configured, str) and configured:
        return configured
    for model in registry.models.values():
        provider = registry.providers[model.provider]
        if provider.local or find_key(provider, settings) is not None:
            return model.id
    names = sorted({n for p in registry.providers.values() for n in p.key_env})
    raise RelayError(
        ErrorCode.AUTH_MISSING,
        "no model API key is set, so there is no model to ask",
        f"set one of {', '.join(names)} (or add it to {settings.home / KEYS_FILE}), or pass model='ollama:MODEL'",
    )


def _validate(args: AskArgs) -> None:
    if not args.prompt.strip():
        raise invalid("prompt is empty", "pass the question as prompt")
    if args.temperature is not None and not (0.0 <= args.temperature <= MAX_TEMPERATURE):
        raise invalid(f"temperature {args.temperature} is outside 0..2", "use 0 (focused) to 1 (creative)")
    if args.thinking_mode is not None and args.thinking_mode not in THINKING_MODES:
        raise invalid(f"thinking_mode {args.thinking_mode!r} is unknown", f"use one of {', '.join(THINKING_MODES)}")
    if args.timeout_s is not None and not (0 < args.timeout_s <= MAX_TIMEOUT_S):
        raise invalid("timeout_s must be between 0 and 604800 seconds", "omit timeout_s for the default")
    if args.max_output_tokens is not None and args.max_output_tokens < 1:
        raise invalid("max_output_tokens must be positive", "omit it for the model's default")


def _output_reserve(model: ModelInfo, args: AskArgs) -> int:
    thinking = THINKING_BUDGETS.get(args.thinking_mode or "", 0) if model.reasoning else 0
    return min(model.max_output, (args.max_output_tokens or DEFAULT_OUTPUT_RESERVE) + thinking)


def _messages(
    model: ModelInfo,
    args: AskArgs,
    thread: Thread | None,
    files: tuple[str, ...],
    images: tuple[ImageData, ...],
) -> tuple[tuple[ChatMessage, ...], list[str]]:
    """History that fits (newest first), earlier files once, this request's files, then the prompt."""
    est = content.estimate_tokens
    fixed = est(args.prompt) + est(args.system_prompt or "") + IMAGE_TOKENS * len(images)
    window = int(model.context_window * (1 - SAFETY_MARGIN))
    available = window - _output_reserve(model, args) - fixed
    if available < 0:
        raise invalid(
            f"the prompt is larger than {model.id}'s context window ({model.context_window} tokens)",
            "shorten the prompt or pass large text as files",
        )
    warnings: list[str] = []
    current = content.inline_files(files, int(available * CURRENT_FILES_SHARE)) if files else None
    available -= current.tokens if current else 0
    history_turns = thread.turns if thread else ()
    history = select_history(history_turns, available, est, exclude_files=current.included if current else files)
    available -= history.tokens
    earlier = content.inline_files(history.files, available) if history.files else None
    if current and current.omitted:
        warnings.append(f"files left out (binary, unreadable or over the budget): {', '.join(current.omitted)}")
    if history.omitted_turns:
        warnings.append(f"{history.omitted_turns} older turns left out to fit {model.id}'s context window")
    sections: list[str] = []
    if history.omitted_turns:
        sections.append(
            f"[{history.omitted_turns} earlier turns of this conversation were left out to fit the context window]"
        )
    if earlier and earlier.included:
        sections.append("Files referenced earlier in this conversation (current contents):\n\n" + earlier.text)
    if current:
        sections.append("Files:\n\n" + current.text)
    sections.append(args.prompt)
    messages = [ChatMessage("user" if t.role == "user" else "assistant", t.content) for t in history.turns]
    messages.append(ChatMessage("user", "\n\n".join(sections), images))
    return tuple(messages), warnings


def prepare_ask(
    settings: Settings, args: AskArgs, threads: ThreadStore, registry: Registry | None = None
) -> PreparedAsk:
    """Validate an ask and resolve model, key, thread and messages; raises RelayError, creates nothing."""
    _validate(args)
    registry = registry or load_registry(settings)
    thread = threads.get(args.continuation_id) if args.continuation_id else None
    threads.check_room(thread, 2)
    model = registry.resolve(args.model or _default_model(settings, registry, thread))
    provider = registry.provider(model.provider)
    if args.temperature is not None and args.temperature > 1.0 and provider.kind == "anthropic":
        raise invalid(f"temperature {args.temperature} is above 1, the limit for {model.id}", "use 0..1")
    key = require_key(provider, settings)
    files = tuple(content.check_paths(args.files, "files", settings.allowed_roots))
    image_specs = tuple(args.images)
    loaded = tuple(content.load_image(spec) for spec in image_specs)
    messages, warnings = _messages(model, args, thread, files, loaded)
    timeout = args.timeout_s or settings.job_timeout_s
    call = ChatCall(
        model=model,
        provider=provider,
        api_key=key,
        messages=messages,
        system=args.system_prompt,
        temperature=args.temperature,
        thinking_mode=args.thinking_mode,
        max_output_tokens=args.max_output_tokens,
        timeout_s=min(timeout, 600.0),
    )
    fallback: ChatCall | None = None
    if provider.fallback_model:
        try:
            fb_model = registry.resolve(provider.fallback_model)
            fb_provider = registry.provider(fb_model.provider)
            fb_key = require_key(fb_provider, settings)
        except RelayError as err:
            warnings.append(f"fallback {provider.fallback_model} unavailable: {err.message}")
        else:
            if fb_model.id != model.id:
                fallback = replace(call, model=fb_model, provider=fb_provider, api_key=fb_key)
    thread_id = thread.id if thread else new_thread_id()
    described = tuple(content.describe_image(s) for s in image_specs)
    request: dict[str, Any] = {
        "kind": "ask",
        "tool": args.tool,
        "prompt": args.prompt,
        "model": model.id,
        "continuation_id": thread_id,
        "files": list(files),
        "images": list(described),
        "system_prompt": args.system_prompt,
        "temperature": args.temperature,
        "thinking_mode": args.thinking_mode,
        "timeout_s": timeout,
        "fallback_model": fallback.model.id if fallback else None,
    }
    return PreparedAsk(call, fallback, thread_id, thread, files, described, request, tuple(warnings))


def _record(
    threads: ThreadStore, prepared: PreparedAsk, args: AskArgs, result: AgentResult, job_id: str | None
) -> None:
    model_id = (result.model or prepared.call.model.id).split(" ")[0]
    provider = model_id.partition(":")[0]
    turns = [
        NewTurn("user", args.prompt, files=prepared.files, images=prepared.images, job_id=job_id),
        NewTurn(
            "assistant",
            result.text,
            provider=provider,
            model=model_id,
            job_id=job_id,
            metadata={"usage": result.usage.to_dict(), "cost_usd": result.cost_usd},
        ),
    ]
    threads.add_turns(prepared.thread_id, turns, tool=args.tool, title=args.prompt, cost_usd=result.cost_usd or 0.0)


def make_task(
    prepared: PreparedAsk, args: AskArgs, threads: ThreadStore, job_id: Callable[[], str | None]
) -> Callable[[Callable[[Event], None]], Any]:
    """The in-process job: stream the answer, then record the exchange in the thread."""

    async def task(emit: Callable[[Event], None]) -> AgentResult:
        try:
            for message in prepared.warnings:
                emit(Event(WARNING, {"message": message}))
            result = await run_chat(prepared.call, emit, fallback=prepared.fallback)
            if result.ok:
                try:
                    _record(threads, prepared, args, result, job_id())
                except RelayError as err:
                    emit(Event(WARNING, {"message": f"the answer was not added to the thread: {err.message}"}))
            return result
        finally:
            threads.close()

    return task


async def submit_ask(engine: Engine, args: AskArgs) -> str:
    """Validate, resolve model and key, and start the ask as a job; returns the job id."""
    threads = open_threads(engine.settings)
    try:
        prepared = prepare_ask(engine.settings, args, threads)
    except BaseException:
        threads.close()
        raise
    ids: list[str] = []
    task = make_task(prepared, args, threads, lambda: ids[0] if ids else None)
    try:
        job_id = engine.submit_task(
            prepared.call.provider.name,
            prepared.request,
            task,
            model=prepared.call.model.id,
            timeout_s=args.timeout_s,
        )
    except BaseException:
        threads.close()
        raise
    ids.append(job_id)
    return job_id


def ask_envelope(engine: Engine, job_id: str) -> dict[str, Any]:
    """The job envelope plus the thread to continue (`continuation_id`, `remaining_turns`) once it exists."""
    env = engine.envelope(job_id)
    rec = engine.get(job_id)
    thread_id = rec.request.get("continuation_id")
    env["continuation_id"] = None
    env["remaining_turns"] = None
    if isinstance(thread_id, str):
        threads = open_threads(engine.settings)
        try:
            thread = threads.find(thread_id)
            if thread is not None:
                env["continuation_id"] = thread.id
                env["remaining_turns"] = thread.remaining_turns(threads.config.max_turns)
        finally:
            threads.close()
    return env


def list_providers(settings: Settings, registry: Registry | None = None) -> list[dict[str, Any]]:
    """Every provider: whether it can be called now, and which variables hold its key (never the key)."""
    registry = registry or load_registry(settings)
    out: list[dict[str, Any]] = []
    for provider in registry.providers.values():
        found = find_key(provider, settings)
        out.append(
            {
                "name": provider.name,
                "base_url": provider.base_url,
                "local": provider.local,
                "key_env": list(provider.key_env),
                "key_source": found.where if found else None,
                "reachable": provider.local or found is not None,
                "fallback_model": provider.fallback_model,
            }
        )
    return out


def list_models(settings: Settings) -> list[dict[str, Any]]:
    """Models that can be asked now (key present, or a local server), with aliases, context and prices."""
    registry = load_registry(settings)
    reachable = {p["name"]: p for p in list_providers(settings, registry) if p["reachable"]}
    out: list[dict[str, Any]] = []
    for model in registry.models.values():
        provider = reachable.get(model.provider)
        if provider is None:
            continue
        out.append(
            {
                "id": model.id,
                "provider": model.provider,
                "model": model.name,
                "aliases": list(model.aliases),
                "context_window": model.context_window,
                "max_output": model.max_output,
                "input_per_mtok": model.input_price,
                "output_per_mtok": model.output_price,
                "cached_per_mtok": model.cached_price,
                "reasoning": model.reasoning,
                "key_source": provider["key_source"] or ("local" if provider["local"] else None),
            }
        )
    return out
