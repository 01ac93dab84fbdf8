"""OpenAI Chat Completions through the official SDK (`openai.AsyncOpenAI`), streamed.

Serves OpenAI itself and every compatible endpoint: xAI, Mistral, Gemini, OpenRouter, local
servers (ollama, vLLM, LM Studio) and any base_url from config. The SDK is imported lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import anyio

from relay.agents.api._call import CLOSE_GRACE_S, ChatCall, ChatMessage, Emit, StreamOutcome
from relay.agents.api.registry import THINKING_MODES
from relay.events import MESSAGE_DELTA, REASONING, WARNING, Event, Usage

if TYPE_CHECKING:
    from openai import AsyncStream
    from openai.types.chat import ChatCompletionChunk


def effort_for(thinking_mode: str, efforts: tuple[str, ...]) -> str | None:
    """The provider's reasoning level nearest to a thinking_mode (minimal/low/medium/high/max)."""
    if not efforts or thinking_mode not in THINKING_MODES:
        return None
    if thinking_mode in efforts:
        return thinking_mode
    want = THINKING_MODES.index(thinking_mode)
    ranked = [e for e in efforts if e in THINKING_MODES]
    if not ranked:
        return None
    return min(ranked, key=lambda e: (abs(THINKING_MODES.index(e) - want), -THINKING_MODES.index(e)))


def _content(message: ChatMessage) -> str | list[dict[str, Any]]:
    if not message.images or message.role != "user":
        return message.text
    parts: list[dict[str, Any]] = [
        {"type": "image_url", "image_url": {"url": f"data:{img.media_type};base64,{img.data_b64}"}}
        for img in message.images
    ]
    parts.append({"type": "text", "text": message.text})
    return parts


def build_params(call: ChatCall, emit: Emit) -> dict[str, Any]:
    """The `chat.completions.create` arguments for a call (pure apart from warnings)."""
    messages: list[dict[str, Any]] = []
    if call.system:
        messages.append({"role": "system", "content": call.system})
    messages += [{"role": m.role, "content": _content(m)} for m in call.messages]
    params: dict[str, Any] = {"model": call.model.name, "messages": messages, "stream": True}
    if call.provider.stream_usage:
        params["stream_options"] = {"include_usage": True}
    if call.temperature is not None:
        if call.model.temperature:
            params["temperature"] = call.temperature
        else:
            emit(Event(WARNING, {"message": f"{call.model.id} does not take a temperature; ignored"}))
    if call.thinking_mode and call.model.reasoning:
        effort = effort_for(call.thinking_mode, call.provider.efforts)
        if effort is not None:
            params["reasoning_effort"] = effort
    if call.max_output_tokens:
        params["max_completion_tokens"] = call.max_output_tokens
    return params


async def stream(call: ChatCall, emit: Emit) -> StreamOutcome:
    """Stream one answer, emitting `message.delta` events; usage comes from the final chunk."""
    import openai

    client = openai.AsyncOpenAI(
        api_key=call.api_key, base_url=call.provider.base_url, max_retries=0, timeout=call.timeout_s
    )
    params = build_params(call, emit)
    parts: list[str] = []
    thinking: list[str] = []
    usage = Usage()
    response: AsyncStream[ChatCompletionChunk] | None = None
    try:
        response = cast("AsyncStream[ChatCompletionChunk]", await client.chat.completions.create(**params))
        async for chunk in response:
            if chunk.usage is not None:
                details = chunk.usage.prompt_tokens_details
                cached = (details.cached_tokens or 0) if details is not None else 0
                usage = Usage(chunk.usage.prompt_tokens - cached, chunk.usage.completion_tokens, cached)
            for choice in chunk.choices:
                if choice.index != 0:
                    continue
                delta = choice.delta
                # Not in the schema: xAI and OpenRouter models stream their reasoning in these fields.
                extra: dict[str, Any] = delta.model_extra or {}
                reasoning = extra.get("reasoning_content") or extra.get("reasoning")
                if isinstance(reasoning, str) and reasoning:
                    thinking.append(reasoning)
                    emit(Event(REASONING, {"text": reasoning}))
                if delta.content:
                    parts.append(delta.content)
                    emit(Event(MESSAGE_DELTA, {"text": delta.content}))
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_GRACE_S):
            if response is not None:
                await response.close()
            await client.close()
    return StreamOutcome("".join(parts), usage, "".join(thinking))
