"""MCP Tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663) over relay's durable jobs.

A client that declares the extension (for its session, or in one request's `_meta` client
capabilities) and calls `delegate`, `ask` or a zen workflow tool gets a task at once:
`{"resultType": "task", "taskId", "status": "working", ...}`. The work is an ordinary relay job;
the task id is a random token mapped to the job id in relay.db (`mcp_tasks`, migration m009),
written before the id is returned. `tasks/get` polls (and inlines the tool result once done),
`tasks/update` delivers the client's answers to a task that is `input_required`, `tasks/cancel`
cancels the job. Every other client, and every other tool, gets the ordinary synchronous call;
the job tools (job_wait, job_result, job_cancel) stay for them.

Client input (see `relay.server.task_input`): a task tool whose `Resolve(...)` parameters need
input answers the call with `InputRequiredResult` until the client's retry carries every answer;
only then is the task created. A tool body that asks while it runs (returns `InputRequiredResult`)
parks its task in `input_required` with the open requests under `inputRequests` on `tasks/get`
until `tasks/update` answered all of them; then the tool runs its next round.

Status mapping: a queued or running job is `working` (`input_required` while its tool waits on
the client); a finished job is `completed` with the tool's result inlined, `isError` when the
job failed (a failed job is a tool result, never a protocol error); a cancelled job is
`cancelled`; `failed` (with a JSON-RPC error) is kept for a call whose result was lost, e.g. an
in-process workflow cut off by a relay restart, or a protocol-level error.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.resolve import resolve_arguments
from mcp.server.mcpserver.server import require_client_extension
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent
from mcp_types import (
    CallToolRequestParams,
    ClientCapabilities,
    InputRequiredResult,
    InputResponseRequestParams,
    RequestParams,
)
from mcp_types.jsonrpc import HEADER_MISMATCH, INTERNAL_ERROR, INVALID_PARAMS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field

from relay.errors import RelayError
from relay.events import AgentResult, Event
from relay.jobs.engine import Engine
from relay.jobs.request import submitted_via
from relay.principal import current
from relay.server.models import AskEnvelope
from relay.server.results import envelope_result, json_result
from relay.server.task_input import (
    CLIENT_CAPABILITIES_META,
    TaskContext,
    TaskInputs,
    declared_capabilities,
    missing_capability,
    wire,
)
from relay.server.toolsets._registry import Deps, RegisteredTool
from relay.store.release import connect

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"

# How often a client should poll tasks/get: relay's jobs take seconds to minutes.
POLL_INTERVAL_MS = 2000
# A tool round that asks for nothing but carries request state runs again after this (doubling, capped).
STATE_ONLY_BACKOFF_S = (0.05, 1.0)
# How long SQLite waits for a lock held by another relay process on the same RELAY_HOME.
BUSY_TIMEOUT_S = 5.0

Kind = Literal["job", "ask", "call"]
"""How a task's job was started: `job` a CLI job (delegate), `ask` a model API job, `call` a whole
tool call run as an in-process job (the zen workflows), whose result is kept in the task's row."""

# (toolset, tool) -> kind: the tools a task-augmented call turns into a task.
TASK_TOOLS: dict[tuple[str, str], Kind] = {
    ("core", "delegate"): "job",
    ("core", "ask"): "ask",
    **{("zen", name): "call" for name in ("chat", "clink", "consensus", "planner", "codereview", "debug", "thinkdeep")},
}


class ToolHost(Protocol):
    """Where tools are found and run: relay's catalog (or a test's fixture host)."""

    @property
    def exposed(self) -> dict[str, RegisteredTool]: ...

    async def run(
        self,
        registered: RegisteredTool,
        arguments: dict[str, Any],
        ctx: Context[Any, Any] | None,
        *,
        via: str | None = None,
    ) -> CallToolResult | InputRequiredResult: ...


def task_via(registered: RegisteredTool) -> str:
    """What jobs started by a task-augmented call record as where they came from: "core/delegate+task"."""
    return f"{registered.via}+task"


class TaskParams(RequestParams):
    task_id: str = Field(alias="taskId")


class UpdateTaskParams(TaskParams):
    input_responses: dict[str, Any] | None = Field(alias="inputResponses", default=None)


@dataclass(frozen=True)
class TaskRun:
    """What a task's tool runs with besides its arguments: the creating call's protocol version,
    the client's capabilities, and the input responses and request state that call carried."""

    version: str | None
    capabilities: ClientCapabilities | None
    seed: InputResponseRequestParams


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def _dump(result: CallToolResult) -> dict[str, Any]:
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


class TaskStore:
    """The `mcp_tasks` table of relay.db (created by migration m009): task id -> job id, durably."""

    def __init__(self, path: Path) -> None:
        self._lock = threading.Lock()
        # A call's whole result, and ids as long as a client sends: no statement keeps them bound (store/release.py).
        self._db = connect(path, timeout=BUSY_TIMEOUT_S)
        self._db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def add(self, task_id: str, job_id: str, tool: str, kind: Kind, created_at: float) -> None:
        """Record a task of the current principal (only it, or an admin, finds it again)."""
        with self._lock:
            self._db.execute(
                "INSERT INTO mcp_tasks (task_id, job_id, tool, kind, created_at, principal) VALUES (?, ?, ?, ?, ?, ?)",
                (task_id, job_id, tool, kind, created_at, current().name),
            )

    def set_outcome(self, task_id: str, outcome: dict[str, Any]) -> None:
        """A whole call's outcome: `{"result": CallToolResult}` or `{"error": JSON-RPC error}`."""
        with self._lock:
            self._db.execute("UPDATE mcp_tasks SET result = ? WHERE task_id = ?", (json.dumps(outcome), task_id))

    def get(self, task_id: str) -> tuple[str, str, Kind, float, dict[str, Any] | None] | None:
        """(job id, tool, kind, created at, stored outcome) of a task, or None for an unknown id (or one of
        another principal's tasks, unless the current principal is an admin)."""
        with self._lock:
            row = self._db.execute(
                "SELECT job_id, tool, kind, created_at, result, principal FROM mcp_tasks WHERE task_id = ?", (task_id,)
            ).fetchone()
        if row is None or not current().sees(row[5]):
            return None
        return row[0], row[1], row[2], row[3], json.loads(row[4]) if row[4] else None


def opted_in(ctx: ServerRequestContext[Any, Any], meta: Any) -> bool:
    """The client declared the tasks extension for its session or in this request's `_meta`."""
    caps = ctx.session.client_capabilities
    if caps is not None and caps.extensions and TASKS_EXTENSION in caps.extensions:
        return True
    declared = _member(meta, CLIENT_CAPABILITIES_META)
    extensions = _member(declared, "extensions")
    return isinstance(extensions, dict) and TASKS_EXTENSION in extensions


def _member(value: Any, key: str) -> Any:
    """`value[key]` when `value` is a JSON object, else None."""
    if not isinstance(value, dict):
        return None
    obj: dict[str, Any] = value  # pyright: ignore[reportUnknownVariableType]
    return obj.get(key)


def _check_name_header(ctx: ServerRequestContext[Any, Any], task_id: str) -> None:
    """Over HTTP, an `Mcp-Name` header on tasks/* must name the task in the body (SEP-2243, SEP-2663)."""
    request: Any = ctx.request
    headers: Any = getattr(request, "headers", None)
    if headers is None:
        return
    value: Any = headers.get("mcp-name")
    if isinstance(value, str) and value.strip() != task_id:
        raise MCPError(code=HEADER_MISMATCH, message="Mcp-Name header does not match params.taskId")


class TasksExtension(Extension):
    """Task-augmented tools/call for delegate, ask and the zen workflows; tasks/get, tasks/update, tasks/cancel."""

    identifier = TASKS_EXTENSION

    def __init__(
        self,
        deps: Deps,
        catalog: Callable[[], ToolHost],
        task_tools: dict[tuple[str, str], Kind] | None = None,
        required: frozenset[str] = frozenset(),
    ) -> None:
        self.deps = deps
        self.catalog = catalog
        self.task_tools = TASK_TOOLS if task_tools is None else task_tools
        # Tools that run only as tasks (taskSupport "required"): a client that did not opt in gets -32021.
        self.required = required
        self.inputs = TaskInputs()

    def store(self) -> TaskStore:
        def make() -> TaskStore:
            store = TaskStore(self.deps.settings.db_path)

            async def close() -> None:
                store.close()

            self.deps.on_close(close)
            return store

        return self.deps.service("mcp_tasks", make)

    def methods(self) -> Sequence[MethodBinding]:
        return (
            MethodBinding("tasks/get", TaskParams, self._get),
            MethodBinding("tasks/update", UpdateTaskParams, self._update),
            MethodBinding("tasks/cancel", TaskParams, self._cancel),
        )

    # tools/call ---------------------------------------------------------------------------------

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        registered = self.catalog().exposed.get(params.name)
        kind = self.task_tools.get((registered.toolset, registered.name)) if registered is not None else None
        if registered is None or kind is None:
            return await call_next(ctx)
        if not opted_in(ctx, params.meta):
            if registered.name in self.required:
                require_client_extension(ctx, TASKS_EXTENSION)
            return await call_next(ctx)
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:  # a task result cannot travel on a legacy wire
            return await call_next(ctx)
        arguments = dict(params.arguments or {})
        asked = await self._resolve_first(registered, arguments, ctx, params)
        if asked is not None:
            return asked  # the call's own input round (SEP-2322): no task yet
        # The task's tool run sees the answers the call carried, as the tool's own call would.
        seed = InputResponseRequestParams(input_responses=params.input_responses, request_state=params.request_state)
        caps = declared_capabilities(ctx, params.meta)
        engine = self.deps.engine()
        if kind == "call":
            return self._start_call(engine, registered, arguments, TaskRun(ctx.protocol_version, caps, seed))
        # delegate and ask submit their job and hand it back at once in async mode.
        context = TaskContext(ctx.protocol_version, caps, seed)
        result = await self.catalog().run(registered, {**arguments, "mode": "async"}, context, via=task_via(registered))
        job_id = _member(result.structured_content, "job_id") if isinstance(result, CallToolResult) else None
        if not isinstance(job_id, str):
            return result  # refused before any job existed (bad arguments, unknown agent): an ordinary result
        return self._created(job_id, registered.name, kind, engine)

    async def _resolve_first(
        self,
        registered: RegisteredTool,
        arguments: dict[str, Any],
        ctx: ServerRequestContext[Any, Any],
        params: CallToolRequestParams,
    ) -> InputRequiredResult | None:
        """The input a tool's `Resolve(...)` parameters still need, asked on the call itself; None once answered.

        Arguments that do not validate, or a resolver that fails, are left to the task's run,
        which reports them as its result.
        """
        tool = registered.tool
        if not tool.resolved_params:
            return None
        context: Context[Any, Any] = Context(request_context=ctx, input_params=params)
        try:
            validated = tool.fn_metadata.validate_arguments(arguments)
            resolved = await resolve_arguments(tool.resolved_params, tool.resolver_plans, validated, context)
        except MCPError:
            raise
        except Exception:  # bad arguments or a failing resolver: reported by the task's run
            return None
        return resolved if isinstance(resolved, InputRequiredResult) else None

    def _start_call(
        self, engine: Engine, registered: RegisteredTool, arguments: dict[str, Any], run: TaskRun
    ) -> dict[str, Any]:
        task_id = secrets.token_urlsafe(24)
        store = self.store()
        catalog = self.catalog()
        inputs = self.inputs

        async def rounds() -> CallToolResult:
            """Run the tool round after round while it asks for input; its final result."""
            answers, state = run.seed.input_responses, run.seed.request_state
            delay = STATE_ONLY_BACKOFF_S[0]
            while True:
                params = InputResponseRequestParams(input_responses=answers, request_state=state)
                context = TaskContext(run.version, run.capabilities, params)
                result = await catalog.run(registered, arguments, context, via=task_via(registered))
                if not isinstance(result, InputRequiredResult):
                    return result
                state = result.request_state
                if not result.input_requests:
                    answers = None
                    await anyio.sleep(delay)
                    delay = min(delay * 2, STATE_ONLY_BACKOFF_S[1])
                    continue
                for request in result.input_requests.values():
                    refused = missing_capability(request, run.capabilities)
                    if refused is not None:
                        raise refused
                delay = STATE_ONLY_BACKOFF_S[0]
                answers = await inputs.ask(task_id, result.input_requests)

        async def job(emit: Callable[[Event], None]) -> AgentResult:
            try:
                result = await rounds()
            except MCPError as exc:  # a protocol-level failure: the task fails with it
                store.set_outcome(
                    task_id, {"error": exc.error.model_dump(by_alias=True, mode="json", exclude_none=True)}
                )
                return AgentResult(ok=False, text=exc.error.message)
            store.set_outcome(task_id, {"result": _dump(result)})
            text = "\n".join(c.text for c in result.content if isinstance(c, TextContent))
            return AgentResult(ok=not result.is_error, text=text)

        with submitted_via(task_via(registered)):
            job_id = engine.submit_task(
                f"mcp:{registered.name}", {"tool": registered.name, "arguments": arguments}, job
            )
        # Recorded before the task can run (it starts at the next await) and before its id is returned.
        return self._created(job_id, registered.name, "call", engine, task_id)

    def _created(
        self, job_id: str, tool: str, kind: Kind, engine: Engine, task_id: str | None = None
    ) -> dict[str, Any]:
        task_id = task_id or secrets.token_urlsafe(24)
        created = engine.get(job_id).created_at
        self.store().add(task_id, job_id, tool, kind, created)
        return {
            "resultType": "task",
            "taskId": task_id,
            "status": "working",
            "createdAt": _iso(created),
            "lastUpdatedAt": _iso(created),
            "ttlMs": None,  # kept as long as the job is
            "pollIntervalMs": POLL_INTERVAL_MS,
        }

    # tasks/* ------------------------------------------------------------------------------------

    def _lookup(
        self, ctx: ServerRequestContext[Any, Any], task_id: str
    ) -> tuple[str, str, Kind, float, dict[str, Any] | None]:
        if not opted_in(ctx, None):
            require_client_extension(ctx, TASKS_EXTENSION)
        _check_name_header(ctx, task_id)
        found = self.store().get(task_id)
        if found is None:
            raise MCPError(code=INVALID_PARAMS, message=f"Unknown task {task_id[:80]!r}")
        return found

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        job_id, _tool, kind, created, stored = self._lookup(ctx, params.task_id)
        engine = self.deps.engine()
        rec = engine.get(job_id)
        updated = rec.finished_at or rec.started_at or rec.created_at
        task: dict[str, Any] = {
            "taskId": params.task_id,
            "createdAt": _iso(created),
            "lastUpdatedAt": _iso(updated),
            "ttlMs": None,
            "pollIntervalMs": POLL_INTERVAL_MS,
        }
        if not rec.is_final:
            asking = self.inputs.asking(params.task_id)
            if asking is not None:
                return task | {
                    "status": "input_required",
                    "lastUpdatedAt": _iso(max(updated, asking.since)),
                    "statusMessage": f"waiting for the client's answer to {len(asking.open)} input request(s)",
                    "inputRequests": {key: wire(request) for key, request in asking.open.items()},
                }
            return task | {"status": "working", "statusMessage": f"job {job_id} is {rec.status}"}
        if rec.status == "cancelled":
            return task | {"status": "cancelled", "statusMessage": f"job {job_id} was cancelled"}
        if kind == "call":
            if stored is not None and "result" in stored:
                return task | {"status": "completed", "result": stored["result"]}
            error: dict[str, Any] = (stored or {}).get("error") or {
                "code": INTERNAL_ERROR,
                "message": f"job {job_id} ended ({rec.status}) without a result",
            }
            return task | {"status": "failed", "statusMessage": str(error.get("message", "")), "error": error}
        return task | {"status": "completed", "result": _dump(self._job_result(engine, job_id, kind))}

    @staticmethod
    def _job_result(engine: Engine, job_id: str, kind: Kind) -> CallToolResult:
        """What the tool itself returns for a finished job: delegate's envelope, ask's envelope + thread."""
        if kind == "ask":
            from relay.ask import ask_envelope

            env = ask_envelope(engine, job_id)
            is_error = bool(envelope_result(env).is_error)
            return json_result(AskEnvelope.model_validate(env).model_dump(mode="json"), is_error=is_error)
        return envelope_result(engine.envelope(job_id))

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams) -> dict[str, Any]:
        """Answers to the task's open input requests; keys it is not waiting on are ignored (SEP-2663)."""
        self._lookup(ctx, params.task_id)
        if params.input_responses:
            self.inputs.answer(params.task_id, params.input_responses)
        return {}

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        job_id = self._lookup(ctx, params.task_id)[0]
        try:
            await self.deps.engine().cancel(job_id)
        except RelayError as err:
            raise MCPError(code=INTERNAL_ERROR, message=f"{err.message} ({err.hint})") from None
        return {}
