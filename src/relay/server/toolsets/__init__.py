"""relay's toolsets (named groups of MCP tools, one module each) and the compat profiles built from them.

A toolset module defines `TOOLSET = Toolset(name, description, build)`. A profile exposes exactly one
seed system's tool list: the (toolset, tools) pairs below. Modules load only when a toolset is used.
"""

from __future__ import annotations

import importlib

from relay.errors import ErrorCode, RelayError
from relay.server.toolsets._registry import (
    READ_ONLY,
    Deps,
    RegisteredTool,
    Router,
    ToolRegistry,
    Toolset,
    closest,
)

__all__ = [
    "BUILTIN",
    "DEFAULT_EXPOSURE",
    "PROFILES",
    "READ_ONLY",
    "Deps",
    "Exposure",
    "RegisteredTool",
    "Router",
    "ToolRegistry",
    "Toolset",
    "load_toolset",
    "resolve_exposure",
]

# Toolset name -> the module that defines its TOOLSET.
BUILTIN: dict[str, str] = {
    "core": "relay.server.toolsets.core",
    "gateway": "relay.server.toolsets.gateway",
    "surreal": "relay.server.toolsets.surreal",
    "call-cc": "relay.server.toolsets.call_cc",
    "claude-code-mcp": "relay.server.toolsets.claude_code_mcp",
    "gemini-mcp": "relay.server.toolsets.gemini_mcp",
    "codex-mcp": "relay.server.toolsets.codex_mcp",
    "powerspawn": "relay.server.toolsets.powerspawn",
    "tasks": "relay.server.toolsets.tasks",
    "zen": "relay.server.toolsets.zen",
    "gobby": "relay.server.toolsets.gobby",
    "workspaces": "relay.server.toolsets.workspaces",
}

Exposure = tuple[tuple[str, frozenset[str] | None], ...]
"""What tools/list shows: (toolset, the subset of its tools, or None for all) pairs."""

# The discovery tools that reach every toolset and downstream server from the default exposure.
DISCOVERY = frozenset({"list_tools", "get_tool_schema", "call_tool"})

DEFAULT_EXPOSURE: Exposure = (("core", None), ("gateway", DISCOVERY))

# Profile name -> exactly the tools of one seed system.
PROFILES: dict[str, Exposure] = {
    "surreal": (("surreal", None),),
    "call-cc": (("call-cc", None),),
    "claude-code-mcp": (("claude-code-mcp", None),),
    "gemini-mcp": (("gemini-mcp", None),),
    "codex-mcp": (("codex-mcp", None),),
    "powerspawn": (("powerspawn", None),),
    "zen": (("zen", None),),
    "gobby": (
        ("core", frozenset({"status"})),
        (
            "gateway",
            frozenset(
                {
                    "list_mcp_servers",
                    "call_tool",
                    "list_tools",
                    "get_tool_schema",
                    "read_mcp_resource",
                    "add_mcp_server",
                    "remove_mcp_server",
                    "import_mcp_server",
                    "recommend_tools",
                }
            ),
        ),
        ("gobby", None),
    ),
}


# Profiles whose seed runs its agents with every approval and sandbox off: serving one (`relay serve
# --profile NAME`, or naming it in --toolsets) is the person's grant of `full` to that profile's own
# tools (relay.jobs.grants). Reached through call_tool, the calling model chose it: the grant applies.
FULL_ACCESS_PROFILES = ("claude-code-mcp", "powerspawn", "surreal")


def _chosen_full_access(profile: str | None, toolsets: tuple[str, ...]) -> list[str]:
    return [name for name in FULL_ACCESS_PROFILES if name == profile or name in toolsets]


def profile_grants(profile: str | None, toolsets: tuple[str, ...] = ()) -> dict[str, str]:
    """Toolset -> the permission a chosen full-access profile grants its own jobs."""
    return {name: "full" for name in _chosen_full_access(profile, toolsets)}


def full_access_notice(profile: str | None, toolsets: tuple[str, ...] = ()) -> str | None:
    """What relay says at start-up and in `status` when a chosen profile runs its agents with full access."""
    chosen = _chosen_full_access(profile, toolsets)
    if not chosen:
        return None
    names = ", ".join(chosen)
    return (
        f"profile {names} runs its agents with full access (every approval and sandbox off), as its seed does: "
        "choosing the profile is the grant"
    )


def load_toolset(name: str) -> Toolset:
    """The toolset called `name` (or one of its aliases)."""
    module_path = BUILTIN.get(name)
    if module_path is None:
        for candidate in BUILTIN:
            if name in load_toolset(candidate).aliases:
                return load_toolset(candidate)
        raise unknown_toolset(name)
    toolset = importlib.import_module(module_path).TOOLSET
    if not isinstance(toolset, Toolset):
        raise RelayError(ErrorCode.INTERNAL, f"{module_path}.TOOLSET is not a Toolset", "report this as a relay bug")
    return toolset


def toolset_aliases() -> dict[str, str]:
    """Each alias of a built-in toolset (`gobby-tasks`, `pal`) and the toolset it names."""
    return {alias: name for name in BUILTIN for alias in load_toolset(name).aliases}


def reserved_names(aliases: dict[str, str] | None = None) -> list[str]:
    """Every name call_tool answers to internally (toolsets, their aliases, profiles): no downstream server takes one."""
    return list(dict.fromkeys([*BUILTIN, *(toolset_aliases() if aliases is None else aliases), *PROFILES]))


def unknown_toolset(name: str) -> RelayError:
    names = sorted({*BUILTIN, *PROFILES})
    near = closest(name, names)
    return RelayError(
        ErrorCode.CONFIG_INVALID,
        f"no toolset or profile named {name!r}" + (f"; did you mean {' or '.join(near)}?" if near else ""),
        f"choose from: {', '.join(names)} (`relay toolsets` lists them with their tools)",
    )


def resolve_exposure(toolsets: tuple[str, ...], profile: str | None) -> Exposure:
    """What to expose for `--toolsets a,b` or `--profile NAME` (never both); nothing given: the default."""
    if profile and toolsets:
        raise RelayError(
            ErrorCode.CONFIG_INVALID,
            "both a profile and toolsets are set",
            "a profile exposes exactly one seed system's tools: drop --toolsets (RELAY_TOOLSETS) or --profile",
        )
    if profile:
        if profile not in PROFILES:
            raise RelayError(
                ErrorCode.CONFIG_INVALID,
                f"no profile named {profile!r}"
                + (f"; did you mean {' or '.join(closest(profile, list(PROFILES)))}?" if PROFILES else ""),
                f"profiles: {', '.join(sorted(PROFILES)) or 'none'}",
            )
        return PROFILES[profile]
    if not toolsets:
        return DEFAULT_EXPOSURE
    exposure: list[tuple[str, frozenset[str] | None]] = []
    for name in toolsets:
        if name in PROFILES and name not in BUILTIN:
            exposure.extend(PROFILES[name])
            continue
        exposure.append((load_toolset(name).name, None))
    return tuple(exposure)
