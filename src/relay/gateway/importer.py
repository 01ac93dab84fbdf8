"""Reading the MCP server configs a project already has: Claude Code, Cursor, VS Code, Gemini CLI, Codex.

Each file's entries become `Candidate`s: a config relay can record, plus the env/header values
it still needs (a `${input:...}` prompt, a `${VAR}` that is not set, an empty value).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from relay.errors import RelayError, invalid
from relay.gateway.config import NAME_PATTERN, ServerConfig, make_config
from relay.osfiles import expand_home, is_dir

# Where each client keeps a project's MCP servers, and the key its servers live under.
PROJECT_FILES: tuple[tuple[str, str], ...] = (
    (".mcp.json", "mcpServers"),
    (".cursor/mcp.json", "mcpServers"),
    (".vscode/mcp.json", "servers"),
    (".gemini/settings.json", "mcpServers"),
    (".codex/config.toml", "mcp_servers"),
)
# `${env:NAME}`, `${NAME}`, `$NAME` and VS Code's `${input:id}` prompts.
_REFERENCE = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)|\$\{input:([^}]+)\}")


@dataclass(frozen=True)
class Candidate:
    """A server found somewhere, and what it still lacks before it can run."""

    config: ServerConfig
    missing: tuple[str, ...] = ()
    source: str = ""


@dataclass
class Found:
    candidates: list[Candidate] = field(default_factory=lambda: [])
    skipped: dict[str, str] = field(default_factory=lambda: {})


def _resolve(value: str, environ: Mapping[str, str], missing: list[str], key: str) -> str:
    """Expand env references from relay's environment; note what cannot be filled in."""

    def sub(match: re.Match[str]) -> str:
        if match.group(3) is not None:
            missing.append(key)
            return ""
        name = match.group(1) or match.group(2)
        if environ.get(name):
            return environ[name]
        missing.append(name)
        return ""

    resolved = _REFERENCE.sub(sub, value)
    if not value.strip():
        missing.append(key)
    return resolved


def _resolve_map(raw: Any, environ: Mapping[str, str], missing: list[str]) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        return {}
    items: Mapping[Any, Any] = raw  # pyright: ignore[reportUnknownVariableType]
    return {str(k): _resolve(str(v), environ, missing, str(k)) for k, v in items.items()}


def candidate(
    name: str, entry: Mapping[str, Any], scope: str, environ: Mapping[str, str], source: str
) -> Candidate | str:
    """One client-format entry as a relay config, or the reason it cannot be one."""
    if not NAME_PATTERN.match(name):
        return f"name {name!r} is not usable by relay"
    missing: list[str] = []
    kind = str(entry.get("type") or entry.get("transport") or "").lower()
    url = entry.get("url") or entry.get("httpUrl") or entry.get("serverUrl")
    env = _resolve_map(entry.get("env"), environ, missing)
    headers = _resolve_map(entry.get("headers") or entry.get("http_headers"), environ, missing)
    bearer = entry.get("bearer_token_env_var")
    if isinstance(bearer, str) and bearer:
        token = environ.get(bearer, "")
        headers["Authorization"] = f"Bearer {token}" if token else ""
        if not token:
            missing.append(bearer)
    try:
        if entry.get("command"):
            raw_args: Any = entry.get("args")
            args = [
                _resolve(str(a), environ, missing, "args")
                for a in (cast(list[Any], raw_args) if isinstance(raw_args, list) else [])
            ]
            config = make_config(
                name=name,
                transport="stdio",
                scope=scope,
                command=str(entry["command"]),
                args=args,
                env=env,
                cwd=str(entry["cwd"]) if entry.get("cwd") else None,
                enabled=entry.get("enabled", True) is not False and entry.get("disabled", False) is not True,
                source=source,
            )
        elif isinstance(url, str):
            websocket = kind in ("ws", "websocket") or url.startswith(("ws://", "wss://"))
            config = make_config(
                name=name,
                transport="websocket" if websocket else "http",
                scope=scope,
                url=url,
                headers=headers,
                enabled=entry.get("enabled", True) is not False and entry.get("disabled", False) is not True,
                source=source,
            )
        else:
            return "it has neither a command nor a url"
    except RelayError as err:
        return err.message
    return Candidate(config=config, missing=tuple(dict.fromkeys(missing)), source=source)


def _entries(path: Path, key: str) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    try:
        data: Any = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise invalid(f"{path} cannot be parsed: {exc}", "fix the file, or import from another source") from None
    if not isinstance(data, dict):
        return {}
    table = cast(dict[str, Any], data)
    servers: Any = table.get(key)
    if servers is None and key == "servers":
        servers = table.get("mcpServers")
    return cast(dict[str, Any], servers) if isinstance(servers, dict) else {}


def from_project_files(directory: Path, scope: str, environ: Mapping[str, str]) -> Found:
    """Every server the project's client config files name (the first file naming a server wins)."""
    found = Found()
    seen: set[str] = set()
    for relative, key in PROJECT_FILES:
        for name, entry in _entries(directory / relative, key).items():
            if name in seen:
                continue
            seen.add(name)
            if not isinstance(entry, dict):
                found.skipped[name] = f"{relative}: the entry is not an object"
                continue
            result = candidate(name, entry, scope, environ, f"import:{relative}")  # pyright: ignore[reportUnknownArgumentType]
            if isinstance(result, str):
                found.skipped[name] = f"{relative}: {result}"
            else:
                found.candidates.append(result)
    return found


def resolve_project(source: str, cwd: Path, known_scopes: list[str]) -> Path:
    """`from_project` as a directory: a path (absolute or relative to cwd), or the name of a known project."""
    path = expand_home(source)
    path = path if path.is_absolute() else cwd / path
    if is_dir(path):
        return path.resolve()
    by_name = [Path(s) for s in known_scopes if s and Path(s).name == source]
    if len(by_name) == 1:
        return by_name[0]
    raise invalid(
        f"project {source!r} is neither a directory nor a project relay knows",
        "pass the project's directory; known projects: " + (", ".join(s for s in known_scopes if s) or "none"),
    )
