"""The gateway: the downstream servers a project sees, one shared connection each, fail-open listing.

Core only: it knows servers, tools and results, nothing of how relay serves MCP. A server that
will not start, hangs or dies shows its state and last error in `statuses()` and never hides
the other servers' tools nor holds `list_tools` past its per-server wait.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from mcp.types import CallToolResult, ReadResourceResult, Tool

from relay.errors import ErrorCode, RelayError, invalid
from relay.gateway import pins
from relay.gateway._host import TaskHost
from relay.gateway.bounded import DEFAULT_RESULT_CAP_CHARS, Bounded, bound
from relay.gateway.config import GLOBAL, ServerConfig
from relay.gateway.connection import (
    DEFAULT_CALL_TIMEOUT_S,
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_RESTART_BACKOFF_MAX_S,
    DEFAULT_RESTART_BACKOFF_S,
    Connection,
)
from relay.gateway.registry import ServerRegistry

# How long list_tools waits for one server (all are waited on together) before answering without it.
DEFAULT_LIST_WAIT_S = 10.0
# A server that failed to start is not started again by listing until this much time has passed
# (a direct call to it always tries once).
RETRY_FAILED_AFTER_S = 30.0


@dataclass(frozen=True)
class Limits:
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    list_wait_s: float = DEFAULT_LIST_WAIT_S
    retry_failed_after_s: float = RETRY_FAILED_AFTER_S
    restart_backoff_s: float = DEFAULT_RESTART_BACKOFF_S
    restart_backoff_max_s: float = DEFAULT_RESTART_BACKOFF_MAX_S
    # What one downstream result may carry back to the client (characters); the rest is kept to page.
    result_cap_chars: int = DEFAULT_RESULT_CAP_CHARS

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Limits:
        """Defaults, overridden by RELAY_GATEWAY_CONNECT_TIMEOUT_S / _CALL_TIMEOUT_S / _LIST_WAIT_S /
        _RESTART_BACKOFF_S / _RESTART_BACKOFF_MAX_S (seconds) and RELAY_GATEWAY_RESULT_CAP_CHARS (characters)."""

        def seconds(key: str, default: float, unit: str = "seconds") -> float:
            raw = environ.get(key, "")
            try:
                value = float(raw) if raw else default
            except ValueError:
                raise RelayError(
                    ErrorCode.CONFIG_INVALID, f"{key}={raw!r} is not a number", f"set {key} to {unit}"
                ) from None
            if value <= 0:
                raise RelayError(ErrorCode.CONFIG_INVALID, f"{key} must be positive", f"set {key} above 0")
            return value

        return cls(
            connect_timeout_s=seconds("RELAY_GATEWAY_CONNECT_TIMEOUT_S", DEFAULT_CONNECT_TIMEOUT_S),
            call_timeout_s=seconds("RELAY_GATEWAY_CALL_TIMEOUT_S", DEFAULT_CALL_TIMEOUT_S),
            list_wait_s=seconds("RELAY_GATEWAY_LIST_WAIT_S", DEFAULT_LIST_WAIT_S),
            restart_backoff_s=seconds("RELAY_GATEWAY_RESTART_BACKOFF_S", DEFAULT_RESTART_BACKOFF_S),
            restart_backoff_max_s=seconds("RELAY_GATEWAY_RESTART_BACKOFF_MAX_S", DEFAULT_RESTART_BACKOFF_MAX_S),
            result_cap_chars=int(seconds("RELAY_GATEWAY_RESULT_CAP_CHARS", DEFAULT_RESULT_CAP_CHARS, "characters")),
        )


@dataclass(frozen=True)
class ServerTools:
    """One server's answer to list_tools: its tools, or why there are none."""

    name: str
    state: str
    tools: list[Tool] = field(default_factory=lambda: [])
    changed: frozenset[str] = frozenset()
    error: str | None = None
    hint: str = ""


class Gateway:
    """Downstream servers for one project (global ones plus the project's own), reached lazily."""

    def __init__(self, registry: ServerRegistry, home: Path, project: str, limits: Limits | None = None) -> None:
        self.registry = registry
        self.project = project
        self.limits = limits or Limits()
        self._home = home
        self._host = TaskHost()
        self._connections: dict[str, Connection] = {}
        self._changed: dict[str, dict[str, pins.Change]] = {}
        self._configs: dict[str, ServerConfig] | None = None

    # configuration ------------------------------------------------------------------------

    def servers(self, reload: bool = False) -> list[ServerConfig]:
        """The servers this project sees, by name (re-read from the store on `reload`)."""
        if self._configs is None or reload:
            self._configs = {c.name: c for c in self.registry.visible(self.project)}
        return list(self._configs.values())

    def config(self, name: str) -> ServerConfig:
        configs = {c.name: c for c in self.servers()}
        if name not in configs:
            configs = {c.name: c for c in self.servers(reload=True)}  # another process may have added it
        if name not in configs:
            raise RelayError(
                ErrorCode.SERVER_NOT_FOUND,
                f"Server '{name}' not found",
                f"available: {', '.join(sorted(configs)) or 'none'}; add one with add_mcp_server",
            )
        return configs[name]

    def names(self) -> list[str]:
        return [c.name for c in self.servers()]

    def has(self, name: str) -> bool:
        """Whether a server of that name is visible (re-reading the store on a miss: another process may add one)."""
        return name in self.names() or name in [c.name for c in self.servers(reload=True)]

    async def add(self, config: ServerConfig) -> ServerConfig:
        """Record a server (replacing one of the same name in its scope) and approve its current tools."""
        self.registry.put(config)
        # Re-adding is how a user approves changed tool definitions: the next sight pins afresh.
        self.registry.forget_pins(config.scope, config.name)
        await self._drop(config.name)
        self.servers(reload=True)
        return config

    async def remove(self, name: str, scope: str | None = None) -> ServerConfig:
        """Remove a visible server: the one this project sees, or the one of that name in `scope`."""
        config = self.config(name)
        if scope is not None and scope != config.scope:
            recorded = {c.name: c for c in self.registry.in_scope(scope)}
            if name not in recorded:
                raise RelayError(
                    ErrorCode.SERVER_NOT_FOUND,
                    f"Server '{name}' is not {_scope_words(scope)}",
                    f"it is {_scope_words(config.scope)}",
                )
            config = recorded[name]
        if not self.registry.remove(config.scope, name):
            raise RelayError(ErrorCode.SERVER_NOT_FOUND, f"Server '{name}' not found", "another process removed it")
        await self._drop(name)
        self.servers(reload=True)
        return config

    def approve(self, name: str) -> list[str]:
        """Approve every changed definition of a server (the CLI's `relay mcp approve`)."""
        config = self.config(name)
        approved = self.registry.approve(config.scope, name)
        self._changed.pop(name, None)
        return approved

    async def _drop(self, name: str) -> None:
        conn = self._connections.pop(name, None)
        self._changed.pop(name, None)
        if conn is not None:
            await conn.close()

    # connections --------------------------------------------------------------------------

    def connection(self, name: str) -> Connection:
        config = self.config(name)
        conn = self._connections.get(name)
        if conn is None or conn.config != config:
            if conn is not None:
                self._connections.pop(name, None)
            conn = Connection(
                config,
                self._host,
                self._log_dir(config.scope),
                connect_timeout_s=self.limits.connect_timeout_s,
                on_tools=self._saw_tools,
                on_state=self._record_state,
                backoff_s=(self.limits.restart_backoff_s, self.limits.restart_backoff_max_s),
                result_cap_chars=self.limits.result_cap_chars,
            )
            self._connections[name] = conn
        return conn

    def _log_dir(self, scope: str) -> Path:
        tag = hashlib.sha256(scope.encode()).hexdigest()[:12] if scope else "global"
        return self._home / "gateway" / tag

    def _record_state(self, conn: Connection) -> None:
        """Keep the connection's state where another process (`relay mcp list`) can read it."""
        cfg = conn.config
        self.registry.record_state(
            cfg.scope, cfg.name, conn.state, conn.last_error, skipped_lines=conn.skipped_lines, starts=conn.starts
        )

    def _saw_tools(self, conn: Connection, tools: list[Tool]) -> None:
        cfg = conn.config
        self._changed[cfg.name] = pins.check(self.registry, cfg.scope, cfg.name, tools)

    def changed(self, name: str) -> dict[str, pins.Change]:
        """The tools of a server refused because their definitions changed (an approval elsewhere clears them)."""
        changes = self._changed.get(name, {})
        if not changes:
            return changes
        config = self.config(name)
        approved = self.registry.pins(config.scope, name)
        still = {t: c for t, c in changes.items() if approved.get(t, ("", None))[0] != c.seen}
        self._changed[name] = still
        return still

    # listing ------------------------------------------------------------------------------

    async def list_tools(self, server: str | None = None) -> list[ServerTools]:
        """Tools of one server, or of every enabled server, each waited on at most `list_wait_s`."""
        explicit = server is not None
        configs = [self.config(server)] if server is not None else [c for c in self.servers(reload=True) if c.enabled]
        results: dict[str, ServerTools] = {}

        async def one(config: ServerConfig) -> None:
            results[config.name] = await self._tools_of(config, explicit=explicit)

        async with anyio.create_task_group() as tg:
            for config in configs:
                tg.start_soon(one, config)
        return [results[c.name] for c in configs]

    async def _tools_of(self, config: ServerConfig, explicit: bool) -> ServerTools:
        conn = self.connection(config.name)
        if not config.enabled:
            return ServerTools(config.name, "disabled", error="disabled; add it again with enabled=true")
        recently_failed = (
            conn.state == "failed"
            and conn.failed_at is not None
            and anyio.current_time() - conn.failed_at < self.limits.retry_failed_after_s
        )
        if recently_failed and not explicit:
            return ServerTools(config.name, "failed", error=conn.last_error)
        attempt = await conn.start_in_background()
        with anyio.move_on_after(self.limits.list_wait_s):
            await attempt.done.wait()
        if not attempt.done.is_set():
            return ServerTools(
                config.name,
                conn.state,
                error=f"{config.name} did not answer within {self.limits.list_wait_s:g} seconds; still starting",
            )
        if attempt.error is not None:
            return ServerTools(config.name, conn.state, error=attempt.error.message, hint=attempt.error.hint)
        try:
            with anyio.move_on_after(self.limits.list_wait_s):
                await conn.ensure()  # refreshes a list the server said has changed
        except RelayError as err:
            return ServerTools(config.name, conn.state, error=err.message, hint=err.hint)
        return ServerTools(config.name, conn.state, list(conn.tools), frozenset(self.changed(config.name)))

    async def tool(self, server: str, name: str) -> Tool:
        """One tool's definition; an unknown name is TOOL_NOT_FOUND listing the server's tools."""
        self._check_enabled(server)
        conn = self.connection(server)
        await conn.ensure()
        tool = conn.tool(name)
        if tool is None:
            available = ", ".join(t.name for t in conn.tools) or "none"
            raise RelayError(
                ErrorCode.TOOL_NOT_FOUND,
                f"Tool '{name}' not found on '{server}'. Available: {available}",
                f"call list_tools(server='{server}') for the tools it has",
            )
        return tool

    # calls --------------------------------------------------------------------------------

    async def call_tool(
        self, server: str, name: str, arguments: dict[str, Any], timeout_s: float | None = None
    ) -> CallToolResult:
        """Call a downstream tool and hand back its result untouched; a changed definition is refused."""
        await self.tool(server, name)
        change = self.changed(server).get(name)
        if change is not None:
            raise RelayError(
                ErrorCode.TOOL_CHANGED,
                f"Tool '{name}' on '{server}' changed its definition since it was approved"
                f" (sha256 {change.pinned[:12]} -> {change.seen[:12]}); relay refuses it until you approve it",
                f"check the new definition with get_tool_schema, then run `relay mcp approve {server}`"
                " or add_mcp_server again",
            )
        conn = self.connection(server)
        return await conn.call_tool(name, arguments, timeout_s or self.limits.call_timeout_s)

    def bound(self, server: str, result: CallToolResult) -> Bounded:
        """A result of `server` as the client gets it: at most the cap, the whole kept (in a file if it was spilled)."""
        conn = self._connections.get(server)
        spilled = conn.claim(result) if conn is not None else None
        return bound(result, self.limits.result_cap_chars, spilled)

    def _check_enabled(self, server: str) -> None:
        if not self.config(server).enabled:
            raise invalid(f"Server '{server}' is disabled", "add it again with add_mcp_server(..., enabled=true)")

    async def read_resource(self, server: str, uri: str, timeout_s: float | None = None) -> ReadResourceResult:
        self._check_enabled(server)
        return await self.connection(server).read_resource(uri, timeout_s or self.limits.call_timeout_s)

    # status -------------------------------------------------------------------------------

    def statuses(self) -> list[dict[str, Any]]:
        """Every visible server with its connection state and last error (list_mcp_servers, status)."""
        out: list[dict[str, Any]] = []
        for config in self.servers(reload=True):
            conn = self._connections.get(config.name)
            state = "disabled" if not config.enabled else (conn.state if conn is not None else "configured")
            if conn is not None and state == "connected" and not conn.alive:
                state = "failed"
            out.append(
                {
                    "name": config.name,
                    "project_id": config.scope or None,
                    "description": config.description,
                    "connected": state == "connected",
                    "state": state,
                    "transport": config.transport,
                    "enabled": config.enabled,
                    "tool_count": len(conn.tools) if conn is not None and conn.tools else None,
                    "changed_tools": sorted(self.changed(config.name)),
                    "last_error": conn.last_error if conn is not None else None,
                    "starts": conn.starts if conn is not None else 0,
                    "failures_in_a_row": conn.streak if conn is not None else 0,
                    "skipped_lines": conn.skipped_lines if conn is not None else 0,
                    "last_skipped_line": conn.last_skipped if conn is not None else None,
                }
            )
        return out

    async def aclose(self) -> None:
        """Close every connection (each stdio server is stopped) and the task host."""
        connections, self._connections = list(self._connections.values()), {}
        async with anyio.create_task_group() as tg:
            for conn in connections:
                tg.start_soon(conn.close)
        await self._host.aclose()


def _scope_words(scope: str) -> str:
    return f"a server of the project {scope}" if scope else "a global server"


def scope_for(project: str, scope: str) -> str:
    """The registry scope of an add: the project directory, or "" for a global server."""
    return GLOBAL if scope == "global" else project
