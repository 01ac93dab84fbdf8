"""Adding and removing downstream servers: the one path under add_mcp_server / remove_mcp_server and
`relay mcp add|remove`, so both check, scope and store a server the same way."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from relay.errors import invalid
from relay.gateway.config import ServerConfig, make_config
from relay.gateway.manager import Gateway, ServerTools, scope_for

# Where a server is recorded: for the gateway's project (the default) or for every project.
SCOPES = ("project", "global")


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
) -> ServerConfig:
    """Validate and record a server (replacing one of that name in its scope; its changed tools are approved).

    `reserved`: names the server may not take (relay's own toolsets, their aliases and profiles). Every
    refusal is an INVALID_ARGUMENT naming what to fix; env and header values go to the secrets file only.
    """
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
    """Remove a visible server: the project's own, else the global one of that name; `scope` picks one of the two."""
    return await gateway.remove(name, None if scope is None else scope_for(gateway.project, _scope(scope)))
