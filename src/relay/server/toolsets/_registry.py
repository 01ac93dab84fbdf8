"""The frame every toolset plugs into: a toolset registers tools; the frame shapes and strictly checks them."""

from __future__ import annotations

import difflib
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, cast

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from mcp.types import CallToolResult, ToolAnnotations

from relay.config import Settings
from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine

# What each tool really does, for clients that approve reads without asking (MCP tool annotations).
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
"""Reads relay's own state (jobs, threads, tasks, config) and changes nothing."""
READS_OUTSIDE = ToolAnnotations(read_only_hint=True, open_world_hint=True)
"""Changes nothing, but reaches outside relay (a model API, a downstream server, the web)."""
WRITES_STATE = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)
"""Adds to relay's own records (a task, a server entry, a hook) without destroying anything."""
DESTROYS_STATE = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)
"""Removes or stops something of relay's own (cancel a job, delete a task, remove a server)."""
WRITES_FROM_OUTSIDE = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True
)
"""Adds to relay's own records from something outside (a model's answer, a repository, a registry)."""
RUNS_AGENT = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True)
"""Runs an agent, code or a downstream tool that may change files or the outside world."""

# The JSON schema of the `error` member every published output schema admits (see `publish_output_schema`).
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"code": {"type": "string"}, "message": {"type": "string"}, "hint": {"type": "string"}},
    "required": ["code", "message"],
}

UnknownArgument = Callable[[str, list[str], list[str]], RelayError]
"""Builds the error for unknown argument names: (tool name, unknown names, valid names) -> RelayError."""

ErrorShape = Callable[[RelayError], CallToolResult]
"""A profile's error shape: relay's error as the error result the profile's seed gives."""

_F = TypeVar("_F", bound=Callable[..., Awaitable[Any]])
_T = TypeVar("_T")


class Router(Protocol):
    """What the discovery tools reach: every toolset (exposed or not) by name, alias or profile."""

    def server_names(self) -> list[str]: ...

    def tools_of(self, server: str) -> list[RegisteredTool]: ...

    def canonical(self, server: str) -> str | None: ...

    async def call(
        self, server: str, tool: str, arguments: dict[str, Any], ctx: Context[Any, Any] | None
    ) -> CallToolResult: ...


@dataclass
class RegisteredTool:
    """One tool of a toolset: the SDK's tool plus what the frame publishes and checks."""

    tool: Tool
    toolset: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    unknown_argument: UnknownArgument | None = None
    # The published schema is checked before the tool runs (relay's own toolsets); a compat profile's tools
    # keep the seed system's own checks and messages instead.
    schema_first: bool = True
    _validator: Any = field(default=None, init=False, repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.tool.name

    @property
    def description(self) -> str:
        return self.tool.description

    @property
    def via(self) -> str:
        """What the jobs this tool submits record as where they came from: "core/delegate", "zen/consensus"."""
        return f"{self.toolset}/{self.name}"

    def valid_arguments(self) -> list[str]:
        return list(self.input_schema.get("properties", {}))

    def schema_error(self, arguments: dict[str, Any]) -> RelayError | None:
        """INVALID_ARGUMENT when `arguments` break the published input schema, else None.

        The schema is the contract a client reads, so it decides, before the tool's own (more lenient)
        validation could turn "5" into 5 or true into 1. One rule on top: an explicit null for an
        optional argument whose default is null is the same as leaving it out (the schema publishes
        such arguments as their plain type, see `strict_input_schema`).
        """
        if self._validator is None:
            from jsonschema import Draft202012Validator

            self._validator = Draft202012Validator(self.input_schema)
        props: dict[str, Any] = self.input_schema.get("properties", {})
        required = set(self.input_schema.get("required", []))
        checked = {
            k: v
            for k, v in arguments.items()
            if not (v is None and k not in required and isinstance(props.get(k), dict) and "default" not in props[k])
        }
        problems: list[str] = []
        for error in sorted(self._validator.iter_errors(checked), key=lambda e: [str(p) for p in e.path])[:5]:
            where = ".".join(str(p) for p in error.path) or "arguments"
            text = f"{where}: {error.message}"
            schema: Any = error.schema
            spec = cast("dict[str, Any]", schema) if isinstance(schema, dict) else {}
            enum: list[Any] = spec.get("enum") or []
            allowed = [v for v in enum if isinstance(v, str)]
            if allowed and isinstance(error.instance, str):
                near = did_you_mean(error.instance, allowed)
                text += f" ({near})" if near else ""
            problems.append(text[:300])
        if not problems:
            return None
        return RelayError(
            ErrorCode.INVALID_ARGUMENT,
            f"invalid arguments for {self.name}: {'; '.join(problems)}",
            "fix the arguments as the tool's input schema (in tools/list) describes",
        )


class Deps:
    """What a toolset's tools reach at call time; one per server."""

    def __init__(self, settings: Settings, engine: Callable[[], Engine], started: float) -> None:
        self.settings = settings
        self.engine = engine
        self.started = started
        self._services: dict[str, Any] = {}
        self._closers: list[Callable[[], Awaitable[None]]] = []
        self._router: Router | None = None
        # Filled in by the server: the HTTP port it serves on (None on stdio) and the toolsets it exposes.
        self.port: int | None = None
        self.exposed_toolsets: list[str] = []
        # True while docs/tools.md is generated: tools that exist only on some machines are built too.
        self.documenting = False

    @property
    def router(self) -> Router:
        if self._router is None:
            raise RelayError(ErrorCode.INTERNAL, "relay's tool router is not set up", "restart relay")
        return self._router

    def set_router(self, router: Router) -> None:
        self._router = router

    def service(self, key: str, factory: Callable[[], _T]) -> _T:
        """A per-server singleton (a connection pool, a store), created on first use."""
        if key not in self._services:
            self._services[key] = factory()
        return self._services[key]

    def existing_service(self, key: str) -> Any | None:
        return self._services.get(key)

    def on_close(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run `fn` when the server shuts down (newest first)."""
        self._closers.append(fn)

    async def close(self) -> None:
        while self._closers:
            fn = self._closers.pop()
            try:
                await fn()
            except Exception:  # one service failing to close must not keep the others open
                continue


class _AsPublished(FuncMetadata):
    """The SDK's argument validation without its pre-parse of JSON text inside strings.

    The published schema is checked first (`RegisteredTool.schema_error`), so a string reaching
    validation is one the schema wants as a string: "[1]" given as a system prompt stays that text.
    """

    def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
        return data


class _AsTyped(_AsPublished):
    """Validation that takes each argument as the JSON type the published schema names (a compat profile's tools).

    A profile's tools keep their seed system's own checks and messages, so no schema check runs first;
    instead nothing is coerced: "5" is not an integer, true is not 1, 0 is not false, and JSON text
    inside a string stays a string, as the published schema says.
    """

    def validate_arguments(self, arguments_to_validate: dict[str, Any]) -> dict[str, Any]:
        parsed = self.arg_model.model_validate_json(json.dumps(arguments_to_validate), strict=True)
        return parsed.model_dump_one_level()


class ToolRegistry:
    """Collects one toolset's tools: `@reg.tool(...)` on an async function, like `MCPServer.tool`."""

    def __init__(self, toolset: str, *, schema_first: bool = True) -> None:
        self.toolset = toolset
        self.schema_first = schema_first
        self.tools: dict[str, RegisteredTool] = {}

    def tool(
        self,
        name: str | None = None,
        *,
        description: str,
        annotations: ToolAnnotations | None = None,
        title: str | None = None,
        publish_output: bool = False,
        unknown_argument: UnknownArgument | None = None,
    ) -> Callable[[_F], _F]:
        def register(fn: _F) -> _F:
            tool_name = name or fn.__name__
            tool = Tool.from_function(
                fn,
                name=tool_name,
                title=title or default_title(tool_name),
                description=description,
                annotations=annotations,
            )
            if tool.name in self.tools:
                raise ValueError(f"toolset {self.toolset} defines {tool.name} twice")
            metadata = _AsPublished if self.schema_first else _AsTyped
            tool.fn_metadata = metadata.model_construct(**dict(tool.fn_metadata))
            output = tool.output_schema
            self.tools[tool.name] = RegisteredTool(
                tool=tool,
                toolset=self.toolset,
                input_schema=strict_input_schema(tool.parameters),
                output_schema=publish_output_schema(output) if publish_output and output else None,
                unknown_argument=unknown_argument,
                schema_first=self.schema_first,
            )
            return fn

        return register


def default_title(name: str) -> str:
    """A tool's human title from its name: `job_status` -> "Job status", `getToolSchema` -> "Get tool schema"."""
    words = "".join(f" {c.lower()}" if c.isupper() else c for c in name).replace("_", " ").replace("-", " ").split()
    text = " ".join(words)
    return text[:1].upper() + text[1:]


@dataclass(frozen=True)
class Toolset:
    """A named group of tools defined in one module; `build` registers them."""

    name: str
    description: str
    build: Callable[[ToolRegistry, Deps], None]
    aliases: tuple[str, ...] = field(default=())
    # Run once the engine is up, when the toolset is exposed (a profile's own set-up, e.g. where its views go).
    on_start: Callable[[Engine, Deps], None] | None = None
    # Under the profile of this name, every exposed tool's error result passes through this (the seed's envelope;
    # `seed_errors(shape)` builds it from the profile's error shape). None: relay's own `{"error": {...}}`.
    error_envelope: Callable[[CallToolResult], CallToolResult] | None = None


def seed_errors(shape: ErrorShape) -> Callable[[CallToolResult], CallToolResult]:
    """A profile's `error_envelope` from its error shape: one shape for argument and runtime errors alike.

    Every error result in relay's own shape (argument errors, an unknown tool, a tool's own RelayError) is
    answered in `shape`; one the tool already gave in another shape (the seed's) is kept as it is.
    """

    def envelope(result: CallToolResult) -> CallToolResult:
        err = relay_error_in(result)
        return result if err is None else shape(err)

    return envelope


def relay_error_in(result: CallToolResult) -> RelayError | None:
    """The error of an error result in relay's own shape (or with no structured content at all), else None."""
    data = result.structured_content
    if data is None:
        text = " ".join(str(getattr(c, "text", "")) for c in result.content).strip()
        return RelayError(ErrorCode.INTERNAL, text or "the tool failed", "report this as a relay bug")
    raw: Any = data.get("error")
    if isinstance(raw, dict) and "code" in raw:
        return RelayError.from_dict(cast(dict[str, Any], raw))
    return None


def compact_schema(node: Any, output: bool = False) -> Any:
    """A JSON schema without what costs the calling model tokens and tells it nothing.

    Drops pydantic's generated `title`s and folds `anyOf: [{type: T}, {type: null}]` into
    `type: [T, "null"]` (adding `null` to an `enum`, so a `null` default stays valid).
    """
    if isinstance(node, list):
        return [compact_schema(v, output) for v in node]  # pyright: ignore[reportUnknownVariableType]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():  # pyright: ignore[reportUnknownVariableType]
        if key == "title" and isinstance(value, str):
            continue
        if output and key in ("default", "description"):
            continue  # the values the server sends explain themselves; the input schema is what guides a model
        if key == "properties" and isinstance(value, dict):
            out[key] = {k: compact_schema(v, output) for k, v in value.items()}  # pyright: ignore[reportUnknownVariableType]
            continue
        out[str(key)] = compact_schema(value, output)  # pyright: ignore[reportUnknownArgumentType]
    variants = out.get("anyOf")
    if isinstance(variants, list) and len(variants) == 2 and {"type": "null"} in variants:  # pyright: ignore[reportUnknownArgumentType]
        others: list[Any] = [v for v in variants if v != {"type": "null"}]  # pyright: ignore[reportUnknownVariableType]
        other: dict[str, Any] = others[0] if isinstance(others[0], dict) else {}  # pyright: ignore[reportUnknownVariableType]
        if isinstance(other.get("type"), str) and set(other) <= {"type", "enum", "format", "items"}:
            del out["anyOf"]
            out.update(other)  # pyright: ignore[reportUnknownArgumentType]
            out["type"] = [other["type"], "null"]
            if isinstance(other.get("enum"), list):
                out["enum"] = [*other["enum"], None]
    return out


def strict_input_schema(parameters: dict[str, Any]) -> dict[str, Any]:
    """The published input schema: compact, closed to arguments it does not name, optional ones not nullable.

    An optional argument whose default is null is published as its plain type with no default: leaving
    it out means null (the validator still accepts an explicit null). This is shorter for the calling
    model and avoids `type` arrays, which some clients' function-declaration formats reject.
    """
    schema: dict[str, Any] = compact_schema(parameters)
    required: list[str] = schema.get("required", [])
    properties: dict[str, dict[str, Any]] = schema.get("properties", {})
    for name, spec in properties.items():
        if name in required or spec.get("default", None) is not None:
            continue
        kind: Any = spec.get("type")
        if isinstance(kind, list) and len(kind) == 2 and "null" in kind:  # pyright: ignore[reportUnknownArgumentType]
            spec["type"] = kind[0] if kind[1] == "null" else kind[1]  # pyright: ignore[reportUnknownVariableType]
            spec.pop("default", None)
            enum: Any = spec.get("enum")
            if isinstance(enum, list):
                spec["enum"] = [v for v in enum if v is not None]  # pyright: ignore[reportUnknownVariableType]
    schema["additionalProperties"] = False
    return schema


def publish_output_schema(output: dict[str, Any]) -> dict[str, Any]:
    """The published output schema: the result's shape, or the error form `{"error": {...}}` every tool may return."""
    schema: dict[str, Any] = compact_schema(output, output=True)
    props: dict[str, Any] = schema.setdefault("properties", {})
    props.setdefault("error", ERROR_SCHEMA)
    required: list[str] = schema.pop("required", [])
    if required:
        schema["anyOf"] = [{"required": required}, {"required": ["error"]}]
    return schema


# Argument names other tools use for the same thing; a caller coming from them gets pointed at relay's name.
SYNONYMS: tuple[frozenset[str], ...] = (
    frozenset({"cwd", "working_directory", "workdir", "work_dir", "workfolder", "directory", "dir", "folder", "path"}),
    frozenset({"prompt", "message", "query", "question", "task", "instructions", "input", "text"}),
    frozenset({"timeout_s", "timeout", "timeout_ms", "timeout_seconds", "timeout_sec"}),
    frozenset({"session_id", "session", "resume", "resume_session_id", "thread_id", "conversation_id"}),
    frozenset({"continuation_id", "thread", "conversation"}),
    frozenset({"agent", "cli", "cli_name", "provider", "backend"}),
    frozenset({"system_prompt", "system", "system_message", "instructions"}),
    frozenset({"permission", "permissions", "sandbox", "approval_policy", "permission_mode"}),
    frozenset({"job_id", "id", "task_id", "agent_id"}),
    frozenset({"server_name", "server", "server_id"}),
    frozenset({"tool_name", "tool", "name"}),
    frozenset({"arguments", "args", "params", "parameters", "input"}),
)


def closest(name: str, candidates: Sequence[str], n: int = 3) -> list[str]:
    """The candidates nearest to `name`, best first (synonyms, typos, names that contain one another)."""
    key = _snake(name)
    flat = key.replace("_", "")
    words = [w for w in key.split("_") if len(w) >= 3]
    groups = [g for g in SYNONYMS if key in g or flat in g or any(w in g for w in words)]
    found = list(dict.fromkeys(c for g in groups for c in candidates if _snake(c) in g and c != name))
    found += [c for c in difflib.get_close_matches(name, list(candidates), n=n, cutoff=0.5) if c not in found]
    lowered = name.lower().replace("-", "_")
    for cand in candidates:
        c = cand.lower()
        if cand not in found and len(lowered) >= 3 and (lowered in c or c in lowered):
            found.append(cand)
    if not found:
        parts = set(lowered.split("_"))
        found = [c for c in candidates if parts & set(c.lower().split("_"))][:n]
    return found[:n]


def _snake(name: str) -> str:
    """workingDirectory, working-directory, Working_Directory -> working_directory."""
    spaced = "".join(f"_{c}" if c.isupper() else c for c in name).lower().replace("-", "_")
    return "_".join(part for part in spaced.split("_") if part)


def did_you_mean(name: str, candidates: Sequence[str]) -> str:
    near = closest(name, candidates)
    return f"did you mean {' or '.join(f'`{c}`' for c in near)}?" if near else ""


def did_you_mean_first(name: str, candidates: Sequence[str]) -> str:
    """`did you mean `x`? ` (with the trailing space) to start a hint, when a candidate is close; else nothing."""
    near = did_you_mean(name, candidates)
    return f"{near} " if near else ""


def unknown_argument_error(tool: str, unknown: list[str], valid: list[str]) -> RelayError:
    """The default error for argument names a tool does not have, naming the closest valid ones."""
    first = unknown[0]
    names = ", ".join(f"`{u}`" for u in unknown)
    verb = "is not an argument" if len(unknown) == 1 else "are not arguments"
    suggestion = did_you_mean(first, valid)
    message = f"{names} {verb} of {tool}" + (f"; {suggestion}" if suggestion else "")
    return RelayError(
        ErrorCode.INVALID_ARGUMENT,
        message,
        f"{tool} takes: {', '.join(valid) or 'no arguments'}",
    )
