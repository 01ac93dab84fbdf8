"""Asking the person about an ACP agent's permission request, from a call of the job's owner that waits on it.

A background job has no MCP request in flight, so relay keeps an agent's request (relay.jobs.approvals) until a
call that can ask is there: a `delegate` waiting on its job (sync, or auto within its wait) or a `job_wait` on it,
made by the job's owner (only the owner answers for a job; another principal does not even see it). That call asks
the person the way a grant confirmation does (relay.server.confirm: the same seals, the same form request): on a
connection opened with `initialize` an `elicitation/create` request while the call waits; on a 2026-07-28 call an
`InputRequiredResult` whose retry (the same call again) carries the answer with relay's sealed `requestState`.
A `delegate` retried with an answer waits on the job it started instead of starting another.

What the person sees: which agent of which job wants to do what (the tool call's title and kind, its input: a
command, a patch), in which folder, on which files, and which level that needs above the job's own. Accept allows
it once; decline tells the agent no (its reject option) and the job goes on. A client that cannot ask (no
elicitation), a headless run that cancels unasked, or an action above the owner's cap (`Principal.cap`, as for
`delegate(permission="full")`) is a denial (`cancelled`), never an allow. Every answer is on the audit record.
"""

from __future__ import annotations

import time
import unicodedata
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
from mcp.server.elicitation import render_elicitation_schema
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import NoBackChannelError
from mcp.types import ElicitRequest, ElicitRequestFormParams, ElicitResult
from pydantic import BaseModel

from relay.errors import ErrorCode, RelayError
from relay.jobs import approvals, grants
from relay.jobs.approvals import Request
from relay.jobs.engine import Engine
from relay.principal import current
from relay.server.clientinfo import auto_threshold_for, cancelled_by_client_timeout
from relay.server.confirm import MEANINGS, NeedsConfirmation, Seals, StaleAnswer, principal_of
from relay.server.results import wait_with_progress
from relay.store import JobRecord

# How often a waiting call looks for new requests of the jobs it waits on that another relay process runs (they are
# files in the job's folder); a job of this process wakes it at once.
PENDING_POLL_S = 0.2
KEY_PREFIX = "relay-approval-"

_T = TypeVar("_T")


class ApprovalForm(BaseModel):
    """No field: accept or decline are the form's own buttons."""


def input_key(job_id: str, request: Request) -> str:
    """The key of an approval's form in an `InputRequiredResult`: it names the job and the request (its driver run
    and id: a retried run's request 1 is not an earlier run's)."""
    return f"{KEY_PREFIX}{job_id}-{request.key}"


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def shown(text: str) -> str:
    """What the agent wrote, on one line: a newline, a control or format character (bidi overrides, zero widths,
    line separators) is shown escaped (`\\n`, `\\u202e`), so it cannot add a line that looks like relay's own."""
    return "".join(
        _ESCAPES.get(ch) or (f"\\u{ord(ch):04x}" if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") else ch)
        for ch in text
    )


def message_of(job_id: str, request: Request) -> str:
    """The form's text: which agent of which job wants to do what, where, on which files, above which level.
    Each line is relay's; what the agent wrote (title, kind, files, input) stays within its line (`shown`)."""
    lines = [
        f"The agent {request.agent} (relay job {job_id}) asks to: {shown(request.title)}",
        f"Kind: {shown(request.kind)} (needs '{request.level}': {MEANINGS.get(request.level, request.level)}; "
        f"the job runs with '{request.permission}')",
        f"Folder: {shown(request.cwd)}",
    ]
    if request.paths:
        lines.append("Files: " + ", ".join(shown(path) for path in request.paths))
    if request.input:
        lines.append(f"Input: {shown(request.input)}")
    lines.append("Accept to allow this once; decline to tell the agent no (the job goes on).")
    return "\n".join(lines)


def _ask_of(job_id: str, request: Request) -> grants.Ask:
    """The question as relay's seals know one: what an answer must match (the job, the request, the action)."""
    return grants.Ask(
        agent=request.agent,
        cwd=request.cwd,
        permission=request.level,
        grant=request.permission,
        grant_source=f"job {job_id}",
        prompt=request.describe(),
        via=f"approval/{job_id}",
        principal=current().name,
    )


def _form(message: str) -> ElicitRequest:
    return ElicitRequest(
        params=ElicitRequestFormParams(message=message, requested_schema=render_elicitation_schema(ApprovalForm))
    )


def _stale(job_id: str, request: Request, refused: StaleAnswer) -> RelayError:
    """An answer relay does not take (no seal of its own, replayed, expired, another question's), in this request's words."""
    why = refused.message.split(f" in {request.cwd} ", 1)[-1].split(", so it allows nothing", 1)[0]
    return RelayError(
        ErrorCode.PERMISSION_NOT_GRANTED,
        f"the answer to permission request {request.id} of job {job_id} ({request.title}) {why}, so it allows "
        "nothing: the agent is still waiting",
        "call again without that answer (no inputResponses and no requestState): relay asks the person again",
    )


class Approver:
    """Asks the person, through one tool call, about the permission requests of the caller's own jobs."""

    def __init__(
        self, engine: Engine, ctx: Context[Any, Any] | None, seals: Seals, asking: set[str] | None = None
    ) -> None:
        self.engine = engine
        self.ctx = ctx
        self.seals = seals
        # The requests a call of this server is asking about now (shared by its calls): one form per request, not
        # one per call waiting on its job.
        self.asking: set[str] = set() if asking is None else asking

    def _session(self) -> Any | None:
        try:
            return self.ctx.request_context.session if self.ctx is not None else None
        except (ValueError, AttributeError):  # no live request: an MCP Task's run
            return None

    def _can_elicit(self) -> bool:
        try:
            caps = self.ctx.client_capabilities if self.ctx is not None else None
        except (ValueError, AttributeError):
            return False
        return caps is not None and caps.elicitation is not None

    async def ask(self, job_id: str, request: Request) -> approvals.Action:
        """The person's answer to one request (raises `NeedsConfirmation` on a call that asks in its result)."""
        ctx, key, ask = self.ctx, input_key(job_id, request), _ask_of(job_id, request)
        given = (ctx.input_responses or {}).get(key) if ctx is not None else None
        if ctx is not None and isinstance(given, ElicitResult):  # the retry that brings the person's answer
            try:
                self.seals.take(ctx.request_state, key, ask)
            except StaleAnswer as refused:
                raise _stale(job_id, request, refused) from None
            return given.action
        if ctx is None or not self._can_elicit():
            return "unavailable"
        message = message_of(job_id, request)
        if self._session() is None:
            raise NeedsConfirmation(key, _form(message), self.seals.seal(key, ask))
        try:
            result = await ctx.session.elicit_form(
                message, render_elicitation_schema(ApprovalForm), related_request_id=ctx.request_id
            )
        except NoBackChannelError:
            raise NeedsConfirmation(key, _form(message), self.seals.seal(key, ask)) from None
        except Exception:  # the client failed to answer: nobody said yes
            return "unavailable"
        return result.action

    async def settle(self, job_id: str) -> None:
        """Ask about each request the job's agent is waiting on (the caller's own job only)."""
        engine = self.engine
        rec = engine.get(job_id)
        if rec.is_final or rec.principal != current().name:
            return
        job_dir = engine.files(rec.id).dir
        audit = engine.store.audit.record
        grant, source = grants.grant_for(engine.settings, None)
        cap, _ = grants.cap_for(grant, source)
        for request in approvals.pending(job_dir):
            if time.time() - request.asked_at >= engine.settings.approval_wait_s:  # kept from before a restart
                action: approvals.Action = "expired"
            elif grants.rank(request.level) > grants.rank(cap):
                action = "capped"
            elif (key := input_key(rec.id, request)) in self.asking:
                continue  # another call of this server is asking the person about it
            else:
                self.asking.add(key)
                try:
                    action = await self.ask(rec.id, request)
                except RelayError as refused:  # an answer relay would not take: on record, and nothing answered
                    entry = request.record() | {"answer": grants.STALE, "why": refused.message}
                    audit("permission.refused", rec.id, entry)
                    raise
                finally:
                    self.asking.discard(key)
            by: approvals.By = "person" if action in ("accept", "decline", "cancel") else "nobody"
            approvals.answer(job_dir, request, action, by, audit, principal_of(self.ctx))

    async def tend(self, job_ids: list[str]) -> None:
        """Settle the jobs' requests as they come, until cancelled: at once when a job of this process reports one
        (its `permission_request` event), else within PENDING_POLL_S (a job another relay process runs)."""
        woken = [anyio.Event()]
        failure: NeedsConfirmation | RelayError | None = None
        async with anyio.create_task_group() as tg:
            for job_id in job_ids:
                tg.start_soon(self._follow, job_id, woken)
            try:
                while True:
                    for job_id in job_ids:
                        await self.settle(job_id)
                    with anyio.move_on_after(PENDING_POLL_S):
                        await woken[0].wait()
                    woken[0] = anyio.Event()
            except (NeedsConfirmation, RelayError) as exc:  # raised as itself, not inside the task group's group
                failure = exc
                tg.cancel_scope.cancel()
        if failure is not None:
            raise failure

    async def _follow(self, job_id: str, woken: list[anyio.Event]) -> None:
        """Wake `tend` at each permission request of a job this process runs (kept before its event is sent)."""
        try:
            events = self.engine.subscribe(job_id)
        except RelayError:
            return
        async with events:
            async for _, event in events:
                if event.type == approvals.PERMISSION_REQUEST:
                    woken[0].set()


async def answering(approver: Approver, job_ids: list[str], wait: Callable[[], Awaitable[_T]]) -> _T:
    """Run `wait` while `approver` asks the person about the jobs' permission requests.

    A question the call must ask in its result (`NeedsConfirmation`) or an answer relay refuses ends the wait and
    is raised: the call answers with it, and the jobs go on. A job run here in print mode asks nothing
    (relay.jobs.known): it is not looked at."""
    job_ids = [job_id for job_id in job_ids if not approver.engine.known.quiet(job_id)]
    if not job_ids:
        return await wait()
    failure: BaseException | None = None
    result: list[_T] = []
    async with anyio.create_task_group() as tg:

        async def tend() -> None:
            nonlocal failure
            try:
                await approver.tend(job_ids)
            except (NeedsConfirmation, RelayError) as exc:
                failure = exc
                tg.cancel_scope.cancel()

        tg.start_soon(tend)
        result.append(await wait())
        tg.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return result[0]


def resumed_job(engine: Engine, ctx: Context[Any, Any] | None) -> str | None:
    """The job a `delegate` retried with the person's answer to its job's permission request waits on again
    (instead of starting another), when the answer names one of the caller's running jobs."""
    responses = (ctx.input_responses or {}) if ctx is not None else {}
    for key in responses:
        if key.startswith(KEY_PREFIX):
            job_id = key.removeprefix(KEY_PREFIX).rpartition("-")[0]
            try:
                rec = engine.get(job_id)
            except RelayError:
                continue
            if rec.principal == current().name:
                return rec.id
    return None


async def wait_answering(engine: Engine, approver: Approver, job_id: str, mode: str) -> JobRecord | None:
    """`delegate`'s wait for its job (relay.server.results.wait_for_mode), asking about its permission requests; its
    record as the wait left it (None: not waited on)."""
    if mode == "async":
        return None
    ctx = approver.ctx
    limit = auto_threshold_for(engine.settings, ctx) if mode == "auto" else float("inf")
    try:
        return await answering(approver, [job_id], lambda: wait_with_progress(engine, job_id, limit, ctx))
    except anyio.get_cancelled_exc_class():
        # As wait_for_mode: a user interrupt stops the work; a client's own timeout only stopped waiting.
        if not cancelled_by_client_timeout(ctx):
            with anyio.CancelScope(shield=True):
                await engine.cancel(job_id)
        raise
