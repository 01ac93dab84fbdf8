"""Permission grants: a delegation never gets more power than the person gave.

The person sets the highest permission a calling model may obtain (`[security] grant`, `RELAY_GRANT`
in one client's relay entry, or a full-access compat profile they chose). A job whose permission is
above its grant starts only with the person's consent: a surface that can ask the person (MCP
elicitation) sets a `Confirmer` for its calls, and `confirm` asks through it; without one, or when the
person declines, the job is refused with `PERMISSION_NOT_GRANTED`, naming the grant, the requested
level and how to change the grant. Nothing here knows MCP: surfaces plug in through the context
variables below, the way `SUBMITTED_VIA` records where a job came from.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol, TypeVar

from relay.config import PERMISSIONS, Settings
from relay.errors import ErrorCode, RelayError
from relay.principal import current

# How much of the task a confirmation form and a refusal's audit entry quote.
TASK_PREVIEW_CHARS = 400

Action = Literal["accept", "decline", "cancel", "unavailable", "capped"]
"""The person's answer; `unavailable`: nobody could be asked (no elicitation, a headless client); `capped`:
nobody was asked, the level is above the acting principal's cap."""


def rank(level: str) -> int:
    return PERMISSIONS.index(level)


@dataclass(frozen=True)
class Ask:
    """What a person is asked to confirm: which agent runs what, where, with which permission, above which grant."""

    agent: str
    cwd: str
    permission: str
    grant: str
    grant_source: str
    prompt: str
    via: str | None
    principal: str | None

    @property
    def task(self) -> str:
        text = " ".join(self.prompt.split())
        return text if len(text) <= TASK_PREVIEW_CHARS else text[:TASK_PREVIEW_CHARS] + "…"

    def record(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "cwd": self.cwd,
            "permission": self.permission,
            "grant": self.grant,
            "grant_source": self.grant_source,
            "via": self.via,
            "principal": self.principal,
            "task": self.task,
        }


@dataclass(frozen=True)
class Answer:
    """A person's answer to an `Ask`; `remembered`: given earlier in this session ("for this session")."""

    action: Action
    for_session: bool = False
    remembered: bool = False


class Confirmer(Protocol):
    """Asks the person behind the current call (a surface's, e.g. MCP elicitation)."""

    def __call__(self, ask: Ask) -> Awaitable[Answer]: ...


# How a refusal's audit entry names an answer the surface refused to take as the person's (relay.server.confirm:
# one without relay's sealed question, replayed, expired, or answering another question).
STALE = "stale"

By = Literal["grant", "confirmation", "session", "person"]
"""What allowed a job's permission: its grant; the person's yes to a form now, or earlier "for this
session"; or the person themself choosing it (`relay run --permission full` at a terminal)."""


@dataclass(frozen=True)
class Consent:
    """The person's yes for this submission: up to `level`, and how it was given."""

    level: str
    by: By
    for_session: bool = False


@dataclass(frozen=True)
class Permit:
    """Why a job may run at its permission: within the grant, or by the person's consent. Recorded with the job."""

    permission: str
    grant: str
    grant_source: str
    by: By
    principal: str | None
    for_session: bool = False

    def record(self) -> dict[str, Any]:
        """What the job's request and its `queued` audit entry keep: the level, the grant, who allowed it."""
        names = ("permission", "grant", "grant_source", "by", "for_session", "principal")
        return {name: getattr(self, name) for name in names}


PRINCIPAL: ContextVar[str | None] = ContextVar("relay_principal", default=None)
"""Who asks for the jobs submitted in this context ("local" on stdio, "http" ...), for the audit log."""
CONFIRMER: ContextVar[Confirmer | None] = ContextVar("relay_confirmer", default=None)
"""How to ask the person behind the current call; None: nobody can be asked (the job is refused)."""
_CONSENT: ContextVar[Consent | None] = ContextVar("relay_consent", default=None)


_T = TypeVar("_T")


@contextmanager
def _set(var: ContextVar[_T], value: _T) -> Generator[None]:
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)


def asked_by(principal: str | None, confirmer: Confirmer | None) -> Any:
    """Jobs submitted inside this block record `principal` and ask the person through `confirmer`."""

    @contextmanager
    def both() -> Generator[None]:
        with _set(PRINCIPAL, principal), _set(CONFIRMER, confirmer):
            yield

    return both()


def consented(consent: Consent) -> Any:
    """Submissions inside this block run up to `consent.level`: the person said yes."""
    return _set(_CONSENT, consent)


def as_allowed(request: dict[str, Any]) -> Any:
    """A stored job prepared again (after a restart) keeps what allowed its permission when it was submitted."""
    record: Any = request.get("grant")
    if not isinstance(record, dict) or record.get("permission") not in PERMISSIONS:  # pyright: ignore[reportUnknownMemberType]
        return _set(_CONSENT, _CONSENT.get())
    allowed: dict[str, Any] = record  # pyright: ignore[reportUnknownVariableType]
    recorded = allowed.get("by")
    by: By = recorded if recorded in ("grant", "confirmation", "session", "person") else "person"
    return consented(Consent(str(allowed["permission"]), by, bool(allowed.get("for_session"))))


def chosen_by_the_person(level: str) -> Any:
    """Submissions inside this block were chosen by the person themself (a command they typed), up to `level`."""
    return consented(Consent(level, "person"))


def grant_for(settings: Settings, via: str | None) -> tuple[str, str]:
    """The grant of a job and where it comes from: the configured one, raised by what the person chose.

    A named token's own `grant` stands in for the relay's; `[jobs] default_permission` is the person's own
    choice for every job, so it grants that much; a full-access profile the person serves grants its level to
    its own toolset's jobs. Nothing raises a grant past the acting principal's cap.
    """
    who = current()
    level, source = settings.grant, settings.grant_source
    if who.grant is not None:
        level, source = who.grant, f"[server.tokens.{who.name}] grant"
    if rank(settings.default_permission) > rank(level):
        level, source = settings.default_permission, "[jobs] default_permission"
    toolset = (via or "").split("/", 1)[0]
    chosen = settings.toolset_grants.get(toolset)
    if chosen is not None and rank(chosen) > rank(level):
        level, source = chosen, f"profile {toolset} (chosen with relay serve --profile {toolset})"
    if who.cap is not None and rank(level) > rank(who.cap):
        level, source = who.cap, f"[server.tokens.{who.name}] cap"
    return level, source


def cap_for(grant: str, source: str) -> tuple[str, str]:
    """The most any confirmation can raise the acting principal's jobs to, and where that comes from.

    The local person (stdio, the CLI) and an admin token may confirm up to `full`. A `user` token's client is
    the remote user, not the person who runs relay, so by default it cannot confirm past its grant.
    """
    who = current()
    if who.cap is not None:
        return who.cap, f"[server.tokens.{who.name}] cap"
    if who.is_admin:
        return PERMISSIONS[-1], "no cap"
    return grant, f"{source}, the cap of user token {who.name!r}"


def permit(settings: Settings, permission: str, *, agent: str, cwd: str, prompt: str, via: str | None) -> Permit:
    """The decision point: may a job run at `permission`? Raises `GrantExceeded` when the person must say so,
    `AboveCap` when nobody may (above the acting principal's cap)."""
    grant, source = grant_for(settings, via)
    principal = PRINCIPAL.get()
    if rank(permission) <= rank(grant):
        return Permit(permission, grant, source, "grant", principal)
    ask = Ask(agent, cwd, permission, grant, source, prompt, via, principal)
    cap, cap_source = cap_for(grant, source)
    if rank(permission) > rank(cap):
        raise AboveCap(settings, ask, cap, cap_source)
    consent = _CONSENT.get()
    if consent is not None and rank(permission) <= rank(consent.level):
        return Permit(permission, grant, source, consent.by, principal, consent.for_session)
    raise GrantExceeded(settings, ask)


class GrantExceeded(RelayError):
    """A job above its grant that no person confirmed: relay did not start it."""

    def __init__(self, settings: Settings, ask: Ask, answer: Answer | None = None) -> None:
        self.ask = ask
        self.answer = answer
        why = {
            None: "no person has confirmed it",
            "unavailable": "this client cannot ask the person (no MCP elicitation, or a headless run)",
            "decline": "the client declined the confirmation (the person said no, or a headless run declines unasked)",
            "cancel": "the client cancelled the confirmation (the person dismissed it, or a headless run such as "
            "`claude -p` cancels unasked)",
            "accept": "",
            "capped": "it is above the acting principal's cap",
        }[answer.action if answer is not None else None]
        message = (
            f"permission '{ask.permission}' is above the grant '{ask.grant}' ({ask.grant_source}) and {why}: "
            f"relay did not start {ask.agent}"
        )
        config = settings.home / "config.toml"
        hint = (
            f"retry with permission '{ask.grant}' or lower; only the person can allow '{ask.permission}': "
            f'[security] grant = "{ask.permission}" in {config}, or `relay install CLIENT --grant {ask.permission}` '
            "for one client, or confirm when a client that supports MCP elicitation asks"
        )
        super().__init__(ErrorCode.PERMISSION_NOT_GRANTED, message, hint)


class AboveCap(GrantExceeded):
    """A job above the acting principal's cap: no confirmation can allow it, so nobody is asked."""

    def __init__(self, settings: Settings, ask: Ask, cap: str, cap_source: str) -> None:
        self.ask = ask
        self.answer = Answer("capped")
        self.cap = cap
        who = current().name
        RelayError.__init__(
            self,
            ErrorCode.PERMISSION_NOT_GRANTED,
            f"permission '{ask.permission}' is above the cap '{cap}' of {who!r} ({cap_source}): no confirmation "
            f"can allow it, and relay did not start {ask.agent}",
            f"retry with permission '{ask.grant}' or lower; only the relay's operator can raise it: "
            f'[server.tokens.{who}] cap = "{ask.permission}" (and grant) in {settings.home / "config.toml"}',
        )


Audit = Callable[[str, str | None, dict[str, Any]], Any]
"""Appends an audit entry: (event, job id, data)."""


async def confirm(settings: Settings, exceeded: GrantExceeded, audit: Audit) -> Consent:
    """Ask the person (through the current call's `Confirmer`): their yes, or the refusal (on record as
    `permission.refused`; a yes is recorded with the job it starts, in its `queued` entry)."""
    confirmer = CONFIRMER.get()
    if isinstance(exceeded, AboveCap):
        answer = Answer("capped")
    else:
        try:
            answer = Answer("unavailable") if confirmer is None else await confirmer(exceeded.ask)
        except RelayError as refused:  # an answer the surface would not take (stale, replayed, not relay's question)
            audit("permission.refused", None, exceeded.ask.record() | {"answer": STALE, "why": refused.message})
            raise
    entry = exceeded.ask.record() | {
        "answer": answer.action,
        "for_session": answer.for_session,
        "remembered": answer.remembered,
    }
    if answer.action != "accept":
        audit("permission.refused", None, entry)
        raise exceeded if isinstance(exceeded, AboveCap) else GrantExceeded(settings, exceeded.ask, answer)
    return Consent(exceeded.ask.permission, "session" if answer.remembered else "confirmation", answer.for_session)


async def permit_message(
    settings: Settings, permission: str, *, agent: str, cwd: str, message: str, via: str | None, audit: Audit
) -> Permit:
    """May a message go into the live session of a job that runs at `permission` (`job_send`)? Within the caller's
    grant, yes; above it the message is a new task: the person is asked again (`confirm`), else `GrantExceeded`."""

    def check() -> Permit:
        return permit(settings, permission, agent=agent, cwd=cwd, prompt=message, via=via)

    try:
        return check()
    except GrantExceeded as exceeded:
        consent = await confirm(settings, exceeded, audit)
    with consented(consent):
        return check()


async def consent_for(settings: Settings, check: Callable[[], Any], agents: str | None, audit: Audit) -> Consent | None:
    """For jobs a task will submit later (best_of's candidates): ask the person now, while the call that starts
    the task can still ask. None when `check` (validating one such job) passes within the grant; raises the
    refusal, as the door's `admit_confirmed` does. `agents` names every agent in the form when there are several."""
    try:
        check()
        return None
    except GrantExceeded as exceeded:
        ask = exceeded.ask if agents is None else replace(exceeded.ask, agent=agents)
        return await confirm(settings, GrantExceeded(settings, ask), audit)


# A caller's string that becomes a process ---------------------------------------------------------------------

# A command a caller names may do anything relay's user can: it is permitted exactly like delegate(permission="full").
COMMAND_PERMISSION = "full"
# What a `command.permitted` audit entry keeps of the command (more than any command a person could be asked about).
COMMAND_RECORD_CHARS = 4000


class CommandRefused(GrantExceeded):
    """A command a caller named that no grant and no person allowed: relay did not start it."""

    def __init__(self, refused: GrantExceeded, hint: str) -> None:
        self.ask = refused.ask
        self.answer = refused.answer
        RelayError.__init__(self, ErrorCode.PERMISSION_NOT_GRANTED, refused.message, hint)


def command_hint(settings: Settings, instead: str) -> str:
    """What a refused caller can do: `instead` (the tool's own way round), or what only the person can do."""
    config = settings.home / "config.toml"
    return (
        f"{instead}; a command a caller names runs only as a 'full' action: the person confirms it when a client "
        f'that supports MCP elicitation asks, or sets [security] grant = "full" in {config} (or `relay install '
        "CLIENT --grant full`), or runs it themself from a terminal"
    )


async def permit_command(
    settings: Settings,
    command: str,
    *,
    what: str,
    cwd: str,
    via: str | None,
    audit: Audit,
    configured: bool = False,
    instead: str = "leave the command out",
    job_id: str | None = None,
) -> Permit:
    """May a caller's string become a process (a land's test, a stdio MCP server)? A `full` action: it runs when the
    person chose it (`configured` in config.toml, or typed at a terminal) or `full` is within the grant; else the
    person is asked as for `delegate(permission="full")` (`confirm`, naming `what`, showing the command), and
    without their yes it is `CommandRefused`. A command too long to show whole is never asked about: refused.
    A permitted command is on record as `command.permitted`."""
    principal = PRINCIPAL.get()

    def check() -> Permit:
        return permit(settings, COMMAND_PERMISSION, agent=what, cwd=cwd, prompt=command, via=via)

    if configured:
        grant, source = grant_for(settings, via)
        allowed = Permit(COMMAND_PERMISSION, grant, source, "person", principal)
    else:
        try:
            allowed = check()
        except GrantExceeded as exceeded:
            shown_whole = len(" ".join(command.split())) <= TASK_PREVIEW_CHARS
            if not shown_whole:
                instead += (
                    ", or put the command in a script and name the script (a confirmation form shows a command of"
                    f" up to {TASK_PREVIEW_CHARS} characters)"
                )
            try:
                with _set(CONFIRMER, CONFIRMER.get() if shown_whole else None):
                    consent = await confirm(settings, exceeded, audit)
            except GrantExceeded as refused:
                raise CommandRefused(refused, command_hint(settings, instead)) from None
            with consented(consent):
                allowed = check()
    entry = {"command": command[:COMMAND_RECORD_CHARS], "what": what, "cwd": cwd, "via": via} | allowed.record()
    audit("command.permitted", job_id, entry)
    return allowed
