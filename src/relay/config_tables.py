"""config.toml's tables that need more than a type check: tokens, workspaces' commands and ports, clients.

Part of relay.config (which re-exports what others import); kept apart so each module stays readable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relay.errors import ErrorCode, RelayError
from relay.principal import LOCAL_NAME, NAME_PATTERN, ROLES, Principal

PERMISSIONS = ("read-only", "edit", "full")
# A bearer token shorter than this is guessable; config with one is refused.
MIN_TOKEN_CHARS = 16
# Worktrees' ports (relay.workspaces.ready): the range blocks come from, and each block's size.
DEFAULT_WORKTREE_PORTS = (24000, 24999, 10)


@dataclass(frozen=True)
class NamedToken:
    """An HTTP bearer token from `[server.tokens.NAME]`: the principal a request carrying it acts as."""

    principal: Principal
    token: str = field(repr=False)


def str_tuple(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    if isinstance(value, list):
        items: list[Any] = value  # pyright: ignore[reportUnknownVariableType]
        if all(isinstance(v, str) for v in items):
            return tuple(str(v) for v in items)
    raise RelayError(ErrorCode.CONFIG_INVALID, f"{where} must be a list of strings", "fix config.toml")


def str_table(value: Any, where: str) -> dict[str, str]:
    """A table of strings (`env = { NAME = "value" }`); {} when absent."""
    if value is None:
        return {}
    if isinstance(value, dict):
        table: dict[Any, Any] = value  # pyright: ignore[reportUnknownVariableType]
        if all(isinstance(k, str) and isinstance(v, str) for k, v in table.items()):
            return {str(k): str(v) for k, v in table.items()}
    raise RelayError(
        ErrorCode.CONFIG_INVALID, f"{where} must be a table of strings", f'set {where} = {{ NAME = "value" }}'
    )


def test_commands(value: Any) -> tuple[str, ...]:
    """`[workspaces] test_command`: one shell command, or a list of them (kept whole: a command may hold commas)."""
    if value is None:
        return ()
    items: list[Any] = [value] if isinstance(value, str) else value if isinstance(value, list) else [None]  # pyright: ignore[reportUnknownVariableType]
    if not all(isinstance(v, str) and v.strip() for v in items):
        raise RelayError(
            ErrorCode.CONFIG_INVALID,
            "workspaces.test_command must be a command or a list of commands",
            'set [workspaces] test_command = "pytest -q" (or a list of such strings) in config.toml',
        )
    return tuple(str(v) for v in items)


def setup_commands(spaces: Mapping[str, Any]) -> dict[str, str]:
    """`[workspaces] setup_command` (key "") and `[workspaces.repos."<checkout folder or remote URL>"] setup_command`."""
    hint = 'set [workspaces] setup_command = "npm ci", or in [workspaces.repos."/src/app" or "git@host:me/app.git"]'
    repos: Any = spaces.get("repos", {})
    tables: list[tuple[str, Mapping[str, Any]]] = [("", spaces)]
    items: list[tuple[str, Any]] = list(repos.items()) if isinstance(repos, dict) else [("", None)]  # pyright: ignore
    for key, table in items:
        key = str(Path(key).expanduser().resolve()) if key.startswith(("/", "~")) else key
        if not (key.startswith("/") or ":" in key) or not isinstance(table, dict) or set(table) - {"setup_command"}:  # pyright: ignore[reportUnknownArgumentType]
            why = "must be named by a checkout's absolute folder or a remote's URL, and hold setup_command only"
            raise RelayError(ErrorCode.CONFIG_INVALID, f"workspaces.repos.{key!r} {why}", hint)
        tables.append((key, table))  # pyright: ignore[reportUnknownArgumentType]
    found = {key: table.get("setup_command") for key, table in tables if table.get("setup_command") is not None}
    if all(isinstance(value, str) for value in found.values()):
        return {key: str(value).strip() for key, value in found.items()}
    raise RelayError(ErrorCode.CONFIG_INVALID, "a workspaces setup_command must be a string", hint)


def ports(env: Mapping[str, str], spaces: Mapping[str, Any]) -> tuple[int, int, int]:
    """`[workspaces] ports = "FIRST-LAST"` (RELAY_WORKTREE_PORTS) and `ports_per_worktree` (0: none)."""
    raw = str(env.get("RELAY_WORKTREE_PORTS") or spaces.get("ports") or "{}-{}".format(*DEFAULT_WORKTREE_PORTS))
    per: Any = spaces.get("ports_per_worktree", DEFAULT_WORKTREE_PORTS[2])
    first, _, last = (part.strip() for part in raw.partition("-"))
    span = (int(first), int(last)) if first.isdigit() and last.isdigit() else (0, 0)
    if type(per) is int and 1024 <= span[0] <= span[1] <= 65535 and 0 <= per <= span[1] - span[0] + 1:
        return span[0], span[1], per
    what = f"workspaces.ports={raw!r}, ports_per_worktree={per!r}: not a range of ports that holds a block"
    raise RelayError(ErrorCode.CONFIG_INVALID, what, 'set [workspaces] ports = "24000-24999", ports_per_worktree = 10')


def client_timeouts(raw: Any) -> dict[str, float]:
    """`[clients.NAME] tool_timeout_s = S` for each MCP client (NAME: codex, claude-code, ... or a clientInfo name)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise RelayError(ErrorCode.CONFIG_INVALID, "[clients] must be a table of tables", "fix config.toml")
    tables: dict[str, Any] = raw  # pyright: ignore[reportUnknownVariableType]
    found: dict[str, float] = {}
    for name, table in tables.items():
        value = table.get("tool_timeout_s") if isinstance(table, dict) else None  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise RelayError(
                ErrorCode.CONFIG_INVALID,
                f"clients.{name}.tool_timeout_s must be a positive number of seconds",
                "fix config.toml",
            )
        found[name] = float(value)
    return found


def tokens(raw: Any, env: Mapping[str, str]) -> tuple[NamedToken, ...]:
    """`[server.tokens.NAME]` tables: `token = "..."` or `token_env = "VAR"`, `role = "user" | "admin"`, and the
    token's own `grant` and `cap` (permission levels; relay.jobs.grants)."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise RelayError(ErrorCode.CONFIG_INVALID, "[server.tokens] must be a table of tables", "fix config.toml")
    tables: dict[str, Any] = raw  # pyright: ignore[reportUnknownVariableType]
    found: list[NamedToken] = []
    for name, table in tables.items():
        where = f"server.tokens.{name}"
        if not isinstance(table, dict):
            raise RelayError(ErrorCode.CONFIG_INVALID, f"[{where}] must be a table", "fix config.toml")
        entry: dict[str, Any] = table  # pyright: ignore[reportUnknownVariableType]
        if not NAME_PATTERN.match(name) or name == LOCAL_NAME:
            raise RelayError(
                ErrorCode.CONFIG_INVALID,
                f"[{where}]: {name!r} cannot name a principal",
                f"use letters, digits, '_', '.', '@' or '-' (up to 64), not {LOCAL_NAME!r}",
            )
        role = entry.get("role", "user")
        if role not in ROLES:
            raise RelayError(ErrorCode.CONFIG_INVALID, f"{where}.role = {role!r}", 'use role = "user" or "admin"')
        var = entry.get("token_env")
        token = env.get(str(var), "") if var else entry.get("token", "")
        if not isinstance(token, str) or len(token) < MIN_TOKEN_CHARS:
            source = f"${var}" if var else f"{where}.token"
            raise RelayError(
                ErrorCode.CONFIG_INVALID,
                f"{source} must be a token of at least {MIN_TOKEN_CHARS} characters",
                f"set {where}.token_env to a variable holding one (e.g. `openssl rand -hex 24`)",
            )
        if any(t.token == token for t in found):
            raise RelayError(ErrorCode.CONFIG_INVALID, f"[{where}] reuses another name's token", "give each its own")
        grant, cap = (token_level(entry, where, key) for key in ("grant", "cap"))
        if grant is not None and cap is not None and PERMISSIONS.index(grant) > PERMISSIONS.index(cap):
            raise RelayError(
                ErrorCode.CONFIG_INVALID,
                f"[{where}] grant = {grant!r} is above its cap = {cap!r}",
                "a token's cap is the most its calls can reach: set cap at or above grant",
            )
        found.append(NamedToken(Principal(name, role, grant, cap), token))
    return tuple(found)


def token_level(entry: Mapping[str, Any], where: str, key: str) -> str | None:
    """A token's `grant` or `cap`: a permission level, or None when not set."""
    value = entry.get(key)
    if value is None:
        return None
    if value not in PERMISSIONS:
        raise RelayError(
            ErrorCode.CONFIG_INVALID, f"{where}.{key} = {value!r} is not a permission", "use read-only, edit or full"
        )
    return str(value)


def number(
    env: Mapping[str, str],
    env_key: str,
    table: Mapping[str, Any],
    section: str,
    key: str,
    default: float,
    *,
    whole: bool = False,
    unit: str = "seconds",
) -> float:
    """A setting above 0: the environment's `env_key` over `key` of config.toml's `[section]` (`table`), else
    `default`. A value that is not a number (a word, a boolean), not above 0, or (`whole`) not a whole number is
    CONFIG_INVALID naming where it was read, with the default as the example."""
    raw: object
    if env.get(env_key) not in (None, ""):
        raw, source = env[env_key], env_key
    elif table.get(key) not in (None, ""):
        raw, source = table[key], f"config.toml [{section}] {key}"
    else:
        return default
    shown = int(default) if whole else default
    kind = f"a whole number of {unit}" if whole else f"a number of {unit}"
    try:
        value = float(raw.strip()) if isinstance(raw, str) else float(raw) if isinstance(raw, int | float) else None
    except ValueError:
        value = None
    if raw is True or raw is False or value is None or value != value or value in (float("inf"), float("-inf")):
        raise RelayError(ErrorCode.CONFIG_INVALID, f"{source} is not {kind} (it is {raw!r})", f"set it to {shown}")
    if value <= 0 or (whole and not value.is_integer()):
        above = "whole number above 0" if whole else "number above 0"
        raise RelayError(ErrorCode.CONFIG_INVALID, f"{source} must be a {above} (it is {raw!r})", f"set it to {shown}")
    return value
