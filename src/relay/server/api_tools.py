"""MCP tools for model APIs: `ask`, `thread_list`, `thread_show`, `list_models`. Thin: validate, call the core."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from relay.errors import RelayError
from relay.jobs.engine import Engine
from relay.server.models import Envelope

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)


class AskEnvelope(Envelope):
    """The job envelope of an ask, plus the thread to continue."""

    continuation_id: str | None = Field(None, description="pass as continuation_id to continue this conversation")
    remaining_turns: int | None = Field(None, description="turns left in the thread")


class TurnInfo(BaseModel):
    seq: int
    role: str
    content: str
    created_at: float
    tool: str
    files: list[str] = []
    images: list[str] = []
    provider: str | None = None
    model: str | None = None
    job_id: str | None = None


class ThreadInfo(BaseModel):
    continuation_id: str
    tool: str
    title: str
    created_at: float
    updated_at: float
    expires_at: float
    turn_count: int
    remaining_turns: int
    total_cost_usd: float
    turns: list[TurnInfo] = []


class ThreadList(BaseModel):
    threads: list[ThreadInfo]


class ModelInfoOut(BaseModel):
    id: str = Field(description="pass as model (provider:model); aliases work too")
    provider: str
    model: str
    aliases: list[str]
    context_window: int
    max_output: int
    input_per_mtok: float | None = Field(None, description="USD per million input tokens")
    output_per_mtok: float | None = Field(None, description="USD per million output tokens")
    cached_per_mtok: float | None = None
    reasoning: bool = Field(description="accepts thinking_mode")
    key_source: str | None = Field(None, description="where the key comes from (a variable name, never the key)")


class ProviderOut(BaseModel):
    name: str
    base_url: str
    local: bool
    key_env: list[str]
    key_source: str | None
    reachable: bool
    fallback_model: str | None = None


class ModelList(BaseModel):
    models: list[ModelInfoOut] = Field(description="models that can be asked now")
    providers: list[ProviderOut] = Field(description="every provider; set one of key_env to enable it")


def _result(model: BaseModel, is_error: bool = False) -> CallToolResult:
    data = model.model_dump(mode="json")
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(data))], structured_content=data, is_error=is_error
    )


def _with_thread(result: CallToolResult, env: dict[str, Any]) -> CallToolResult:
    """The lead's envelope result with the thread fields added (same isError)."""
    data = dict(result.structured_content or {})
    data["continuation_id"] = env.get("continuation_id")
    data["remaining_turns"] = env.get("remaining_turns")
    data = AskEnvelope.model_validate(data).model_dump(mode="json")
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(data))],
        structured_content=data,
        is_error=result.is_error,
    )


def register(
    server: MCPServer[Any],
    engine_getter: Callable[[], Engine],
    envelope_fn: Callable[[dict[str, Any]], CallToolResult],
) -> None:
    """Add the model-API tools to relay's MCP server."""
    from relay.server.app import error_result, run_guarded, run_job

    @server.tool(
        description=(
            "Ask a model API (Anthropic, OpenAI, Gemini, xAI Grok, Mistral, OpenRouter, ollama...) for an answer or a "
            "second opinion. Text only: it cannot read or edit files itself; pass files to show it code. "
            "Returns continuation_id: pass it back to continue the conversation, with this or any other model. "
            "mode: auto (default) waits up to ~45 s then returns a job_id for job_wait; sync waits; async returns at once."
        )
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
            engine = engine_getter()
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
            await run_job(engine, lambda: job_id, mode, ctx)
            env = ask_envelope(engine, job_id)
            return _with_thread(envelope_fn(env), env)

        return await run_guarded(go)

    @server.tool(description="List conversation threads (continuation ids), most recent first.", annotations=READ_ONLY)
    async def thread_list(
        limit: Annotated[int, Field(ge=1, le=500, description="how many")] = 20,
    ) -> Annotated[CallToolResult, ThreadList]:
        from relay.threads import Threads

        async def go() -> CallToolResult:
            threads = Threads.open(engine_getter().settings)
            try:
                items = [
                    ThreadInfo.model_validate(t.to_dict(threads.config.max_turns, with_turns=False))
                    for t in threads.list(limit=limit)
                ]
            finally:
                threads.close()
            return _result(ThreadList(threads=items))

        return await run_guarded(go)

    @server.tool(description="Show one conversation thread with all its turns.", annotations=READ_ONLY)
    async def thread_show(
        continuation_id: Annotated[str, Field(description="the thread's continuation_id")],
    ) -> Annotated[CallToolResult, ThreadInfo]:
        from relay.threads import Threads

        async def go() -> CallToolResult:
            threads = Threads.open(engine_getter().settings)
            try:
                thread = threads.get(continuation_id)
                info = ThreadInfo.model_validate(thread.to_dict(threads.config.max_turns))
            finally:
                threads.close()
            return _result(info)

        return await run_guarded(go)

    @server.tool(
        description="Models that ask can use now (a key is set), with aliases, context windows and prices; "
        "and every provider with the variables that enable it.",
        annotations=READ_ONLY,
    )
    async def list_models() -> Annotated[CallToolResult, ModelList]:
        from relay import ask as core

        async def go() -> CallToolResult:
            settings = engine_getter().settings
            try:
                models = [ModelInfoOut.model_validate(m) for m in core.list_models(settings)]
                providers = [ProviderOut.model_validate(p) for p in core.list_providers(settings)]
            except RelayError as err:
                return error_result(err)
            return _result(ModelList(models=models, providers=providers))

        return await run_guarded(go)
