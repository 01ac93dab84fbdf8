"""PAL's two utility tools, listmodels and version: what relay can ask and what it is, as Zen's ToolOutput.

Neither calls a model. listmodels reads relay's model registry (the same one `ask` and `list_models`
use), so the providers it calls configured are exactly those a zen tool can reach.
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from typing import Any

from relay import __version__
from relay.ask import list_models, list_providers
from relay.config import Settings
from relay.workflows.steps import Reply

# The markdown headings and tips of PAL's listmodels and version, in one place.
TEXTS = {
    "models_title": "# Available AI Models",
    "configured": "**Status**: Configured and available",
    "not_configured": "**Status**: Not configured (set {env})",
    "local": "**Status**: Local server at {url}",
    "tips": (
        "\n**Usage Tips**:\n"
        "- Use model aliases (e.g., 'flash', 'sonnet', 'grok') for convenience\n"
        "- Leave model out (or pass 'auto') and the tool picks one for its task\n"
        "- Every provider whose key is set (environment or api_keys.json) is available"
    ),
    "any_model": "- any model the server has: pass `<provider>:<model>`",
    "version_title": "# Zen/PAL MCP Server Version (relay)",
}


def _tool_output(content: str, content_type: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """PAL's ToolOutput, every field of it: neither tool offers a continuation, so `continuation_offer` is null."""
    return {
        "status": "success",
        "content": content,
        "content_type": content_type,
        "metadata": metadata,
        "continuation_offer": None,
    }


def _context(tokens: int) -> str:
    if tokens >= 1_000_000:
        return f"{tokens // 1_000_000}M context"
    if tokens >= 1_000:
        return f"{tokens // 1_000}K context"
    return f"{tokens} context" if tokens > 0 else "unknown context"


def listmodels(settings: Settings) -> Reply:
    """PAL's listmodels: every provider (configured or not, and how to configure it) with its models and aliases."""
    providers = list_providers(settings)
    models = list_models(settings)
    lines = [TEXTS["models_title"], ""]
    for provider in providers:
        ready = bool(provider["reachable"])
        lines.append(f"## {provider['name']} {'✅' if ready else '❌'}")
        if not ready:
            env = " or ".join(provider["key_env"]) or "its key"
            lines += [TEXTS["not_configured"].format(env=env), ""]
            continue
        local = TEXTS["local"].format(url=provider["base_url"]) if provider["local"] else None
        lines += [local or TEXTS["configured"], "", "**Models**:"]
        own = [m for m in models if m["provider"] == provider["name"]]
        any_model = TEXTS["any_model"].replace("<provider>", str(provider["name"]))
        lines += [f"- `{m['id']}` - {_context(int(m['context_window']))}" for m in own] or [any_model]
        aliases = sorted(f"- `{a}` → `{m['id']}`" for m in own for a in m["aliases"])
        if aliases:
            lines += ["", "**Aliases**:", *aliases]
        lines.append("")
    configured = sum(1 for p in providers if p["reachable"])
    lines += [
        "## Summary",
        f"**Configured Providers**: {configured}",
        f"**Total Available Models**: {len(models)}",
        TEXTS["tips"],
    ]
    metadata = {"tool_name": "listmodels", "configured_providers": configured}
    return Reply(_tool_output("\n".join(lines), "text", metadata))


def version(settings: Settings, tools: Sequence[str]) -> Reply:
    """PAL's version: the server's version, its platform, its configured providers and its tools."""
    providers = [p["name"] for p in list_providers(settings) if p["reachable"]]
    lines = [
        TEXTS["version_title"],
        "",
        "## Server Information",
        f"**Current Version**: {__version__}",
        f"**Python**: {platform.python_version()} on {platform.system()}",
        f"**Data Directory**: {settings.home}",
        "",
        "## Configuration",
        f"**Configured Providers**: {', '.join(providers) or 'none'}",
        f"**Available Tools**: {len(tools)}",
        *[f"- {name}" for name in tools],
    ]
    metadata: dict[str, Any] = {
        "tool_name": "version",
        "server_version": __version__,
        "configured_providers": len(providers),
        "available_tools": list(tools),
    }
    return Reply(_tool_output("\n".join(lines), "markdown", metadata))
