"""A test-only MCP server for the official conformance suite's tasks scenarios.

It is built from relay's pieces (the tasks extension, the job engine, the toolset registry) plus the
fixture tools the suite calls by name (greet, slow_compute, failing_job, protocol_error_job,
confirm_delete, multi_input, test_tool_with_task). These tools are never part of relay's toolsets,
but ask for client input the way any relay tool does (the SDK's `InputRequiredResult` from the
body, `Resolve(...)` parameters), and the tasks extension serves them like relay's own.

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
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, InputRequiredResult, TextContent
from mcp.types import Tool as MCPTool
from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitResult
from mcp_types.jsonrpc import INTERNAL_ERROR
from pydantic import BaseModel, Field

from relay.config import load_settings
from relay.jobs.engine import Engine
from relay.server.app import EngineHolder
from relay.server.catalog import Catalog
from relay.server.tasks_ext import TasksExtension
from relay.server.toolsets import resolve_exposure
from relay.server.toolsets._registry import Deps, RegisteredTool, ToolRegistry

TASK_TOOLS = (
    "slow_compute",
    "failing_job",
    "protocol_error_job",
    "confirm_delete",
    "multi_input",
    "test_tool_with_task",
)
REQUIRED = frozenset({"failing_job", "test_tool_with_task"})


class UserName(BaseModel):
    name: str = Field(description="your name")


def ask_user_name() -> Elicit[UserName]:
    """The resolver of test_tool_with_task's `user_name`: asked before the task exists."""
    return Elicit("What is your name?", UserName)


def elicit(message: str, field: str, kind: str) -> ElicitRequest:
    schema = {"type": "object", "properties": {field: {"type": kind}}, "required": [field]}
    return ElicitRequest(params=ElicitRequestFormParams(message=message, requested_schema=schema))


def answer(ctx: Context[Any, Any], key: str) -> ElicitResult | None:
    found = (ctx.input_responses or {}).get(key)
    return found if isinstance(found, ElicitResult) else None


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

    @reg.tool(description="Ask the client to confirm (one elicitation), then delete or keep the file.")
    async def confirm_delete(ctx: Context[Any, Any], filename: str = "") -> CallToolResult | InputRequiredResult:
        confirmed = answer(ctx, "confirm")
        if confirmed is None:
            return InputRequiredResult(input_requests={"confirm": elicit(f"Delete {filename}?", "confirm", "boolean")})
        if confirmed.action == "accept" and (confirmed.content or {}).get("confirm") is True:
            return text(f"deleted {filename}")
        return text(f"kept {filename} ({confirmed.action})")

    @reg.tool(description="Ask the client two things at once (two elicitations), then answer with both.")
    async def multi_input(ctx: Context[Any, Any]) -> CallToolResult | InputRequiredResult:
        name, confirm = answer(ctx, "name"), answer(ctx, "confirm")
        if name is None or confirm is None:
            return InputRequiredResult(
                input_requests={
                    "name": elicit("Your name?", "name", "string"),
                    "confirm": elicit("Go ahead?", "confirm", "boolean"),
                }
            )
        given = (name.content or {}).get("name")
        go = (confirm.content or {}).get("confirm")
        return text(f"done: name={given} confirm={go}")

    @reg.tool(description="Ask the caller's name before the work starts, then greet them from a task.")
    async def test_tool_with_task(user_name: Annotated[UserName, Resolve(ask_user_name)]) -> CallToolResult:
        await anyio.sleep(0.2)
        return text(f"Hello, {user_name.name}! (from a task)")

    return reg


class FixtureHost:
    """The catalog's part the tasks extension uses: the fixture tools, run by relay's own catalog."""

    def __init__(self, reg: ToolRegistry, catalog: Catalog) -> None:
        self.exposed: dict[str, RegisteredTool] = reg.tools
        self.catalog = catalog

    async def run(
        self,
        registered: RegisteredTool,
        arguments: dict[str, Any],
        ctx: Context[Any, Any] | None,
        *,
        via: str | None = None,
    ) -> CallToolResult | InputRequiredResult:
        return await self.catalog.run(registered, arguments, ctx, via=via)


class FixtureServer(MCPServer[Any]):
    host: FixtureHost

    async def list_tools(self) -> list[MCPTool]:
        return [
            MCPTool(name=t.name, description=t.description, input_schema=t.input_schema)
            for t in self.host.exposed.values()
        ]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        return await self.host.run(self.host.exposed[name], arguments, context)


def build_fixture_server(relay_home: Path) -> FixtureServer:
    settings = load_settings({"RELAY_HOME": str(relay_home), "PATH": os.environ.get("PATH", "")}, cwd=relay_home)
    holder = EngineHolder()
    deps = Deps(settings, holder.get, time.time())
    host = FixtureHost(fixture_tools(), Catalog(deps, resolve_exposure(settings.toolsets, settings.profile)))

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
        required=REQUIRED,
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
