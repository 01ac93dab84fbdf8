"""A test-only MCP server for the official conformance suite's tasks scenarios.

It is built from relay's pieces (the tasks extension, the job engine, the toolset registry) plus the
fixture tools the suite calls by name (greet, slow_compute, failing_job, protocol_error_job,
confirm_delete, multi_input, test_tool_with_task). These tools are never part of relay's toolsets.

    python -m tests.server.tasks_fixture PORT RELAY_HOME
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent
from mcp.types import Tool as MCPTool
from mcp_types.jsonrpc import INTERNAL_ERROR
from pydantic import Field

from relay.config import load_settings
from relay.jobs.engine import Engine
from relay.server.app import EngineHolder
from relay.server.tasks_ext import TasksExtension
from relay.server.toolsets._registry import Deps, RegisteredTool, ToolRegistry

TASK_TOOLS = ("slow_compute", "failing_job", "protocol_error_job", "confirm_delete", "multi_input")


def text(value: str, is_error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=value)], is_error=is_error)


def fixture_tools() -> ToolRegistry:
    reg = ToolRegistry("fixtures")

    @reg.tool(description="Say hello (runs synchronously).")
    async def greet(name: Annotated[str, Field(description="who")]) -> CallToolResult:
        return text(f"Hello, {name}!")

    @reg.tool(description="Sleep `seconds`, then answer (a task for clients that opt in).")
    async def slow_compute(
        seconds: Annotated[float, Field(ge=0)] = 1, label: Annotated[str, Field(description="tag")] = ""
    ) -> CallToolResult:
        await anyio.sleep(seconds)
        return text(f"computed {label} after {seconds}s")

    @reg.tool(description="Fail as a tool after about a second (task only).")
    async def failing_job() -> CallToolResult:
        await anyio.sleep(1)
        return text("the job failed", is_error=True)

    @reg.tool(description="Fail at the protocol level.")
    async def protocol_error_job() -> CallToolResult:
        await anyio.sleep(0.2)
        raise MCPError(code=INTERNAL_ERROR, message="protocol_error_job crashed")

    @reg.tool(description="Would ask for confirmation; relay's jobs never wait on client input.")
    async def confirm_delete(filename: str = "") -> CallToolResult:
        return text(f"deleted {filename}")

    @reg.tool(description="Would ask for two inputs; relay's jobs never wait on client input.")
    async def multi_input() -> CallToolResult:
        return text("done")

    return reg


class FixtureHost:
    """The catalog's part the tasks extension uses, over the fixture tools."""

    def __init__(self, reg: ToolRegistry) -> None:
        self.exposed: dict[str, RegisteredTool] = reg.tools

    async def run(
        self, registered: RegisteredTool, arguments: dict[str, Any], ctx: Context[Any, Any] | None
    ) -> CallToolResult:
        try:
            value = await registered.tool.run(arguments, ctx if ctx is not None else Context())
        except ToolError as exc:
            return text(str(exc), is_error=True)
        assert isinstance(value, CallToolResult)
        return value


class FixtureServer(MCPServer[Any]):
    host: FixtureHost

    async def list_tools(self) -> list[MCPTool]:
        return [
            MCPTool(name=t.name, description=t.description, input_schema=t.input_schema)
            for t in self.host.exposed.values()
        ]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult:
        return await self.host.run(self.host.exposed[name], arguments, context)


def build_fixture_server(relay_home: Path) -> FixtureServer:
    settings = load_settings({"RELAY_HOME": str(relay_home), "PATH": os.environ.get("PATH", "")}, cwd=relay_home)
    holder = EngineHolder()
    deps = Deps(settings, holder.get, time.time())
    host = FixtureHost(fixture_tools())

    @asynccontextmanager
    async def lifespan(_: MCPServer[Any]) -> AsyncGenerator[dict[str, Any]]:
        engine = Engine(settings)
        async with engine.running():
            holder.engine = engine
            try:
                yield {}
            finally:
                holder.engine = None
                await deps.close()

    tasks = TasksExtension(
        deps,
        lambda: host,
        task_tools={("fixtures", name): "call" for name in TASK_TOOLS},
        required=frozenset({"failing_job"}),
    )
    server = FixtureServer("relay-tasks-fixture", lifespan=lifespan, extensions=[tasks])
    server.host = host
    return server


def main() -> None:
    import uvicorn

    port, home = int(sys.argv[1]), Path(sys.argv[2])
    app = build_fixture_server(home).streamable_http_app(host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
