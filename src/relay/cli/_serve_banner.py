"""What `relay serve` says when a person starts it on a terminal instead of an MCP client starting it."""

from __future__ import annotations

import os
import shutil
import sys

from relay import __version__


def _command() -> str:
    """How a client should start this relay: its absolute path when `relay` on PATH is another one."""
    me = os.path.realpath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    on_path = shutil.which("relay")
    if not me or (on_path and os.path.realpath(on_path) == me):
        return "relay"
    return me


def stdio_banner() -> str:
    """Lines for stderr: this is an MCP server waiting for a client on stdio, and how to add it to one."""
    cmd = _command()
    return "\n".join(
        [
            f"relay {__version__} is an MCP server: it is now waiting for an MCP client on stdin/stdout",
            "(there is nothing to type here; Ctrl-C quits). An MCP client starts it for you once added:",
            f"  Claude Code:  claude mcp add relay -- {cmd} serve",
            f'  Codex:        add to ~/.codex/config.toml:  [mcp_servers.relay]  command = "{cmd}"  args = ["serve"]',
            f"  Gemini CLI:   gemini mcp add relay {cmd} serve",
            "  Any client over HTTP: relay serve --http   (then http://127.0.0.1:8765/mcp)",
            "For a person at a terminal: relay run AGENT PROMPT, relay ask MODEL PROMPT, relay jobs, relay doctor.",
        ]
    )
