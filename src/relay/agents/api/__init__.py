"""Model APIs (Anthropic, OpenAI and OpenAI-compatible endpoints) behind one streamed chat call.

Nothing here imports a vendor SDK at import time; each provider module imports its SDK when
it first makes a call.
"""

from __future__ import annotations

from relay.agents.api._call import ChatCall, ChatMessage, ImageData, StreamOutcome
from relay.agents.api._chat import run_chat
from relay.agents.api.keys import find_key, redact, require_key
from relay.agents.api.registry import ModelInfo, ProviderInfo, Registry, load_registry

__all__ = [
    "ChatCall",
    "ChatMessage",
    "ImageData",
    "ModelInfo",
    "ProviderInfo",
    "Registry",
    "StreamOutcome",
    "find_key",
    "load_registry",
    "redact",
    "require_key",
    "run_chat",
]
