"""A downstream MCP server's configuration: validated, scoped (global or one project), secrets kept apart."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from relay.errors import invalid

TRANSPORTS = ("stdio", "http", "websocket")
# What replies and records show instead of an env or header value.
MASK = "***"
# Names become part of tool routing (`call_tool(server_name=...)`): keep them plain.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
GLOBAL = ""


@dataclass(frozen=True)
class ServerConfig:
    """One downstream server. `scope` is "" (global) or the absolute directory of the project it belongs to."""

    name: str
    transport: str
    scope: str = GLOBAL
    command: str | None = None
    args: tuple[str, ...] = ()
    url: str | None = None
    cwd: str | None = None
    env: Mapping[str, str] = field(default_factory=lambda: {})
    headers: Mapping[str, str] = field(default_factory=lambda: {})
    description: str = ""
    enabled: bool = True
    source: str = "add"

    def public(self) -> dict[str, Any]:
        """The config as replies and records show it: env and header values masked."""
        data: dict[str, Any] = {"name": self.name, "transport": self.transport}
        if self.command is not None:
            data["command"] = self.command
            data["args"] = list(self.args)
        if self.url is not None:
            data["url"] = self.url
        if self.cwd is not None:
            data["cwd"] = self.cwd
        if self.env:
            data["env"] = dict.fromkeys(self.env, MASK)
        if self.headers:
            data["headers"] = dict.fromkeys(self.headers, MASK)
        data["enabled"] = self.enabled
        data["project_id"] = self.scope or None
        if self.description:
            data["description"] = self.description
        return data

    def secret_values(self) -> tuple[str, ...]:
        return tuple(v for v in (*self.env.values(), *self.headers.values()) if v)

    def with_(self, **changes: Any) -> ServerConfig:
        return replace(self, **changes)


def _str_map(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise invalid(f"{what} must be an object of string values", f'pass {what} like {{"KEY": "value"}}')
    items: Mapping[Any, Any] = value  # pyright: ignore[reportUnknownVariableType]
    out: dict[str, str] = {}
    for key, val in items.items():
        if not isinstance(key, str) or not key or not isinstance(val, str | int | float | bool):
            raise invalid(f"{what} must map names to strings; {key!r} does not", f"give {what} string values")
        out[key] = str(val).lower() if isinstance(val, bool) else str(val)
    return out


def make_config(
    *,
    name: str,
    transport: str,
    scope: str = GLOBAL,
    url: str | None = None,
    headers: Mapping[str, Any] | None = None,
    command: str | None = None,
    args: list[str] | tuple[str, ...] | None = None,
    env: Mapping[str, Any] | None = None,
    cwd: str | None = None,
    enabled: bool = True,
    description: str = "",
    source: str = "add",
) -> ServerConfig:
    """A validated config; every problem is an INVALID_ARGUMENT that says which field to fix."""
    if not NAME_PATTERN.match(name or ""):
        raise invalid(
            f"server name {name!r} is not usable",
            "use 1-64 letters, digits, '_', '-' or '.', starting with a letter or digit",
        )
    if transport not in TRANSPORTS:
        raise invalid(f"transport {transport!r} is not one of {', '.join(TRANSPORTS)}", "use stdio, http or websocket")
    if transport == "stdio":
        if not command or not command.strip():
            raise invalid("transport 'stdio' needs a command", 'pass command (e.g. "npx") and args')
        if url:
            raise invalid("a stdio server takes command/args, not url", "drop url, or use transport 'http'")
    else:
        if not url:
            example = "https://example.com/mcp" if transport == "http" else "wss://example.com/mcp"
            raise invalid(f"transport {transport!r} needs a url", f"pass url, e.g. {example}")
        schemes = ("http://", "https://") if transport == "http" else ("ws://", "wss://")
        if not url.startswith(schemes):
            raise invalid(f"url {url!r} does not suit transport {transport!r}", f"use a {' or '.join(schemes)} url")
        if command:
            raise invalid(f"a {transport} server takes url, not command", "drop command, or use transport 'stdio'")
    arg_list = list(args or [])
    if not all(isinstance(a, str) for a in arg_list):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise invalid("args must be a list of strings", 'pass args like ["-y", "package"]')
    return ServerConfig(
        name=name,
        transport=transport,
        scope=scope,
        command=command if transport == "stdio" else None,
        args=tuple(arg_list),
        url=url if transport != "stdio" else None,
        cwd=cwd,
        env=_str_map(env, "env"),
        headers=_str_map(headers, "headers"),
        description=description,
        enabled=enabled,
        source=source,
    )


def project_of(cwd: Path) -> str:
    """The project a directory belongs to: the nearest enclosing git work tree, else the directory itself."""
    here = cwd.resolve()
    for candidate in (here, *here.parents):
        if (candidate / ".git").exists():
            return str(candidate)
    return str(here)
