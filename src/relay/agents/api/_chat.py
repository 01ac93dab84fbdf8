"""One model-API call as relay runs it: stream, retry 429/5xx, fall back, translate, cost."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

import anyio

from relay.agents.api._call import ChatCall as ChatCall
from relay.agents.api._call import ChatMessage as ChatMessage
from relay.agents.api._call import Emit, StreamFn
from relay.agents.api._call import ImageData as ImageData
from relay.agents.api._call import StreamOutcome as StreamOutcome
from relay.agents.api._translate import Failure, translate
from relay.agents.api.registry import ModelInfo, ProviderInfo
from relay.errors import ErrorCode, RelayError
from relay.events import MESSAGE_DELTA, RETRY, TURN_COMPLETED, WARNING, AgentResult, Event

log = logging.getLogger("relay.api")

# Attempts per model for 429 and 5xx answers (the first try included).
MAX_ATTEMPTS = 4
# Backoff when the provider sends no retry-after: BASE * 2**attempt seconds.
BACKOFF_BASE_S = 1.0
# Longest relay waits before one retry, whatever retry-after says (a job must not sleep for minutes).
MAX_RETRY_WAIT_S = 30.0

Sleep = Callable[[float], Awaitable[None]]


async def _dispatch(call: ChatCall, emit: Emit) -> StreamOutcome:
    """Call the provider family's stream function (each imports its SDK only when first used)."""
    if call.provider.kind == "anthropic":
        from relay.agents.api import anthropic_provider

        return await anthropic_provider.stream(call, emit)
    from relay.agents.api import openai_provider

    return await openai_provider.stream(call, emit)


class _Tracker:
    """Wraps emit to know whether any answer text reached the caller (then a retry would repeat it)."""

    def __init__(self, emit: Emit) -> None:
        self._emit = emit
        self.streamed = False

    def __call__(self, event: Event) -> None:
        if event.type == MESSAGE_DELTA:
            self.streamed = True
        self._emit(event)


def _wait_for(failure: Failure, attempt: int) -> float:
    wait = failure.retry_after_s if failure.retry_after_s is not None else BACKOFF_BASE_S * (2**attempt)
    return min(wait, MAX_RETRY_WAIT_S)


async def _with_retries(
    call: ChatCall, emit: Emit, secrets: Sequence[str], stream: StreamFn, sleep: Sleep
) -> tuple[StreamOutcome | None, Failure | None, bool]:
    """Run one model with bounded retries; returns (outcome, failure, streamed)."""
    tracker = _Tracker(emit)
    for attempt in range(MAX_ATTEMPTS):
        try:
            return await stream(call, tracker), None, tracker.streamed
        except Exception as exc:
            failure = translate(exc, call.provider, call.model.id, secrets)
            if failure is None:
                raise
            last = attempt == MAX_ATTEMPTS - 1
            if tracker.streamed or not failure.retryable or last:
                log.info("%s: %s", call.model.id, failure.error.code.value)
                return None, failure, tracker.streamed
            wait = _wait_for(failure, attempt)
            log.info("%s: HTTP %s, retry %d in %.1fs", call.model.id, failure.status, attempt + 1, wait)
            emit(
                Event(
                    RETRY,
                    {
                        "attempt": attempt + 1,
                        "status": failure.status,
                        "message": failure.error.message,
                        "wait_s": wait,
                    },
                )
            )
            await sleep(wait)
    raise AssertionError("unreachable")  # pragma: no cover


def _fallback_worthy(failure: Failure) -> bool:
    return failure.error.code in (ErrorCode.RATE_LIMITED, ErrorCode.UPSTREAM_ERROR, ErrorCode.MODEL_NOT_FOUND)


async def run_chat(
    call: ChatCall,
    emit: Emit,
    *,
    fallback: ChatCall | None = None,
    stream: StreamFn = _dispatch,
    sleep: Sleep = anyio.sleep,
) -> AgentResult:
    """Stream one answer; 429/5xx are retried, then the fallback model (if any) is tried once."""
    secrets = [c.api_key for c in (call, fallback) if c is not None]
    outcome, failure, streamed = await _with_retries(call, emit, secrets, stream, sleep)
    used = call
    if failure is not None and fallback is not None and not streamed and _fallback_worthy(failure):
        emit(
            Event(
                WARNING,
                {
                    "message": f"{call.model.id} failed ({failure.error.code.value}); falling back to {fallback.model.id}",
                    "fallback_used": {
                        "from": call.model.id,
                        "to": fallback.model.id,
                        "reason": failure.error.code.value,
                    },
                },
            )
        )
        outcome, failure, streamed = await _with_retries(fallback, emit, secrets, stream, sleep)
        used = fallback
    label = used.model.id if used is call else f"{used.model.id} (fallback from {call.model.id})"
    if failure is not None or outcome is None:
        error = failure.error if failure is not None else RelayError(ErrorCode.INTERNAL, "no answer", "retry")
        return AgentResult(ok=False, model=label, error=error)
    cost = used.model.cost(outcome.usage)
    emit(Event(TURN_COMPLETED, {"usage": outcome.usage.to_dict(), "cost_usd": cost}))
    return AgentResult(ok=True, text=outcome.text, model=label, usage=outcome.usage, cost_usd=cost, num_turns=1)


def with_model(call: ChatCall, model: ModelInfo, provider: ProviderInfo, api_key: str) -> ChatCall:
    """The same request for another model (the fallback)."""
    return replace(call, model=model, provider=provider, api_key=api_key)
