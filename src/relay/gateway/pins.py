"""Pinned tool definitions: the SHA-256 of what a calling model reads about a downstream tool.

The first sight of a tool records its digest; a later definition with another digest (a "rug
pull": same name, new description or schema) is recorded as pending and the tool is refused
until the user approves it (re-running add_mcp_server, or `relay mcp approve NAME`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from mcp.types import Tool

from relay.gateway.registry import ServerRegistry


def definition(tool: Tool) -> dict[str, Any]:
    """The parts of a tool a model acts on: name, title, description, schemas and annotations."""
    data = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {
        k: data[k] for k in ("name", "title", "description", "inputSchema", "outputSchema", "annotations") if k in data
    }


def digest(defn: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(defn, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class Change:
    """A tool whose definition differs from the approved one."""

    tool: str
    pinned: str
    seen: str


def check(registry: ServerRegistry, scope: str, server: str, tools: list[Tool]) -> dict[str, Change]:
    """Pin new tools, record changed ones as pending; return the changed (refused) tools by name."""
    pinned = registry.pins(scope, server)
    changed: dict[str, Change] = {}
    for tool in tools:
        defn = definition(tool)
        sha = digest(defn)
        known = pinned.get(tool.name)
        if known is None:
            registry.pin(scope, server, tool.name, sha, defn)
        elif known[0] != sha:
            if known[1] != sha:
                registry.mark_changed(scope, server, tool.name, sha, defn)
            changed[tool.name] = Change(tool=tool.name, pinned=known[0], seen=sha)
    return changed
