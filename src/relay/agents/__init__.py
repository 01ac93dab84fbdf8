"""Agent backends. Each module is pure: it builds an invocation and parses output, it never spawns."""

from __future__ import annotations

from relay.agents.base import Adapter
from relay.agents.claude import ClaudeAdapter
from relay.agents.codex import CodexAdapter
from relay.agents.copilot import CopilotAdapter
from relay.agents.gemini import GeminiAdapter
from relay.config import AgentConfig, Settings
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
    declared = {n for n, c in settings.agents.items() if c.args or (c.protocol == "acp" and c.acp_command)}
    return sorted(set(_BUILTIN) | declared)


def get_adapter(name: str, settings: Settings) -> Adapter:
    """The adapter for an agent name: over ACP when config.toml says `protocol = "acp"` and it has an ACP
    adapter (else print mode), a built-in one, or a generic CLI declared in config.toml."""
    cfg = settings.agents.get(name)
    if cfg is not None and cfg.protocol == "acp":
        from relay.agents.acp import acp_adapter

        over_acp = acp_adapter(name, cfg)
        if over_acp is not None:
            return over_acp
    if name in _BUILTIN:
        return _BUILTIN[name]
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


def protocol_of(adapter: Adapter) -> str:
    """ "acp" for an adapter that drives its agent over the Agent Client Protocol, else "print"."""
    return str(getattr(adapter, "protocol", "print"))


def launch_command(adapter: Adapter, cfg: AgentConfig) -> str:
    """The command a job of this agent needs on PATH: the ACP adapter's (already from config), else `command`."""
    if protocol_of(adapter) == "acp":
        return adapter.executable
    return cfg.command or adapter.executable


__all__ = ["get_adapter", "known_agents", "launch_command", "protocol_of", "register"]
