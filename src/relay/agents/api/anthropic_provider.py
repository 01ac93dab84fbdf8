"""Anthropic Messages API through the official SDK (`anthropic.AsyncAnthropic`), streamed.

The SDK is imported inside `stream` so that importing relay stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import anyio

from relay.agents.api._call import CLOSE_GRACE_S, ChatCall, ChatMessage, Emit, StreamOutcome
from relay.events import MESSAGE_DELTA, REASONING, WARNING, Event, Usage

if TYPE_CHECKING:
    from anthropic import AsyncStream
    from anthropic.types import RawMessageStreamEvent

# thinking_mode → extended-thinking budget (the API's minimum is 1024).
THINKING_BUDGETS = {"minimal": 1024, "low": 4096, "medium": 8192, "high": 16384, "max": 32768}
# Room for the visible answer on top of the thinking budget, when the caller sets no limit.
DEFAULT_ANSWER_TOKENS = 8192


def _content(message: ChatMessage) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [
        {"type": "image", "source": {"type": "base64", "media_type": img.media_type, "data": img.data_b64}}
        for img in message.images
    ]
    blocks.append({"type": "text", "text": message.text})
    return blocks


def build_params(call: ChatCall, emit: Emit) -> dict[str, Any]:
    """The `messages.create` arguments for a call (pure apart from warnings)."""
    budget = THINKING_BUDGETS.get(call.thinking_mode or "") if call.model.reasoning else None
    answer = call.max_output_tokens or DEFAULT_ANSWER_TOKENS
    max_tokens = min(call.model.max_output, answer + (budget or 0))
    params: dict[str, Any] = {
        "model": call.model.name,
        "max_tokens": max_tokens,
        "messages": [{"role": m.role, "content": _content(m)} for m in call.messages],
        "stream": True,
    }
    if call.system:
        params["system"] = call.system
    if budget is not None and budget < max_tokens:
        params["thinking"] = {"type": "enabled", "budget_tokens": budget}
    extra: dict[str, Any] = {}
    if call.temperature is not None:
        if "thinking" in params:
            emit(Event(WARNING, {"message": "temperature is ignored with thinking_mode on Anthropic models"}))
        else:
            # This SDK version has no temperature argument; the API still accepts the field.
            extra["temperature"] = call.temperature
    if extra:
        params["extra_body"] = extra
    return params


async def stream(call: ChatCall, emit: Emit) -> StreamOutcome:
    """Stream one answer, emitting `message.delta` (and `reasoning`) events as text arrives."""
    import anthropic

    client = anthropic.AsyncAnthropic(
        api_key=call.api_key, base_url=call.provider.base_url, max_retries=0, timeout=call.timeout_s
    )
    params = build_params(call, emit)
    parts: list[str] = []
    thinking: list[str] = []
    input_tokens = output_tokens = cached = 0
    response: AsyncStream[RawMessageStreamEvent] | None = None
    try:
        response = cast("AsyncStream[RawMessageStreamEvent]", await client.messages.create(**params))
        async for event in response:
            if event.type == "message_start":
                usage = event.message.usage
                input_tokens = usage.input_tokens + (usage.cache_creation_input_tokens or 0)
                cached = usage.cache_read_input_tokens or 0
                output_tokens = usage.output_tokens
            elif event.type == "content_block_delta":
                delta = event.delta
                if delta.type == "text_delta":
                    parts.append(delta.text)
                    emit(Event(MESSAGE_DELTA, {"text": delta.text}))
                elif delta.type == "thinking_delta":
                    thinking.append(delta.thinking)
                    emit(Event(REASONING, {"text": delta.thinking}))
            elif event.type == "message_delta":
                usage_delta = event.usage
                output_tokens = usage_delta.output_tokens
                if usage_delta.input_tokens is not None:
                    input_tokens = usage_delta.input_tokens + (usage_delta.cache_creation_input_tokens or 0)
                if usage_delta.cache_read_input_tokens is not None:
                    cached = usage_delta.cache_read_input_tokens
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_GRACE_S):
            if response is not None:
                await response.close()
            await client.close()
    return StreamOutcome("".join(parts), Usage(input_tokens, output_tokens, cached), "".join(thinking))
