"""Toolset `gateway` (seed 003's direct tools): reach every toolset and downstream MCP server through one entry.

The discovery tools `list_tools`, `get_tool_schema` and `call_tool` answer in seed 003's shapes
(`{success, ...}`); they route a name to relay's own toolsets (and their aliases and profiles) first,
then to the downstream servers the gateway manages.
"""

from __future__ import annotations

from typing import Annotated, Any, Protocol, cast

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult
from pydantic import Field

from relay.errors import RelayError
from relay.server.results import json_result
from relay.server.toolsets._registry import READ_ONLY, Deps, ToolRegistry, Toolset

# list_tools shows this much of each tool's description (seed 003's "brief").
BRIEF_CHARS = 100


class Downstream(Protocol):
    """The downstream MCP servers, as the discovery tools reach them."""

    def names(self) -> list[str]: ...

    async def list_tools(self, server: str) -> list[dict[str, Any]]:
        """`[{name, description, inputSchema}]`; raises RelayError for an unknown or unavailable server."""
        ...

    async def call_tool(self, server: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The downstream CallToolResult as sent on the wire; raises RelayError on failure."""
        ...


def downstream(deps: Deps) -> Downstream | None:
    """The gateway's downstream servers (none configured yet: None)."""
    del deps
    return None


def _brief(description: str) -> str:
    return description.strip()[:BRIEF_CHARS]


def _failure(error: RelayError, **extra: Any) -> CallToolResult:
    return json_result(
        {"success": False, **extra, "error": error.message, "error_type": error.code.value, "hint": error.hint},
        is_error=True,
    )


def build(reg: ToolRegistry, deps: Deps) -> None:
    @reg.tool(
        description="List tools (name + brief) of one server, or of every server: relay's toolsets (core, zen, "
        "tasks...) and its downstream MCP servers. Then get_tool_schema, then call_tool.",
        annotations=READ_ONLY,
    )
    async def list_tools(
        server: Annotated[str | None, Field(description="server or toolset name; omit for all")] = None,
    ) -> CallToolResult:
        router = deps.router
        remote = downstream(deps)
        remote_names = remote.names() if remote else []
        if server is None:
            servers: list[dict[str, Any]] = [
                {
                    "name": name,
                    "tools": [{"name": t.name, "brief": _brief(t.description)} for t in router.tools_of(name)],
                }
                for name in router.server_names()
            ]
            for name in remote_names:
                try:
                    tools = await remote.list_tools(name) if remote else []
                except RelayError as err:
                    servers.append({"name": name, "tools": [], "error": err.message})
                    continue
                servers.append(
                    {
                        "name": name,
                        "tools": [{"name": t["name"], "brief": _brief(t.get("description") or "")} for t in tools],
                    }
                )
            return json_result({"success": True, "servers": servers})
        if router.canonical(server) is not None:
            tools_out = [{"name": t.name, "brief": _brief(t.description)} for t in router.tools_of(server)]
            return json_result({"success": True, "server": server, "tools": tools_out})
        if remote is not None and server in remote_names:
            try:
                tools = await remote.list_tools(server)
            except RelayError as err:
                return _failure(err, server=server)
            briefs = [
                {"name": t["name"], "brief": _brief(t.get("description") or "No description available")} for t in tools
            ]
            return json_result({"success": True, "server": server, "tools": briefs})
        return json_result(
            {
                "success": False,
                "error": f"Server '{server}' not found",
                "available_servers": [*router.server_names(), *remote_names],
            },
            is_error=True,
        )

    @reg.tool(
        description="The full input schema of one tool of a server or toolset (from list_tools).",
        annotations=READ_ONLY,
    )
    async def get_tool_schema(
        server_name: Annotated[str, Field(description="server or toolset name")],
        tool_name: Annotated[str, Field(description="tool name")],
    ) -> CallToolResult:
        router = deps.router
        remote = downstream(deps)
        if router.canonical(server_name) is not None:
            try:
                tool = next((t for t in router.tools_of(server_name) if t.name == tool_name), None)
            except RelayError as err:
                return _failure(err, server=server_name)
            if tool is None:
                available = [t.name for t in router.tools_of(server_name)]
                return json_result(
                    {
                        "success": False,
                        "server": server_name,
                        "error": f"Tool '{tool_name}' not found on '{server_name}'. Available: {', '.join(available)}",
                        "available_tools": available,
                    },
                    is_error=True,
                )
            out = {"name": tool.name, "description": tool.description, "inputSchema": tool.input_schema}
            return json_result({"success": True, "server": server_name, "tool": out})
        if remote is not None and server_name in remote.names():
            try:
                tools = await remote.list_tools(server_name)
            except RelayError as err:
                return _failure(err, server=server_name)
            found = next((t for t in tools if t["name"] == tool_name), None)
            if found is None:
                available = [str(t["name"]) for t in tools]
                return json_result(
                    {
                        "success": False,
                        "server": server_name,
                        "error": f"Tool '{tool_name}' not found on '{server_name}'. Available: {', '.join(available)}",
                        "available_tools": available,
                    },
                    is_error=True,
                )
            out = {
                "name": found["name"],
                "description": found.get("description", ""),
                "inputSchema": found.get("inputSchema", {}),
            }
            return json_result({"success": True, "server": server_name, "tool": out})
        return json_result(
            {
                "success": False,
                "error": f"Server '{server_name}' not found",
                "available_servers": [*router.server_names(), *(remote.names() if remote else [])],
            },
            is_error=True,
        )

    @reg.tool(
        description="Call a tool of any relay toolset (zen, tasks/gobby-tasks, profiles...) or downstream MCP server "
        "by name: returns {success, result}.",
    )
    async def call_tool(
        ctx: Context[Any, Any],
        server_name: Annotated[str, Field(description="server or toolset name, e.g. zen, gobby-tasks")],
        tool_name: Annotated[str, Field(description="the tool to call")],
        arguments: Annotated[dict[str, Any] | None, Field(description="the tool's arguments")] = None,
    ) -> CallToolResult:
        router = deps.router
        remote = downstream(deps)
        args = arguments or {}
        if router.canonical(server_name) is not None:
            result = await router.call(server_name, tool_name, args, ctx)
            structured: dict[str, Any] | None = result.structured_content
            payload: Any = structured
            if structured is None:
                payload = "\n".join(getattr(c, "text", "") for c in result.content)
            if result.is_error:
                err: Any = structured.get("error") if structured is not None else None
                error = RelayError.from_dict(cast(dict[str, Any], err)) if isinstance(err, dict) else None
                out: dict[str, Any] = {
                    "success": False,
                    "server": server_name,
                    "tool": tool_name,
                    "error": error.message if error else str(payload),
                    "error_type": error.code.value if error else "ToolError",
                }
                if error and error.hint:
                    out["hint"] = error.hint
                if structured is not None and set(structured) != {"error"}:
                    out["result"] = structured
                return json_result(out, is_error=True)
            return json_result({"success": True, "result": payload})
        if remote is not None and server_name in remote.names():
            try:
                downstream_result = await remote.call_tool(server_name, tool_name, args)
            except RelayError as err:
                return _failure(err, server=server_name, tool=tool_name)
            return json_result({"success": True, "result": downstream_result})
        return json_result(
            {
                "success": False,
                "server": server_name,
                "error": f"Server '{server_name}' not found",
                "available_servers": [*router.server_names(), *(remote.names() if remote else [])],
            },
            is_error=True,
        )


TOOLSET = Toolset(
    name="gateway",
    description="one entry to every relay toolset and downstream MCP server: list, inspect and call their tools",
    build=build,
)
