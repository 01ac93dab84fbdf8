"""How long each MCP client waits for a tool call, and so when relay's auto mode hands back the job handle.

A call that outlives the client's tool timeout is cancelled by the client (Claude Code, Codex) or
dropped (Gemini): either way the model never learns the job id. relay recognizes the clients it
knows by the `clientInfo.name` they send at `initialize`, knows their default tool timeouts
(read from the pinned CLIs), takes `[clients.NAME] tool_timeout_s` from config.toml over them,
and answers auto-mode calls well before that timeout.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# relay's install names for the clients it knows, by the clientInfo.name each sends.
CLIENT_NAMES: dict[str, str] = {
    "claude-code": "claude-code",
    "codex-mcp-client": "codex",
    "gemini-cli-mcp-client": "gemini",
    "cursor-vscode": "cursor",
    "Visual Studio Code": "vscode",
    "Visual Studio Code - Insiders": "vscode",
}

# Default tool-call timeouts in seconds, as the pinned CLIs ship them:
# Claude Code 2.1.197 waits 1e8 ms unless MCP_TOOL_TIMEOUT or the server's `timeout` says
# otherwise; Codex 0.169 `tool_timeout_sec` defaults to 60 s; Gemini CLI 0.61 MCP_DEFAULT_TIMEOUT_MSEC
# is 10 minutes. Cursor and VS Code are not pinned here: 60 s is the conservative guess.
DEFAULT_TOOL_TIMEOUT_S: dict[str, float] = {
    "claude-code": 100_000.0,
    "codex": 60.0,
    "gemini": 600.0,
    "cursor": 60.0,
    "vscode": 60.0,
}

# The handle goes back this share of the client's timeout early, and never less than
# HANDBACK_MIN_MARGIN_S early: the reply must cross the pipe and the client's own bookkeeping.
HANDBACK_MARGIN = 0.25
HANDBACK_MIN_MARGIN_S = 5.0
# A client whose timeout leaves no room gets the handle at once.
MIN_THRESHOLD_S = 0.0


@dataclass(frozen=True)
class ClientTimeout:
    client: str | None  # relay's name for the client, None when unknown
    tool_timeout_s: float | None  # None: unknown client and nothing configured
    source: str  # "config", "default" or "unknown"


def canonical(client_info_name: str | None) -> str | None:
    """relay's name for a client from its clientInfo.name (None when relay does not know it)."""
    if not client_info_name:
        return None
    return CLIENT_NAMES.get(client_info_name) or CLIENT_NAMES.get(client_info_name.strip())


def client_timeout(client_info_name: str | None, configured: Mapping[str, float]) -> ClientTimeout:
    """The tool timeout relay assumes for this client: config (by relay's name or clientInfo.name), else the default."""
    name = canonical(client_info_name)
    for key in (name, client_info_name):
        if key and key in configured:
            return ClientTimeout(name or client_info_name, configured[key], "config")
    if name is not None:
        return ClientTimeout(name, DEFAULT_TOOL_TIMEOUT_S[name], "default")
    return ClientTimeout(None, None, "unknown")


def auto_threshold(base_s: float, client_info_name: str | None, configured: Mapping[str, float]) -> float:
    """Seconds an auto-mode call waits before handing back the job handle for this client.

    Never more than relay's own `auto_threshold_s`; for a client whose timeout is known, at
    least a quarter of it (and HANDBACK_MIN_MARGIN_S) before that timeout.
    """
    timeout = client_timeout(client_info_name, configured).tool_timeout_s
    if timeout is None:
        return base_s
    margin = max(HANDBACK_MIN_MARGIN_S, timeout * HANDBACK_MARGIN)
    return max(MIN_THRESHOLD_S, min(base_s, timeout - margin))
