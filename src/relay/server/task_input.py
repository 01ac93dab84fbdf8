"""Client input for MCP tasks: the `input_required` status (SEP-2663) over SEP-2322's input requests.

A tool asks the client for input the way the MCP SDK models it, and the same code serves a plain
call and a task:

- **Before the work** — `Resolve(...)` parameters whose resolvers return `Elicit` / `Sample` /
  `ListRoots`. They are resolved on the `tools/call` itself, before a task exists: the call
  answers `InputRequiredResult` (`resultType: "input_required"`, sealed `requestState`) and the
  client retries with `inputResponses`. Only the round that has every answer creates the task,
  whose tool run sees the same answers (`tasks_ext` does this).
- **During the work** — the tool body returns an `InputRequiredResult` and reads
  `ctx.input_responses` / `ctx.request_state` on its next round. Inside a task, a round that
  asks parks the task in `input_required`: `tasks/get` lists the open requests under
  `inputRequests`, `tasks/update` delivers `inputResponses` (a subset is fine: the task stays
  `input_required` with only the unanswered keys), and once every request is answered the tool
  runs its next round with those answers and its own `requestState`, which never leaves relay.

`TaskInputs` holds the open requests of the tasks this relay process runs (in memory: a task's
tool run is an in-process job, which a restart ends anyway).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.server.validation import wants_sampling_tools
from mcp.shared.exceptions import MCPError
from mcp_types import (
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    ClientCapabilities,
    CreateMessageRequest,
    CreateMessageResult,
    CreateMessageResultWithTools,
    ElicitationCapability,
    ElicitRequest,
    ElicitResult,
    FormElicitationCapability,
    InputRequest,
    InputResponse,
    InputResponseRequestParams,
    InputResponses,
    ListRootsResult,
    MissingRequiredClientCapabilityErrorData,
    RootsCapability,
    SamplingCapability,
    SamplingToolsCapability,
)
from mcp_types.jsonrpc import INVALID_PARAMS
from pydantic import ValidationError

CLIENT_CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"


class TaskContext(Context[Any, Any]):
    """The `Context` a task's tool runs with: no live request (the call that created the task has
    been answered), the call's protocol version and client capabilities, and this round's
    input responses and request state."""

    _version: str | None
    _capabilities: ClientCapabilities | None

    def __init__(
        self, version: str | None, capabilities: ClientCapabilities | None, input_params: InputResponseRequestParams
    ) -> None:
        super().__init__(input_params=input_params)
        self._version = version
        self._capabilities = capabilities

    @property
    def protocol_version(self) -> str | None:
        return self._version

    @property
    def client_capabilities(self) -> ClientCapabilities | None:
        return self._capabilities


def declared_capabilities(ctx: ServerRequestContext[Any, Any], meta: Any) -> ClientCapabilities | None:
    """What the client declared: for its session, else in this request's `_meta` (SEP-2575)."""
    caps = ctx.session.client_capabilities
    if caps is not None:
        return caps
    if not isinstance(meta, dict):
        return None
    obj: dict[str, Any] = meta  # pyright: ignore[reportUnknownVariableType]
    declared = obj.get(CLIENT_CAPABILITIES_META)
    if not isinstance(declared, dict):
        return None
    try:
        return ClientCapabilities.model_validate(declared)
    except ValidationError:
        return None


def wire(request: InputRequest) -> dict[str, Any]:
    return request.model_dump(by_alias=True, mode="json", exclude_none=True)


def missing_capability(request: InputRequest, caps: ClientCapabilities | None) -> MCPError | None:
    """The -32021 error when the client did not declare what `request` needs, else None."""
    if isinstance(request, ElicitRequest):
        elicitation = caps.elicitation if caps is not None else None
        if elicitation is not None and (elicitation.form is not None or elicitation.url is None):
            return None
        required = ClientCapabilities(elicitation=ElicitationCapability(form=FormElicitationCapability()))
        name = "elicitation"
    elif isinstance(request, CreateMessageRequest):
        sampling = caps.sampling if caps is not None else None
        tools = wants_sampling_tools(request.params.tools, request.params.tool_choice)
        if sampling is not None and (not tools or sampling.tools is not None):
            return None
        required = ClientCapabilities(sampling=SamplingCapability(tools=SamplingToolsCapability() if tools else None))
        name = "sampling.tools" if tools else "sampling"
    else:
        if caps is not None and caps.roots is not None:
            return None
        required = ClientCapabilities(roots=RootsCapability())
        name = "roots"
    data = MissingRequiredClientCapabilityErrorData(required_capabilities=required)
    return MCPError(
        code=MISSING_REQUIRED_CLIENT_CAPABILITY,
        message=f"the tool asks for client input that needs the {name} capability, which the client did not declare",
        data=data.model_dump(by_alias=True, mode="json", exclude_none=True),
    )


def parse_response(key: str, request: InputRequest, raw: Any) -> InputResponse:
    """The client's answer to `request`, as the result type that request expects (-32602 if it is not)."""
    kind: type[ElicitResult] | type[CreateMessageResult] | type[CreateMessageResultWithTools] | type[ListRootsResult]
    if isinstance(request, ElicitRequest):
        kind = ElicitResult
    elif isinstance(request, CreateMessageRequest):
        tools = wants_sampling_tools(request.params.tools, request.params.tool_choice)
        kind = CreateMessageResultWithTools if tools else CreateMessageResult
    else:
        kind = ListRootsResult
    try:
        return kind.model_validate(raw)
    except ValidationError:
        raise MCPError(
            code=INVALID_PARAMS,
            message=f"inputResponses[{key[:80]!r}] is not a valid answer to {request.method}",
        ) from None


@dataclass
class Asking:
    """One round of a task's tool waiting on the client: what is still open, what has been answered."""

    open: dict[str, InputRequest]
    since: float = field(default_factory=time.time)
    answers: InputResponses = field(default_factory=lambda: {})
    changed: anyio.Event = field(default_factory=anyio.Event)


class TaskInputs:
    """The open input requests of the tasks this process runs, by task id."""

    def __init__(self) -> None:
        self._asking: dict[str, Asking] = {}

    def asking(self, task_id: str) -> Asking | None:
        """The round `task_id` is waiting on, while any of its requests is unanswered."""
        found = self._asking.get(task_id)
        return found if found is not None and found.open else None

    async def ask(self, task_id: str, requests: dict[str, InputRequest]) -> InputResponses:
        """Park the task until the client answered every one of `requests`; their answers, by key."""
        round_ = Asking(open=dict(requests))
        self._asking[task_id] = round_
        try:
            while round_.open:
                await round_.changed.wait()
                round_.changed = anyio.Event()
            return round_.answers
        finally:
            if self._asking.get(task_id) is round_:
                del self._asking[task_id]

    def answer(self, task_id: str, responses: dict[str, Any]) -> None:
        """Deliver `tasks/update` responses: answers to open requests count; other keys are ignored.

        All or nothing: one answer of the wrong shape refuses the update (-32602) and records none.
        """
        round_ = self._asking.get(task_id)
        if round_ is None:
            return
        parsed = {k: parse_response(k, round_.open[k], raw) for k, raw in responses.items() if k in round_.open}
        if not parsed:
            return
        for key, response in parsed.items():
            round_.answers[key] = response
            del round_.open[key]
        round_.changed.set()
