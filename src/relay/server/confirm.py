"""Asking the person through MCP elicitation when a call wants more permission than its grant.

The core decides (relay.jobs.grants); this is how a tool call asks: an elicitation form (what will
run, which agent, which folder, which permission; accept or decline, and a "for this session" box).
On a connection opened with `initialize` (the clients of 2025) the form is an `elicitation/create`
request sent while the call waits; on a 2026-07-28 connection (no server-initiated requests) the
call answers `InputRequiredResult` with the form, and the client's retry carries the answer
(`NeedsConfirmation` takes the question up to the catalog). A client that did not declare
elicitation, a call with no live request (an MCP Task's run) or an elicitation that fails is
`unavailable`: the job is refused with the grant and how to change it.

An answer that arrives with a retry counts only with the `requestState` relay sent with its
question (`Seals`): what was asked (the tool, agent, folder, permission, task, principal and client,
the answer's key), a nonce and an expiry, under an HMAC whose key this relay process made at random
and never writes down. An answer without it, with a seal that does not verify, for another question,
past its expiry or whose nonce was used already is refused; nothing runs. A restart forgets the key
with the used nonces, so no state from before it verifies (a replay cannot outlive the nonce set).

"For this session": on a connection opened with `initialize`, that connection. A 2026-07-28 call
has no session: there it means the acting principal with the client's name (`clientInfo.name`),
in this relay process, for `SESSIONLESS_GRANT_TTL_S` at most.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
import weakref
from dataclasses import asdict, dataclass
from typing import Any

import anyio
from mcp.server.elicitation import render_elicitation_schema
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import NoBackChannelError
from mcp.types import ElicitRequest, ElicitRequestFormParams, ElicitResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field, ValidationError

from relay.errors import ErrorCode, RelayError
from relay.jobs.grants import Answer, Ask, rank
from relay.principal import current
from relay.server.clientinfo import client_name

# How long relay's question stays answerable: the person reads the form and answers within it.
CONFIRM_TTL_S = 300.0
# How long "for this session" holds on a 2026-07-28 call (no session there: see the module's text).
SESSIONLESS_GRANT_TTL_S = 3600.0
# Answers whose nonce is kept until their expiry; past this many within CONFIRM_TTL_S, answers are refused.
USED_NONCES_MAX = 4096
STATE_PREFIX = "relay-confirm.v1."

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
    so no tool turns it into its own error: the catalog answers `InputRequiredResult` with `request`, and
    `state` (the sealed question) as its `requestState`."""

    def __init__(self, key: str, request: ElicitRequest, state: str) -> None:
        super().__init__(key)
        self.key = key
        self.request = request
        self.state = state


def now() -> float:
    """The clock a question expires by (a test moves it)."""
    return time.monotonic()


@dataclass(frozen=True)
class Question:
    """What relay asked the person, as its request state carries it (sealed) to the client and back."""

    key: str
    tool: str
    agent: str
    folder: str
    permission: str
    task: str  # a digest of the task the form showed
    principal: str  # who asks and from which client, as the audit log names them
    nonce: str
    expires: float


def _what(key: str, ask: Ask) -> dict[str, str]:
    """The parts of a question an answer must match: everything but its nonce and expiry."""
    return {
        "key": key,
        "tool": ask.via or "",
        "agent": ask.agent,
        "folder": ask.cwd,
        "permission": ask.permission,
        "task": hashlib.sha256(ask.prompt.encode("utf-8", "surrogatepass")).hexdigest(),
        "principal": ask.principal or current().name,
    }


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class StaleAnswer(RelayError):
    """An answer to relay's confirmation that answers no question of relay's still open: nothing was allowed."""

    def __init__(self, ask: Ask, why: str) -> None:
        super().__init__(
            ErrorCode.PERMISSION_NOT_GRANTED,
            f"the answer to relay's confirmation of permission '{ask.permission}' for {ask.agent} in {ask.cwd} "
            f"{why}, so it allows nothing: relay did not start {ask.agent}",
            "retry the call without that answer (no inputResponses and no requestState): relay asks the person "
            "again, and the client sends the answer back with the requestState of that question",
        )


class Seals:
    """relay's key for the confirmation's request state, and the nonces of the answers already taken.

    The key is made at random when relay starts and lives in this process only: a question is answered
    within minutes of being asked, a restart ends the call that asked it, and the used nonces are held
    in memory too, so a key that survived a restart would let an answer be replayed after it."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)
        self._used: dict[str, float] = {}  # nonce -> when its question expires

    def seal(self, key: str, ask: Ask) -> str:
        """The request state of a new question: what is asked, a nonce and an expiry, under relay's HMAC."""
        question = Question(**_what(key, ask), nonce=secrets.token_urlsafe(16), expires=now() + CONFIRM_TTL_S)
        payload = json.dumps(asdict(question), sort_keys=True, separators=(",", ":")).encode()
        return STATE_PREFIX + _b64(payload) + "." + _b64(self._mac(payload))

    def take(self, state: str | None, key: str, ask: Ask) -> None:
        """Accept `state` as the question an answer for `key` replies to, once; else raise `StaleAnswer`."""
        question = self._open(state)
        if question is None:
            raise StaleAnswer(ask, "does not come with the request state relay sealed its question in")
        asked = {k: v for k, v in asdict(question).items() if k not in ("nonce", "expires")}
        differs = sorted(k for k, v in _what(key, ask).items() if asked.get(k) != v)
        if differs:
            raise StaleAnswer(ask, f"answers another question (its {', '.join(differs)} differ from this call's)")
        moment = now()
        if question.expires <= moment:
            raise StaleAnswer(ask, f"came after its question expired ({CONFIRM_TTL_S:.0f} s after it was asked)")
        for nonce in [n for n, until in self._used.items() if until <= moment]:
            del self._used[nonce]
        if question.nonce in self._used:
            raise StaleAnswer(ask, "was used already (an answer counts once)")
        if len(self._used) >= USED_NONCES_MAX:
            raise StaleAnswer(ask, f"came when {USED_NONCES_MAX} answers were taken in the last {CONFIRM_TTL_S:.0f} s")
        self._used[question.nonce] = question.expires

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self._key, payload, hashlib.sha256).digest()

    def _open(self, state: str | None) -> Question | None:
        if state is None or not state.startswith(STATE_PREFIX):
            return None
        body, _, mac = state[len(STATE_PREFIX) :].partition(".")
        try:
            payload, given = _unb64(body), _unb64(mac)
        except ValueError:
            return None
        if not hmac.compare_digest(given, self._mac(payload)):
            return None
        try:
            return Question(**json.loads(payload))
        except (ValueError, TypeError):
            return None


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


@dataclass(frozen=True)
class SessionlessScope:
    """What "this session" is on a 2026-07-28 call, which has none: the acting principal and the client's name."""

    principal: str
    client: str


Scope = SessionlessScope | object
"""What "this session" is for a call: the client's connection (an `initialize` session on stdio or HTTP,
held weakly), or a `SessionlessScope` one."""


class SessionGrants:
    """The levels people allowed "for this session": per MCP connection (forgotten with it), and on a
    sessionless call per (principal, client name) for `SESSIONLESS_GRANT_TTL_S` (forgotten at a restart)."""

    def __init__(self) -> None:
        self._levels: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self._sessionless: dict[SessionlessScope, tuple[str, float]] = {}

    def _granted(self, scope: Scope) -> str | None:
        if not isinstance(scope, SessionlessScope):
            return self._levels.get(scope)
        level, until = self._sessionless.get(scope, (None, 0.0))
        return level if until > now() else None

    def allows(self, scope: Scope, level: str) -> bool:
        granted = self._granted(scope)
        return granted is not None and rank(level) <= rank(granted)

    def remember(self, scope: Scope, level: str) -> None:
        granted = self._granted(scope)
        if granted is not None and rank(level) <= rank(granted):
            return
        if isinstance(scope, SessionlessScope):
            moment = now()
            self._sessionless = {k: v for k, v in self._sessionless.items() if v[1] > moment}
            self._sessionless[scope] = (level, moment + SESSIONLESS_GRANT_TTL_S)
        else:
            self._levels[scope] = level


class Elicitor:
    """The `Confirmer` of one tool call: asks through its MCP session, once per level within the call."""

    def __init__(self, ctx: Context[Any, Any] | None, remembered: SessionGrants, seals: Seals) -> None:
        self.ctx = ctx
        self.remembered = remembered
        self.seals = seals
        self._lock = anyio.Lock()  # jobs a tool starts in parallel ask one at a time
        self._given: dict[str, Answer] = {}

    def _session(self) -> Any | None:
        if self.ctx is None:
            return None
        try:
            return self.ctx.request_context.session
        except (ValueError, AttributeError):  # no live request: an MCP Task's run (it asks in its result)
            return None

    def _scope(self, session: Any | None) -> Scope | None:
        """What "this session" is for this call (see `Scope`); None: nothing is remembered for it."""
        try:
            sessionless = self.ctx is not None and self.ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        except (ValueError, AttributeError):
            sessionless = False
        if sessionless:
            return SessionlessScope(current().name, client_name(self.ctx) or "")
        return getattr(session, "_connection", session) if session is not None else None

    def _capabilities(self) -> Any | None:
        try:
            return self.ctx.client_capabilities if self.ctx is not None else None
        except (ValueError, AttributeError):  # a Context made outside any request
            return None

    async def __call__(self, ask: Ask) -> Answer:
        ctx, session = self.ctx, self._session()
        scope = self._scope(session)
        if scope is not None and self.remembered.allows(scope, ask.permission):
            return Answer("accept", for_session=True, remembered=True)
        caps = self._capabilities()
        if ctx is None or caps is None or caps.elicitation is None:
            return Answer("unavailable")
        async with self._lock:
            if ask.permission in self._given:  # the same call asked for this level already
                return self._given[ask.permission]
            answer = await self._ask(ctx, session, ask)
            if scope is not None and answer.action == "accept" and answer.for_session:
                self.remembered.remember(scope, ask.permission)
            self._given[ask.permission] = answer
            return answer

    async def _ask(self, ctx: Context[Any, Any], session: Any | None, ask: Ask) -> Answer:
        key = input_key(ask.permission)
        given = (ctx.input_responses or {}).get(key)
        if isinstance(given, ElicitResult):  # the retry of a call that asked in its result: its question's answer?
            self.seals.take(ctx.request_state, key, ask)
            return _answer_of(given)
        message = form_message(ask)
        if session is None:  # an MCP Task's round: it asks in its result (input_required)
            raise NeedsConfirmation(key, _form_request(message), self.seals.seal(key, ask))
        try:
            result = await ctx.session.elicit_form(
                message, render_elicitation_schema(ConfirmForm), related_request_id=ctx.request_id
            )
        except NoBackChannelError:
            raise NeedsConfirmation(key, _form_request(message), self.seals.seal(key, ask)) from None
        except Exception:  # the client failed to answer: nobody said yes
            return Answer("unavailable")
        return _answer_of(result)


def principal_of(ctx: Context[Any, Any] | None) -> str:
    """Who asks, for the audit log: the acting principal (`local`, or a named HTTP token) and the client's name."""
    who = current().name
    name = client_name(ctx)
    return f"{who} ({name})" if name else who
