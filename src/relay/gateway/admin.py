"""Adding and removing downstream servers: the one path under add_mcp_server / remove_mcp_server and
`relay mcp add|remove`, so both check, scope and store a server the same way."""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any

from relay.config import Settings
from relay.errors import ErrorCode, RelayError, invalid
from relay.gateway.config import MASK, ServerConfig, make_config
from relay.gateway.manager import Gateway, ServerTools, scope_for
from relay.jobs.grants import Audit, permit_command
from relay.jobs.request import SUBMITTED_VIA
from relay.principal import current

# Where a server is recorded: for the gateway's project (the default) or for every project.
SCOPES = ("project", "global")

ServerPermit = Callable[[Sequence[ServerConfig]], Awaitable[object]]
"""Allows the stdio servers about to be recorded (each a command that relay will start), or raises the refusal."""


def require_admin(action: str) -> None:
    """Downstream servers are the relay's, shared by every principal: only an admin (the local person on stdio and
    the CLI, an `admin` token) adds, imports or removes them, so no `user` token can remove or shadow another's."""
    who = current()
    if not who.is_admin:
        raise RelayError(
            ErrorCode.PERMISSION_NOT_GRANTED,
            f"{action} is for the relay's admin: downstream MCP servers are shared by every token, and "
            f"{who.name!r} is a user token",
            "ask the relay's admin to add it (`relay mcp add` on the relay's host, or the tool with an admin token); "
            "the servers already there you can list and call",
        )


def command_line(config: ServerConfig) -> str:
    """What a stdio server runs, as a person reads it: env names (values as ***), the command and its arguments."""
    words = [*(f"{key}={MASK}" for key in config.env), config.command or "", *config.args]
    where = f" (in {config.cwd})" if config.cwd else ""
    return shlex.join(words) + where


def server_permit(settings: Settings, audit: Audit, cwd: str) -> ServerPermit:
    """A stdio server a caller names is a command relay will start: a `full` action (relay.jobs.grants), asked
    once for every such server of one add or import, before any is recorded. http and websocket ones start none."""

    async def permit(configs: Sequence[ServerConfig]) -> None:
        stdio = [c for c in configs if c.transport == "stdio"]
        if not stdio:
            return
        names = ", ".join(c.name for c in stdio)
        command = (
            command_line(stdio[0]) if len(stdio) == 1 else "; ".join(f"{c.name}: {command_line(c)}" for c in stdio)
        )
        await permit_command(
            settings,
            command,
            what=f"the stdio MCP server{'s' if len(stdio) > 1 else ''} {names}",
            cwd=cwd,
            via=SUBMITTED_VIA.get(),
            audit=audit,
            instead="add an http or websocket server instead, or ask the person to add it with `relay mcp add`",
        )

    return permit


def _scope(value: str) -> str:
    if value not in SCOPES:
        raise invalid(f"scope {value!r} is not one of {', '.join(SCOPES)}", "use project (the default) or global")
    return value


async def add_server(
    gateway: Gateway,
    *,
    name: str,
    transport: str,
    scope: str = "project",
    url: str | None = None,
    headers: Mapping[str, Any] | None = None,
    command: str | None = None,
    args: list[str] | tuple[str, ...] | None = None,
    env: Mapping[str, Any] | None = None,
    enabled: bool = True,
    reserved: Collection[str] = (),
    permit: ServerPermit,
) -> ServerConfig:
    """Validate and record a server (replacing one of that name in its scope; its changed tools are approved).

    `reserved`: names the server may not take (relay's own toolsets, their aliases and profiles). Every
    refusal is an INVALID_ARGUMENT naming what to fix; env and header values go to the secrets file only.
    Only an admin adds one (`require_admin`); a stdio server is recorded only once `permit` allowed its command.
    """
    require_admin("adding a downstream MCP server")
    if name in reserved:
        raise invalid(
            f"'{name}' is the name of one of relay's own toolsets", "choose another name for the downstream server"
        )
    config = make_config(
        name=name,
        transport=transport,
        scope=scope_for(gateway.project, _scope(scope)),
        url=url,
        headers=headers,
        command=command,
        args=args,
        env=env,
        enabled=enabled,
    )
    await permit([config])
    return await gateway.add(config)


async def try_server(gateway: Gateway, name: str) -> ServerTools:
    """Start (or reach) one server now and list its tools; a failure is in the answer's error and hint."""
    [listed] = await gateway.list_tools(name)
    return listed


def added_reply(config: ServerConfig, listed: ServerTools | None) -> dict[str, Any]:
    """What an add answers: the config (env and header values as ***) and, when it was tried, its state and tools."""
    reply: dict[str, Any] = {"success": True, "server": config.public()}
    if listed is not None:
        reply.update(state=listed.state, tools=[t.name for t in listed.tools])
        if listed.error:
            reply["error"] = listed.error
            if listed.hint:
                reply["hint"] = listed.hint
    return reply


async def remove_server(gateway: Gateway, name: str, scope: str | None = None) -> ServerConfig:
    """Remove a visible server: the project's own, else the global one of that name; `scope` picks one of the two.
    Only an admin removes one (`require_admin`)."""
    require_admin("removing a downstream MCP server")
    return await gateway.remove(name, None if scope is None else scope_for(gateway.project, _scope(scope)))
