"""Asking the person through MCP elicitation when a call wants more permission than its grant.

The core decides (relay.jobs.grants); this is how a tool call asks: an elicitation form (what will
run, which agent, which folder, which permission; accept or decline, and a "for this session" box).
On a connection opened with `initialize` (the clients of 2025) the form is an `elicitation/create`
request sent while the call waits; on a 2026-07-28 connection (no server-initiated requests) the
call answers `InputRequiredResult` with the form, and the client's retry carries the answer
(`NeedsConfirmation` takes the question up to the catalog). A client that did not declare
elicitation, a call with no live request (an MCP Task's run) or an elicitation that fails is
`unavailable`: the job is refused with the grant and how to change it.
"""

from __future__ import annotations

import weakref
from typing import Any

import anyio
from mcp.server.elicitation import render_elicitation_schema
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import NoBackChannelError
from mcp.types import ElicitRequest, ElicitRequestFormParams, ElicitResult
from pydantic import BaseModel, Field, ValidationError

from relay.jobs.grants import Answer, Ask, rank
from relay.principal import current
from relay.server.clientinfo import client_name

# What each permission lets the agent do, in the words the form shows the person.
MEANINGS = {
    "read-only": "reads files only",
    "edit": "may edit files in the folder",
    "full": "every approval and sandbox switched off: it may run any command",
}


class ConfirmForm(BaseModel):
    """The form's one field; accept or decline are the form's own buttons."""

    for_session: bool = Field(
        default=False,
        title="For this session",
        description="Allow this permission again without asking until this session ends",
    )


def form_message(ask: Ask) -> str:
    """The form's text: what will run, which agent, which folder, which permission, above which grant."""
    return "\n".join(
        [
            f"A model asks relay to run {ask.agent} with permission '{ask.permission}', "
            f"above your grant '{ask.grant}' ({ask.grant_source}).",
            f"Agent: {ask.agent}",
            f"Folder: {ask.cwd}",
            f"Permission: {ask.permission} ({MEANINGS.get(ask.permission, ask.permission)})",
            f"Task: {ask.task}",
            "Accept to run it; decline to refuse. Tick 'For this session' to allow this level until this session ends.",
        ]
    )


def input_key(permission: str) -> str:
    """The key of the confirmation form in an `InputRequiredResult` (one per level a call asks for)."""
    return f"relay-permission-{permission}"


class NeedsConfirmation(Exception):
    """The call must ask the person in its result (2026-07-28: no server-initiated request); not a RelayError,
    so no tool turns it into its own error: the catalog answers `InputRequiredResult` with `request`."""

    def __init__(self, key: str, request: ElicitRequest) -> None:
        super().__init__(key)
        self.key = key
        self.request = request


def _form_request(message: str) -> ElicitRequest:
    return ElicitRequest(
        params=ElicitRequestFormParams(message=message, requested_schema=render_elicitation_schema(ConfirmForm))
    )


def _answer_of(result: ElicitResult) -> Answer:
    if result.action != "accept":
        return Answer(result.action)
    try:
        form = ConfirmForm.model_validate(result.content or {})
    except ValidationError:
        return Answer("accept")
    return Answer("accept", for_session=form.for_session)


def _connection(session: Any) -> Any:
    """What "this session" is: the client's connection (an `initialize` session on stdio or HTTP). A
    2026-07-28 call is its own connection, so there an answer holds for that call only."""
    return getattr(session, "_connection", session)


class SessionGrants:
    """The levels people allowed "for this session", per MCP connection (forgotten with it)."""

    def __init__(self) -> None:
        self._levels: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()

    def allows(self, session: Any, level: str) -> bool:
        granted = self._levels.get(_connection(session))
        return granted is not None and rank(level) <= rank(granted)

    def remember(self, session: Any, level: str) -> None:
        granted = self._levels.get(_connection(session))
        if granted is None or rank(level) > rank(granted):
            self._levels[_connection(session)] = level


class Elicitor:
    """The `Confirmer` of one tool call: asks through its MCP session, once per level within the call."""

    def __init__(self, ctx: Context[Any, Any] | None, remembered: SessionGrants) -> None:
        self.ctx = ctx
        self.remembered = remembered
        self._lock = anyio.Lock()  # jobs a tool starts in parallel ask one at a time
        self._given: dict[str, Answer] = {}

    def _session(self) -> Any | None:
        if self.ctx is None:
            return None
        try:
            return self.ctx.request_context.session
        except (ValueError, AttributeError):  # no live request: an MCP Task's run (it asks in its result)
            return None

    def _capabilities(self) -> Any | None:
        try:
            return self.ctx.client_capabilities if self.ctx is not None else None
        except (ValueError, AttributeError):  # a Context made outside any request
            return None

    async def __call__(self, ask: Ask) -> Answer:
        ctx, session = self.ctx, self._session()
        if session is not None and self.remembered.allows(session, ask.permission):
            return Answer("accept", for_session=True, remembered=True)
        caps = self._capabilities()
        if ctx is None or caps is None or caps.elicitation is None:
            return Answer("unavailable")
        async with self._lock:
            if ask.permission in self._given:  # the same call asked for this level already
                return self._given[ask.permission]
            answer = await self._ask(ctx, session, ask)
            if session is not None and answer.action == "accept" and answer.for_session:
                self.remembered.remember(session, ask.permission)
            self._given[ask.permission] = answer
            return answer

    async def _ask(self, ctx: Context[Any, Any], session: Any | None, ask: Ask) -> Answer:
        key = input_key(ask.permission)
        given = (ctx.input_responses or {}).get(key)
        if isinstance(given, ElicitResult):  # the retry of a call that asked in its result
            return _answer_of(given)
        message = form_message(ask)
        if session is None:  # an MCP Task's round: it asks in its result (input_required)
            raise NeedsConfirmation(key, _form_request(message))
        try:
            result = await ctx.session.elicit_form(
                message, render_elicitation_schema(ConfirmForm), related_request_id=ctx.request_id
            )
        except NoBackChannelError:
            raise NeedsConfirmation(key, _form_request(message)) from None
        except Exception:  # the client failed to answer: nobody said yes
            return Answer("unavailable")
        return _answer_of(result)


def principal_of(ctx: Context[Any, Any] | None) -> str:
    """Who asks, for the audit log: the acting principal (`local`, or a named HTTP token) and the client's name."""
    who = current().name
    name = client_name(ctx)
    return f"{who} ({name})" if name else who
