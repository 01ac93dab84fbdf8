"""Agent backends. Each module is pure: it builds an invocation and parses output, it never spawns."""

from __future__ import annotations

from relay.agents.base import Adapter
from relay.agents.claude import ClaudeAdapter
from relay.agents.codex import CodexAdapter
from relay.agents.copilot import CopilotAdapter
from relay.agents.gemini import GeminiAdapter
from relay.config import Settings
from relay.errors import ErrorCode, RelayError

_BUILTIN: dict[str, Adapter] = {
    "claude": ClaudeAdapter(),
    "codex": CodexAdapter(),
    "gemini": GeminiAdapter(),
    "copilot": CopilotAdapter(),
}


def register(adapter: Adapter) -> None:
    """Add a built-in adapter (used by the adapter modules of other CLIs)."""
    _BUILTIN[adapter.name] = adapter


def known_agents(settings: Settings) -> list[str]:
    return sorted(set(_BUILTIN) | {n for n, c in settings.agents.items() if c.args})


def get_adapter(name: str, settings: Settings) -> Adapter:
    """The adapter for an agent name: a built-in one, or a generic CLI declared in config.toml."""
    if name in _BUILTIN:
        return _BUILTIN[name]
    cfg = settings.agents.get(name)
    if cfg is not None and cfg.args:
        from relay.agents.generic import GenericAdapter

        return GenericAdapter(name, cfg)
    import difflib

    near = difflib.get_close_matches(name, known_agents(settings), n=1, cutoff=0.6)
    raise RelayError(
        ErrorCode.AGENT_UNKNOWN,
        f"unknown agent {name!r}" + (f"; did you mean {near[0]!r}?" if near else ""),
        f"use one of: {', '.join(known_agents(settings))}; or declare [agents.{name}] with command and args in config.toml",
    )


__all__ = ["get_adapter", "known_agents", "register"]
