"""Every toolset relay has, built on first use: what tools/list exposes, and routing a call to any tool.

The catalog is the one place a tool call runs: it refuses unknown argument names (naming the closest
valid one), turns validation failures into INVALID_ARGUMENT with the nearest enum value, and turns any
exception a tool lets out into an error result with a code and a hint.
"""

from __future__ import annotations

import re
from typing import Any, cast

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, InputRequiredResult, TextContent
from pydantic import BaseModel, ValidationError

from relay.errors import ErrorCode, RelayError
from relay.jobs.grants import asked_by
from relay.jobs.request import submitted_via
from relay.server.confirm import Elicitor, NeedsConfirmation, Seals, SessionGrants, principal_of
from relay.server.results import error_result, json_result, model_result
from relay.server.roots import Sessionless
from relay.server.toolsets import BUILTIN, PROFILES, Exposure, load_toolset, reserved_names, toolset_aliases
from relay.server.toolsets._registry import (
    Deps,
    RegisteredTool,
    ToolRegistry,
    closest,
    did_you_mean,
    unknown_argument_error,
)
from relay.text import is_utf8


class Catalog:
    """Toolsets by name, alias and profile; the exposed tools; one guarded call path for all of them."""

    def __init__(self, deps: Deps, exposure: Exposure) -> None:
        self.deps = deps
        self.exposure = exposure
        self._built: dict[str, ToolRegistry] = {}
        self._aliases: dict[str, str] | None = None
        self.exposed: dict[str, RegisteredTool] = {}
        owners: dict[str, str] = {}
        for toolset, subset in exposure:
            tools = self.registry(toolset).tools
            if subset is not None:
                missing = sorted(subset - set(tools))
                if missing:
                    raise RelayError(
                        ErrorCode.INTERNAL,
                        f"toolset {toolset} has no tool {', '.join(missing)}",
                        "report this as a relay bug",
                    )
            for name, tool in tools.items():
                if subset is not None and name not in subset:
                    continue
                if name in owners and owners[name] != toolset:
                    raise RelayError(
                        ErrorCode.CONFIG_INVALID,
                        f"toolsets {owners[name]} and {toolset} both define a tool named {name}",
                        f"expose only one of {owners[name]} and {toolset} (--toolsets / RELAY_TOOLSETS), "
                        "and reach the other through call_tool",
                    )
                owners[name] = toolset
                self.exposed[name] = tool
        deps.exposed_toolsets = list(dict.fromkeys(t for t, _ in exposure))
        profile = deps.settings.profile
        self.error_envelope = load_toolset(profile).error_envelope if profile in BUILTIN else None
        deps.set_router(self)
        # A 2026-07-28 client's roots: asked in a call's result before the call runs (relay.server.roots).
        self.sessionless_roots = Sessionless(deps.settings, http=deps.port is not None)

    # -- toolsets by name ---------------------------------------------------------------------------

    def registry(self, toolset: str) -> ToolRegistry:
        """The built tools of a toolset (by its canonical name), building it on first use."""
        if toolset not in self._built:
            ts = load_toolset(toolset)
            reg = ToolRegistry(ts.name, schema_first=ts.name not in PROFILES)  # a profile keeps its seed's checks
            ts.build(reg, self.deps)
            self._built[ts.name] = reg
            self._built[toolset] = reg
        return self._built[toolset]

    def aliases(self) -> dict[str, str]:
        if self._aliases is None:
            self._aliases = toolset_aliases()
        return self._aliases

    def server_names(self) -> list[str]:
        """Every name call_tool answers to internally: toolsets, their aliases, profiles."""
        return reserved_names(self.aliases())

    def canonical(self, server: str) -> str | None:
        """The toolset or profile `server` names (an alias resolves to its toolset), or None."""
        if server in BUILTIN or server in PROFILES:
            return server
        return self.aliases().get(server)

    def tools_of(self, server: str) -> list[RegisteredTool]:
        name = self.canonical(server)
        if name is None:
            raise RelayError(
                ErrorCode.SERVER_NOT_FOUND,
                f"Server '{server}' not found",
                f"available: {', '.join(self.server_names())}",
            )
        if name not in PROFILES:
            return list(self.registry(name).tools.values())
        # A profile named like a toolset (gobby, zen) answers with the whole profile: what its users call.
        found: list[RegisteredTool] = []
        for toolset, subset in PROFILES[name]:
            found += [t for n, t in self.registry(toolset).tools.items() if subset is None or n in subset]
        return found

    def find(self, server: str, tool: str) -> RegisteredTool:
        tools = {t.name: t for t in self.tools_of(server)}
        if tool not in tools:
            raise RelayError(
                ErrorCode.TOOL_NOT_FOUND,
                f"Tool '{tool}' not found on '{server}'. Available: {', '.join(tools)}",
                did_you_mean(tool, list(tools)) or f"list_tools(server='{server}') lists them",
            )
        return tools[tool]

    def where(self, tool: str) -> list[str]:
        """The toolsets that define `tool` (loads every toolset: only for error messages)."""
        return [name for name in BUILTIN if tool in self.registry(name).tools]

    # -- calls ------------------------------------------------------------------------------------------

    async def call(
        self, server: str, tool: str, arguments: dict[str, Any], ctx: Context[Any, Any] | None
    ) -> CallToolResult:
        """Call `tool` of toolset/profile `server` (the path of call_tool)."""
        try:
            registered = self.find(server, tool)
        except RelayError as err:
            return error_result(err)
        result = await self.run(registered, arguments, ctx)
        if isinstance(result, InputRequiredResult):  # its answers would have to come back to call_tool
            return error_result(
                RelayError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"{tool} asks the client for input, which a call through call_tool cannot carry",
                    f"serve {tool}'s toolset (--toolsets) and call {tool} directly",
                )
            )
        return result

    async def call_exposed(
        self, name: str, arguments: dict[str, Any], ctx: Context[Any, Any] | None
    ) -> CallToolResult | InputRequiredResult:
        """Call a tool by the name tools/list shows (the path of tools/call); a profile may reshape its errors."""
        registered = self.exposed.get(name)
        asking = self.sessionless_roots.ask(ctx) if registered is not None else None
        if registered is None:
            result: CallToolResult | InputRequiredResult = error_result(self.unknown_tool(name))
        elif asking is not None:  # the client's roots first: the retry carries them, then the tool runs
            return asking
        else:
            result = await self.run(registered, arguments, ctx)
        if isinstance(result, CallToolResult) and result.is_error and self.error_envelope is not None:
            return self.error_envelope(result)
        return result

    def unknown_tool(self, name: str) -> RelayError:
        homes = [t for t in self.where(name)]
        near = closest(name, list(self.exposed))
        if homes:
            home = homes[0]
            hint = (
                f"call it through call_tool(server_name='{home}', tool_name='{name}', arguments={{...}}), "
                f"or serve with --toolsets {','.join([*self.deps.exposed_toolsets, home])}"
            )
            return RelayError(ErrorCode.TOOL_NOT_FOUND, f"Unknown tool {name!r}: it is in toolset {home!r}", hint)
        return RelayError(
            ErrorCode.TOOL_NOT_FOUND,
            f"Unknown tool {name!r}" + (f"; did you mean {' or '.join(repr(n) for n in near)}?" if near else ""),
            "list_tools lists every tool relay and its MCP servers have",
        )

    async def run(
        self,
        registered: RegisteredTool,
        arguments: dict[str, Any],
        ctx: Context[Any, Any] | None,
        *,
        via: str | None = None,
    ) -> CallToolResult | InputRequiredResult:
        """Run a tool; an `InputRequiredResult` (the tool asks the client for input, SEP-2322) passes through.

        The jobs the tool submits record `via` (default the tool's `toolset/tool`) as where they came from,
        and who asked; a job above its grant asks the person through this call's MCP session (relay.server.confirm).
        """
        valid = registered.valid_arguments()
        unknown = [k for k in arguments if k not in valid]
        if unknown:
            make = registered.unknown_argument or unknown_argument_error
            return error_result(make(registered.name, unknown, valid))
        refused = registered.schema_error(arguments) if registered.schema_first else None
        if refused is not None:
            return error_result(refused)
        remembered = self.deps.service("session_grants", SessionGrants)
        seals = self.deps.service("confirmation_seals", Seals)
        who = principal_of(ctx)
        try:
            with submitted_via(via or registered.via), asked_by(who, Elicitor(ctx, remembered, seals)):
                value = await registered.tool.run(arguments, ctx if ctx is not None else Context())
        except ToolError as exc:
            asking = _needs_confirmation(exc.__cause__)
            if asking is not None:  # the person is asked in the result; the client's retry brings the answer
                return InputRequiredResult(input_requests={asking.key: asking.request}, request_state=asking.state)
            return error_result(self._translate(registered, exc, arguments))
        return value if isinstance(value, InputRequiredResult) else as_result(value)

    def _translate(self, registered: RegisteredTool, exc: ToolError, arguments: dict[str, Any]) -> RelayError:
        cause: BaseException | None = exc.__cause__
        if isinstance(cause, ValidationError):
            return invalid_arguments(registered, cause)
        if isinstance(cause, UnicodeEncodeError) and (where := lone_surrogate(arguments)) is not None:
            return RelayError(
                ErrorCode.INVALID_ARGUMENT,
                f"{registered.name}: {where} holds a lone surrogate, which is not text (JSON allows \\ud800, UTF-8 does not)",
                f"pass {where} as text: a character outside the BMP is sent as a whole \\ud83d\\ude00 pair",
            )
        if isinstance(cause, RelayError):
            return cause
        if isinstance(cause, BaseExceptionGroup):
            inner = _first_relay_error(cause)  # pyright: ignore[reportUnknownArgumentType]
            if inner is not None:
                return inner
        if cause is not None:
            reason = f"{type(cause).__name__}: {cause!s}"  # pyright: ignore[reportUnknownArgumentType]
            return RelayError(
                ErrorCode.INTERNAL,
                f"{registered.name} failed: {reason}",
                "report this as a relay bug",
            )
        return RelayError(ErrorCode.INTERNAL, f"{registered.name} failed: {exc}", "report this as a relay bug")


def _needs_confirmation(cause: BaseException | None) -> NeedsConfirmation | None:
    """The confirmation a tool's job is waiting on (also from inside a task group's exception group)."""
    if isinstance(cause, NeedsConfirmation):
        return cause
    if isinstance(cause, BaseExceptionGroup):
        group: BaseExceptionGroup[BaseException] = cause  # pyright: ignore[reportUnknownVariableType]
        for exc in group.exceptions:
            found = _needs_confirmation(exc)
            if found is not None:
                return found
    return None


def _first_relay_error(group: BaseExceptionGroup[Any]) -> RelayError | None:
    for exc in group.exceptions:
        if isinstance(exc, RelayError):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            found = _first_relay_error(exc)  # pyright: ignore[reportUnknownArgumentType]
            if found is not None:
                return found
    return None


def lone_surrogate(value: Any, where: str = "") -> str | None:
    """Where in a tool's arguments a string holds a lone surrogate ("job_ids[0]"), or None."""
    if isinstance(value, str):
        return None if is_utf8(value) else where or "an argument"
    items: list[tuple[str, Any]] = []
    if isinstance(value, dict):
        for key, inner in cast(dict[Any, Any], value).items():
            path = f"{where}.{key}" if where else str(key)
            items += [(path, key), (path, inner)]  # a key may hold one too
    elif isinstance(value, list):
        items = [(f"{where}[{i}]", inner) for i, inner in enumerate(cast(list[Any], value))]
    for path, inner in items:
        found = lone_surrogate(inner, path)
        if found is not None:
            return found
    return None


def invalid_arguments(registered: RegisteredTool, cause: ValidationError) -> RelayError:
    """INVALID_ARGUMENT naming each bad argument, with the nearest allowed value for enums."""
    props: dict[str, Any] = registered.input_schema.get("properties", {})
    problems: list[str] = []
    for e in cause.errors()[:5]:
        loc = ".".join(str(p) for p in e["loc"]) or "arguments"
        text = f"{loc}: {e['msg']}"
        spec: dict[str, Any] = props.get(str(e["loc"][0]), {}) if e["loc"] else {}
        spec = spec.get("items", spec) if isinstance(spec.get("items"), dict) else spec
        allowed = [v for v in spec.get("enum", []) if isinstance(v, str)]
        expected = str((e.get("ctx") or {}).get("expected", ""))
        if not allowed and e["type"] in ("literal_error", "enum"):  # a nested enum: pydantic names the values
            allowed = re.findall(r"'([^']*)'", expected)
        given = e.get("input")
        if allowed and isinstance(given, str):
            suggestion = did_you_mean(given, allowed)
            if suggestion:
                text += f" ({suggestion})"
        problems.append(text)
    return RelayError(
        ErrorCode.INVALID_ARGUMENT,
        f"invalid arguments for {registered.name}: {'; '.join(problems)}",
        "fix the arguments as the tool's input schema (in tools/list) describes",
    )


def as_result(value: Any) -> CallToolResult:
    """What a tool function returned, as a tool result."""
    if isinstance(value, CallToolResult):
        return value
    if isinstance(value, BaseModel):
        return model_result(value)
    if isinstance(value, dict):
        return json_result({str(k): v for k, v in value.items()})  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    return CallToolResult(content=[TextContent(type="text", text=str(value))])
