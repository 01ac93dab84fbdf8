"""Toolset `gateway` (seed 003's direct tools): reach every toolset and downstream MCP server through one entry.

The discovery tools `list_tools`, `get_tool_schema` and `call_tool` answer in seed 003's shapes
(`{success, ...}`); they route a name to relay's own toolsets (and their aliases and profiles) first,
then to the downstream servers the gateway (`relay.gateway`) manages. The management tools
(`list_mcp_servers`, `add_mcp_server`, `remove_mcp_server`, `import_mcp_server`,
`read_mcp_resource`) and `recommend_tools` are thin calls into the same core.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, cast

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult
from pydantic import Field

from relay.errors import ErrorCode, RelayError
from relay.gateway import Gateway, Limits, ServerRegistry, project_of
from relay.gateway.admin import ServerPermit, add_server, added_reply, remove_server, server_permit, try_server
from relay.gateway.discover import DEFAULT_REGISTRY_URL
from relay.gateway.imports import import_servers
from relay.gateway.rerank import Reranker, Reranking, engine_asker, rerank_config
from relay.gateway.search import Ranked, ToolDoc, catalog_version, rank, template_recommendation
from relay.server.results import clip, json_result
from relay.server.toolsets import BUILTIN
from relay.server.toolsets._kept import keep_result
from relay.server.toolsets._registry import (
    DESTROYS_STATE,
    READ_ONLY,
    RUNS_AGENT,
    WRITES_FROM_OUTSIDE,
    WRITES_STATE,
    Deps,
    ToolRegistry,
    Toolset,
    did_you_mean_first,
)

# list_tools shows this much of each tool's description (seed 003's "brief").
BRIEF_CHARS = 100
# recommend_tools: how many ranked tools the reply carries.
RECOMMEND_LIMIT = 10
# Seed 003 names the exception class; relay's codes that have a seed equivalent use it.
SEED_ERROR_TYPES = {ErrorCode.TIMEOUT: "TimeoutError", ErrorCode.INVALID_ARGUMENT: "ValueError"}
# Seed 003 routes names with this prefix to its internal servers (gobby-tasks, ...).
INTERNAL_PREFIX = "gobby-"


def gateway_service(deps: Deps) -> Gateway:
    """The gateway of this relay process: one per server, closed (with every downstream server) at shutdown."""

    def make() -> Gateway:
        settings = deps.settings
        registry = ServerRegistry(settings.db_path, settings.home)
        gateway = Gateway(registry, settings.home, project_of(Path.cwd()), Limits.from_environ(settings.environ))

        async def close() -> None:
            try:
                await gateway.aclose()
            finally:
                registry.close()

        deps.on_close(close)
        return gateway

    return deps.service("gateway", make)


def _brief(description: str | None) -> str:
    return (description or "").strip()[:BRIEF_CHARS]


def _failure(error: RelayError, **extra: Any) -> CallToolResult:
    body = {**extra, "error": error.message, "error_type": SEED_ERROR_TYPES.get(error.code, error.code.value)}
    return _seed_failure(body, error.code, error.hint)


def _seed_failure(body: dict[str, Any], code: ErrorCode, hint: str) -> CallToolResult:
    """A failure in seed 003's shape (`success: false`, `error`, `error_type`) that also carries relay's code and hint."""
    error_type = body.get("error_type") or SEED_ERROR_TYPES.get(code, code.value)
    return json_result(
        {"success": False, **body, "error_type": error_type, "code": code.value, "hint": hint}, is_error=True
    )


def _internal_not_found(wanted: str, internal: list[str]) -> CallToolResult:
    """Seed 003's answer for a `gobby-` name no internal server has, with relay's hint after it."""
    return _seed_failure(
        {"server": wanted, "error": f"Internal server '{wanted}' not found", "available_internal_servers": internal},
        ErrorCode.SERVER_NOT_FOUND,
        did_you_mean_first(wanted, internal) + f"relay's internal servers: {', '.join(internal)}",
    )


def _wire(model: Any) -> dict[str, Any]:
    """A downstream result as it came on the wire (camelCase, nothing added)."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def _params(schema: dict[str, Any] | None) -> list[str]:
    properties = (schema or {}).get("properties")
    return [str(k) for k in properties] if isinstance(properties, dict) else []  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]


def reranker_service(deps: Deps) -> Reranker:
    """The process's model reranker for recommend_tools (its cache lives as long as the server)."""
    return deps.service("tool_reranker", Reranker)


async def _reranked(deps: Deps, task: str, docs: list[ToolDoc]) -> tuple[list[Ranked], str, Reranking | None]:
    """The ranked tools and the recommendation: by the keyword search, reordered by a model when one is configured."""
    config = rerank_config(deps.settings)
    top = rank(task, docs, max(RECOMMEND_LIMIT, config.candidates) if config.model else RECOMMEND_LIMIT)
    if config.model is None or not top:
        return top, template_recommendation(task, top), None
    result = await reranker_service(deps).rerank(
        task, top, catalog_version(docs), config, engine_asker(deps.engine(), config.timeout_s)
    )
    best = result.tools[:RECOMMEND_LIMIT]
    return best, result.recommendation or template_recommendation(task, best), result


def _load_error(exc: Exception) -> str:
    return exc.message if isinstance(exc, RelayError) else f"{type(exc).__name__}: {exc}"


def _not_found(wanted: str, available: list[str], **fields: Any) -> CallToolResult:
    return _seed_failure(
        {**fields, "error": f"Server '{wanted}' not found", "available_servers": available},
        ErrorCode.SERVER_NOT_FOUND,
        did_you_mean_first(wanted, available) + f"servers: {', '.join(available)}; add one with add_mcp_server",
    )


def build(reg: ToolRegistry, deps: Deps) -> None:
    def remote_names() -> list[str]:
        return gateway_service(deps).names()

    def known(name: str) -> bool:
        return gateway_service(deps).has(name)

    def all_names() -> list[str]:
        return [*deps.router.server_names(), *remote_names()]

    def permit() -> ServerPermit:
        """A caller's stdio server is a command relay will start: a `full` action, asked through this call."""
        return server_permit(deps.settings, deps.engine().store.audit.record, gateway_service(deps).project)

    @reg.tool(
        description="Tools (name, brief) of one server or of all: relay's toolsets (zen, tasks...) and downstream "
        "MCP servers. Then get_tool_schema, call_tool.",
        annotations=READ_ONLY,
    )
    async def list_tools(
        server: Annotated[str | None, Field(description="server or toolset name; omit for all")] = None,
    ) -> CallToolResult:
        router = deps.router
        if server is None:
            servers: list[dict[str, Any]] = []
            # An alias (gobby-tasks, pal) is listed with its toolset, not as a second copy of its tools.
            aliases: dict[str, list[str]] = {}
            for name in router.server_names():
                target = router.canonical(name)
                if target is not None and target != name:
                    aliases.setdefault(target, []).append(name)
            for name in router.server_names():
                if router.canonical(name) not in (None, name):
                    continue
                named = {"name": name, **({"aliases": aliases[name]} if name in aliases else {})}
                try:
                    tools = [{"name": t.name, "brief": _brief(t.description)} for t in router.tools_of(name)]
                except Exception as exc:  # fail-open: one toolset that cannot load hides no other server
                    servers.append({**named, "tools": [], "state": "failed", "error": _load_error(exc)})
                    continue
                servers.append({**named, "tools": tools})
            for listed in await gateway_service(deps).list_tools():
                entry: dict[str, Any] = {
                    "name": listed.name,
                    "tools": [{"name": t.name, "brief": _brief(t.description)} for t in listed.tools],
                }
                if listed.error:
                    entry.update(state=listed.state, error=listed.error)
                servers.append(entry)
            return json_result({"success": True, "servers": servers})
        if router.canonical(server) is not None:
            tools_out = [{"name": t.name, "brief": _brief(t.description)} for t in router.tools_of(server)]
            return json_result({"success": True, "server": server, "tools": tools_out})
        if not known(server):
            return _not_found(server, all_names())
        try:
            [listed] = await gateway_service(deps).list_tools(server)
        except RelayError as err:
            return _failure(err, server=server)
        if listed.error:
            return _failure(RelayError(ErrorCode.UPSTREAM_ERROR, listed.error, "see list_mcp_servers"), server=server)
        briefs = [{"name": t.name, "brief": _brief(t.description) or "No description available"} for t in listed.tools]
        out: dict[str, Any] = {"success": True, "server": server, "tools": briefs}
        if listed.changed:
            out["changed_tools"] = sorted(listed.changed)
        return json_result(out)

    @reg.tool(
        description="A tool's full input schema (server and tool from list_tools).",
        annotations=READ_ONLY,
    )
    async def get_tool_schema(
        server_name: Annotated[str, Field(description="server or toolset name")],
        tool_name: Annotated[str, Field(description="tool name")],
    ) -> CallToolResult:
        router = deps.router
        if router.canonical(server_name) is not None:
            tools = router.tools_of(server_name)
            tool = next((t for t in tools if t.name == tool_name), None)
            if tool is None:
                available = [t.name for t in tools]
                return _seed_failure(
                    {
                        "server": server_name,
                        "error": f"Tool '{tool_name}' not found on '{server_name}'. Available: {', '.join(available)}",
                        "available_tools": available,
                    },
                    ErrorCode.TOOL_NOT_FOUND,
                    did_you_mean_first(tool_name, available) + f"list_tools(server='{server_name}') lists them",
                )
            out = {"name": tool.name, "description": tool.description, "inputSchema": tool.input_schema}
            return json_result({"success": True, "server": server_name, "tool": out})
        if not known(server_name):
            return _not_found(server_name, all_names())
        gateway = gateway_service(deps)
        try:
            found = await gateway.tool(server_name, tool_name)
        except RelayError as err:
            extra: dict[str, Any] = {"server": server_name}
            if err.code is ErrorCode.TOOL_NOT_FOUND:
                extra["available_tools"] = names = [t.name for t in gateway.connection(server_name).tools]
                err = RelayError(err.code, err.message, did_you_mean_first(tool_name, names) + err.hint)
            return _failure(err, **extra)
        described: dict[str, Any] = {
            "name": found.name,
            "description": found.description or "",
            "inputSchema": found.input_schema,
        }
        reply: dict[str, Any] = {"success": True, "server": server_name, "tool": described}
        if tool_name in gateway.changed(server_name):
            reply["definition_changed"] = True
        return json_result(reply)

    @reg.tool(
        description="Call a tool of any relay toolset or downstream MCP server: returns {success, result}.",
        annotations=RUNS_AGENT,
    )
    async def call_tool(
        ctx: Context[Any, Any],
        server_name: Annotated[str, Field(description="server or toolset name, e.g. zen, gobby-tasks")],
        tool_name: Annotated[str, Field(description="the tool to call")],
        arguments: Annotated[dict[str, Any] | None, Field(description="the tool's arguments")] = None,
    ) -> CallToolResult:
        router = deps.router
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
                    "server": server_name,
                    "tool": tool_name,
                    "error": error.message if error else str(payload),
                    "error_type": SEED_ERROR_TYPES.get(error.code, error.code.value) if error else "ToolError",
                }
                if structured is not None and set(structured) != {"error"}:
                    out["result"] = structured
                code = error.code if error else ErrorCode.UPSTREAM_ERROR
                return _seed_failure(
                    out, code, (error.hint if error else "") or "see result for what the tool returned"
                )
            return json_result({"success": True, "result": payload})
        if server_name.startswith(INTERNAL_PREFIX) and not known(server_name):
            return _internal_not_found(server_name, router.server_names())
        if not known(server_name):
            return _not_found(server_name, all_names(), server=server_name)
        gateway = gateway_service(deps)
        try:
            downstream = await gateway.call_tool(server_name, tool_name, args)
        except RelayError as err:
            extra: dict[str, Any] = {"server": server_name, "tool": tool_name}
            if err.code is ErrorCode.TOOL_NOT_FOUND:
                extra["available_tools"] = names = [t.name for t in gateway.connection(server_name).tools]
                err = RelayError(err.code, err.message, did_you_mean_first(tool_name, names) + err.hint)
            return _failure(err, **extra)
        bounded = gateway.bound(server_name, downstream)
        kept = await keep_result(deps.engine(), server_name, tool_name, bounded) if bounded.cut else None
        downstream = bounded.result
        wire = _wire(downstream)
        rest: dict[str, Any] = {"truncated": kept} if kept is not None else {}
        if downstream.is_error:
            text = " ".join(getattr(c, "text", "") for c in downstream.content).strip()
            return _seed_failure(
                {
                    "server": server_name,
                    "tool": tool_name,
                    "error": clip(text) or f"{tool_name} failed",
                    "error_type": "ToolError",
                    "result": wire,
                    **rest,
                },
                ErrorCode.UPSTREAM_ERROR,
                f"{server_name}'s {tool_name} reported an error: result holds what it returned",
            )
        return json_result({"success": True, "result": wire, **rest})

    @reg.tool(
        description="List the configured downstream MCP servers with their connection state.", annotations=READ_ONLY
    )
    async def list_mcp_servers() -> CallToolResult:
        return json_result({"servers": gateway_service(deps).statuses()})

    @reg.tool(description="Read a resource (by URI) from a downstream MCP server.", annotations=READ_ONLY)
    async def read_mcp_resource(
        server_name: Annotated[str, Field(description="downstream server name")],
        resource_uri: Annotated[str, Field(description="URI of the resource")],
    ) -> CallToolResult:
        if not known(server_name):
            return _not_found(server_name, remote_names())
        try:
            read = await gateway_service(deps).read_resource(server_name, resource_uri)
        except RelayError as err:
            return _failure(err, server=server_name, uri=resource_uri)
        return json_result({"success": True, "server": server_name, "uri": resource_uri, "result": _wire(read)})

    @reg.tool(
        description="Add (or replace) a downstream MCP server for the current project (scope 'global': for all). "
        "stdio needs command (+args, env); http (Streamable HTTP, SSE fallback) needs url (+headers); "
        "websocket needs a ws:// or wss:// url (+headers). "
        "env/header values are stored privately and shown as ***. Re-adding approves changed tool definitions.",
        annotations=WRITES_STATE,
    )
    async def add_mcp_server(
        name: Annotated[str, Field(description="unique server name")],
        transport: Annotated[Literal["stdio", "http", "websocket"], Field(description="stdio, http or websocket")],
        url: Annotated[str | None, Field(description="server URL, for http/websocket")] = None,
        headers: Annotated[dict[str, str] | None, Field(description="HTTP headers (stored privately)")] = None,
        command: Annotated[str | None, Field(description="command to run, for stdio")] = None,
        args: Annotated[list[str] | None, Field(description="command arguments")] = None,
        env: Annotated[dict[str, str] | None, Field(description="environment variables (stored privately)")] = None,
        enabled: Annotated[bool, Field(description="whether enabled")] = True,
        scope: Annotated[Literal["project", "global"], Field(description="this project (default) or all")] = "project",
    ) -> CallToolResult:
        gateway = gateway_service(deps)
        try:
            config = await add_server(
                gateway,
                name=name,
                transport=transport,
                scope=scope,
                url=url,
                headers=headers,
                command=command,
                args=args,
                env=env,
                enabled=enabled,
                reserved=deps.router.server_names(),
                permit=permit(),
            )
        except RelayError as err:
            return _failure(err, server=name)
        return json_result(added_reply(config, await try_server(gateway, name) if enabled else None))

    @reg.tool(
        description="Remove a downstream MCP server (the project's own, else the global one of that name).",
        annotations=DESTROYS_STATE,
    )
    async def remove_mcp_server(
        name: Annotated[str, Field(description="server name to remove")],
    ) -> CallToolResult:
        gateway = gateway_service(deps)
        if name not in gateway.names():
            return _not_found(name, gateway.names())
        try:
            removed = await remove_server(gateway, name)
        except RelayError as err:
            return _failure(err, server=name)
        return json_result({"success": True, "removed": name, "project_id": removed.scope or None})

    @reg.tool(
        description="Import MCP servers: from_project (a project directory: its .mcp.json, .cursor, .vscode, .gemini, "
        ".codex configs and relay's records), github_url (derive the launch command), or query (an MCP registry). "
        "Missing secrets come back as needs_configuration: fill them in and call add_mcp_server.",
        annotations=WRITES_FROM_OUTSIDE,
    )
    async def import_mcp_server(
        from_project: Annotated[
            str | None, Field(description="source project directory (or known project name)")
        ] = None,
        servers: Annotated[list[str] | None, Field(description="server names to import; all if omitted")] = None,
        github_url: Annotated[str | None, Field(description="git repository URL of an MCP server")] = None,
        query: Annotated[str | None, Field(description="what to search the MCP registry for")] = None,
    ) -> CallToolResult:
        gateway = gateway_service(deps)
        environ = deps.settings.environ
        try:
            result = await import_servers(
                gateway,
                from_project=from_project,
                servers=servers,
                github_url=github_url,
                query=query,
                cwd=Path.cwd(),
                environ=environ,
                registry_url=environ.get("RELAY_MCP_REGISTRY_URL") or DEFAULT_REGISTRY_URL,
                reserved=deps.router.server_names(),
                permit=permit(),
            )
        except RelayError as err:
            return _failure(err)
        return json_result(result.reply())

    @reg.tool(
        description="Recommend tools for a task: ranks every reachable tool (relay's toolsets and downstream MCP "
        "servers) by how well its name, description and parameters match, and says which to call.",
        annotations=READ_ONLY,
    )
    async def recommend_tools(
        task_description: Annotated[str, Field(description="what you are trying to accomplish")],
        agent_id: Annotated[str | None, Field(description="agent profile ID (accepted; relay has no profiles)")] = None,
    ) -> CallToolResult:
        router = deps.router
        docs: list[ToolDoc] = []
        for name in router.server_names():
            if name not in BUILTIN:
                continue
            try:
                tools = router.tools_of(name)
            except Exception:  # a toolset that cannot load is left out of the ranking, not the whole answer
                continue
            docs += [
                ToolDoc(server=name, name=t.name, description=t.description or "", params=_params(t.input_schema))
                for t in tools
            ]
        downstream = await gateway_service(deps).list_tools()
        docs += [
            ToolDoc(server=s.name, name=t.name, description=t.description or "", params=_params(t.input_schema))
            for s in downstream
            for t in s.tools
            if t.name not in s.changed
        ]
        try:
            top, advice, reranking = await _reranked(deps, task_description, docs)
        except RelayError as err:
            return _failure(err)
        reply: dict[str, Any] = {
            "success": True,
            "task": task_description,
            "recommendation": advice,
            "available_servers": list(dict.fromkeys(d.server for d in docs)),
            "total_tools": len(docs),
            "tools": [
                {
                    "server": r.doc.server,
                    "name": r.doc.name,
                    "brief": _brief(r.doc.description),
                    "score": round(r.score, 4),
                }
                for r in top
            ],
        }
        if reranking is not None:
            reply["ranking"] = reranking.summary()
        if agent_id is not None:
            reply["agent_id"] = agent_id
        return json_result(reply)


TOOLSET = Toolset(
    name="gateway",
    description="one entry to every relay toolset and downstream MCP server: list, inspect and call their tools; "
    "add, import and remove downstream servers",
    build=build,
)
