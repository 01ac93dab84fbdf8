"""relay's MCP server: the exposed toolsets in tools/list, every call through the catalog's one guarded path."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from typing import Any

from mcp.server import MCPServer
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, CallToolResult, GetPromptResult, InputRequiredResult, NotificationParams
from mcp.types import Tool as MCPTool

from relay import __version__
from relay.config import Settings
from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine
from relay.server import roots
from relay.server.catalog import Catalog
from relay.server.resources import JobResources
from relay.server.tasks_ext import TasksExtension
from relay.server.toolsets import load_toolset, profile_grants, resolve_exposure
from relay.server.toolsets._registry import Deps
from relay.server.warmup import Warmup

# Short, and without the words of any one tool: Codex's tool_search adds the instructions to every
# tool's search text, so a word here ("delegate") would match every tool and bury the one it names.
INSTRUCTIONS = (
    "Hands work to other AI agents as durable jobs. A call that returns status 'running' gives a job_id: "
    "wait with job_wait, read long output with job_result. More tools: list_tools, get_tool_schema, call_tool."
)


class EngineHolder:
    """The engine lives in the server's lifespan; tools reach it through this holder."""

    def __init__(self) -> None:
        self.engine: Engine | None = None

    def get(self) -> Engine:
        if self.engine is None:
            raise RelayError(ErrorCode.INTERNAL, "relay's job engine is not running", "restart relay")
        return self.engine


class RelayServer(MCPServer[Any]):
    """An MCPServer whose tools come from relay's catalog of toolsets."""

    catalog: Catalog
    roots: roots.Refreshes | None = None  # set when client roots are in use
    warmup: Warmup

    async def list_tools(self) -> list[MCPTool]:
        return [
            MCPTool(
                name=t.name,
                title=t.tool.title,
                description=t.description,
                input_schema=t.input_schema,
                output_schema=t.output_schema,
                annotations=t.tool.annotations,
            )
            for t in self.catalog.exposed.values()
        ]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        if self.roots is not None:
            await self.roots.settled()
        return await self.catalog.call_exposed(name, arguments, context)

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None, context: Context[Any, Any] | None = None
    ) -> GetPromptResult | InputRequiredResult:
        # An unknown name is invalid params (-32602, as resources/read answers an unknown uri), not error code 0.
        known = [prompt.name for prompt in await self.list_prompts()]
        if name not in known:
            shown = ", ".join(known) or "none"
            raise MCPError(INVALID_PARAMS, f"Unknown prompt: {name}", {"name": name, "prompts": shown})
        return await super().get_prompt(name, arguments, context)


def build_server(
    settings: Settings, engine_factory: Callable[[Settings], Engine] = Engine, *, port: int | None = None
) -> RelayServer:
    """The MCP server exposing the configured toolsets (default: core + discovery); the engine starts in its lifespan."""
    # A full-access profile the person chose grants `full` to its own tools' jobs (relay.jobs.grants).
    settings = settings.with_(toolset_grants=profile_grants(settings.profile, settings.toolsets))
    holder = EngineHolder()
    deps = Deps(settings, holder.get, time.time())
    deps.port = port
    exposure = resolve_exposure(settings.toolsets, settings.profile)

    warmup = Warmup(settings)
    bus = InMemorySubscriptionBus()  # the 2026-07-28 push stream's fan-out (subscriptions/listen)
    job_resources = JobResources(holder.get, bus)  # a job's envelope, transcript, log and diff as resources

    @asynccontextmanager
    async def lifespan(_: MCPServer[Any]) -> AsyncGenerator[dict[str, Any]]:
        engine = engine_factory(settings)
        async with engine.running(), job_resources.running():
            engine.make_ready()
            holder.engine = engine
            for name in deps.exposed_toolsets:
                toolset = load_toolset(name)
                if toolset.on_start is not None:
                    toolset.on_start(engine, deps)
            fallback = warmup.start_later()
            try:
                yield {"engine": engine}
            finally:
                fallback.cancel()
                holder.engine = None
                await deps.close()

    tasks = TasksExtension(deps, lambda: server.catalog)  # MCP Tasks over jobs, for clients that opt in
    # WARNING, not the SDK's INFO: INFO prints a line per model-API request (httpx) on the server's stderr.
    server = RelayServer(
        "relay",
        version=__version__,
        instructions=INSTRUCTIONS,
        lifespan=lifespan,
        extensions=[tasks],
        log_level="WARNING",
        subscriptions=bus,
    )
    server.catalog = Catalog(deps, exposure)
    server.warmup = warmup
    _on_client_events(server, settings, warmup, http=port is not None)
    job_resources.install(getattr(server, "_lowlevel_server"))  # noqa: B009  (the SDK's kernel; no public handle)
    return server


def _on_client_events(server: RelayServer, settings: Settings, warmup: Warmup, *, http: bool) -> None:
    """Once the client has initialized: warm the model SDKs, and ask for its roots (again when they change)."""
    lowlevel: Any = getattr(server, "_lowlevel_server")  # noqa: B009  (the SDK's kernel; no public handle)
    refreshes = server.roots = roots.Refreshes(settings) if roots.enabled(settings, http) else None

    async def initialized(ctx: ServerRequestContext[Any, Any], _: NotificationParams) -> None:
        warmup.start()
        if refreshes is not None:
            await refreshes.refresh(ctx)

    lowlevel.add_notification_handler("notifications/initialized", NotificationParams, initialized)
    if refreshes is not None:

        async def roots_changed(ctx: ServerRequestContext[Any, Any], _: NotificationParams) -> None:
            await refreshes.refresh(ctx)

        lowlevel.add_notification_handler("notifications/roots/list_changed", NotificationParams, roots_changed)
