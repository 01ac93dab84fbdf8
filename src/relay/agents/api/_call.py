"""One provider request and what its stream returns: the values `_chat` and every provider share.

This module sits one floor below `_chat` and the provider modules (`anthropic_provider`,
`openai_provider`), which all import it; it imports none of them, so dependencies point down.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from relay.agents.api.registry import ModelInfo, ProviderInfo
from relay.events import Event, Usage

# Per-request SDK timeout (connect, and between streamed chunks); the job's own timeout bounds the whole.
REQUEST_TIMEOUT_S = 600.0
# Longest we wait to close a connection after a cancel, so the server sees it go away.
CLOSE_GRACE_S = 2.0

Emit = Callable[[Event], None]


@dataclass(frozen=True)
class ImageData:
    """An image to show the model, already base64-encoded."""

    media_type: str
    data_b64: str


@dataclass(frozen=True)
class ChatMessage:
    role: Literal["user", "assistant"]
    text: str
    images: tuple[ImageData, ...] = ()


@dataclass(frozen=True)
class ChatCall:
    """Everything one provider request needs (the key travels here and nowhere else)."""

    model: ModelInfo
    provider: ProviderInfo
    api_key: str = field(repr=False)
    messages: tuple[ChatMessage, ...]
    system: str | None = None
    temperature: float | None = None
    thinking_mode: str | None = None
    max_output_tokens: int | None = None
    timeout_s: float = REQUEST_TIMEOUT_S


@dataclass(frozen=True)
class StreamOutcome:
    """What a provider's stream produced."""

    text: str
    usage: Usage
    reasoning: str = ""


StreamFn = Callable[[ChatCall, Emit], Awaitable[StreamOutcome]]
