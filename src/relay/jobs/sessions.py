"""Which agent session a request resumes: the caller's own, by an id its CLI cannot read as anything else.

An explicit `session_id` must be the caller's (a `user` never resumes another principal's session) and of
the CLI's own id format, or one relay recorded (relay.agents.values). `continue_latest` resolves to the
caller's own newest session in the cwd and resumes it by its id: the CLI's own "latest" (claude -c, codex
resume --last, gemini --resume latest, copilot --continue) picks whatever conversation the CLI has, maybe
another principal's, so it is used only where it can be no one else's (the one local user, no named tokens).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from relay.agents import values
from relay.config import Settings
from relay.errors import ErrorCode, RelayError, invalid
from relay.principal import LOCAL_NAME, current
from relay.store import JobStore, SessionRecord

# How many of an agent's recent sessions continue_latest looks through for the newest one in its cwd.
LATEST_SESSION_SCAN = 200


@dataclass(frozen=True)
class Resumed:
    """The session a request resumes: relay's record of it (None: relay knows none), and how the CLI is told."""

    record: SessionRecord | None = None
    session_id: str | None = None
    continue_latest: bool = False  # the CLI's own latest (only where it can be nobody else's)


def latest_session(store: JobStore, agent: str, cwd: str) -> SessionRecord | None:
    """The current principal's own most recently used session of `agent` in `cwd` (what `continue_latest`
    resumes): never another principal's, whatever the caller's role."""
    own = store.list_sessions(agent=agent, limit=LATEST_SESSION_SCAN, principal=current().name)
    return next((s for s in own if s.cwd == cwd), None)


def cli_latest_is_own(settings: Settings, store: JobStore, agent: str) -> bool:
    """Whether the CLI's own "latest" can only be the caller's: the one local user asks, no named tokens are
    configured, and no recent session of `agent` in the store is another principal's (a store shared with a
    front that has tokens)."""
    if settings.tokens or current().name != LOCAL_NAME:
        return False
    recent = store.list_sessions(agent=agent, limit=LATEST_SESSION_SCAN)
    return all((s.principal or LOCAL_NAME) == LOCAL_NAME for s in recent)


def resolve(
    settings: Settings,
    store: JobStore,
    agent: str,
    session_id: str | None,
    continue_latest: bool,
    cwd: Callable[[], str],
) -> Resumed:
    """The session a request resumes, checked (`cwd`: the request's resolved cwd, asked for continue_latest).

    Refused: both at once; an id of another shape than the CLI's (a value that could be read as a flag);
    another principal's session (as if there were none); continue_latest where relay knows no session of
    the caller's in cwd and the CLI's own "latest" could pick someone else's conversation."""
    if session_id and continue_latest:
        raise invalid(
            "session_id and continue_latest cannot be used together",
            "pass session_id to resume a given session, or continue_latest=true for the newest one in cwd",
        )
    if session_id:
        values.session_id_floor(agent, session_id)  # first: no lookup of a value that could be an option
        session = store.get_session(session_id, agent)
        if session is not None and not current().sees(session.principal):
            raise RelayError(
                ErrorCode.SESSION_NOT_FOUND,
                f"no {agent} session {session_id!r}",
                "list your sessions with session_list, or omit session_id to start a new one",
            )
        values.session_id(agent, session_id, recorded=session is not None)
        return Resumed(session, session_id)
    if not continue_latest:
        return Resumed()
    where = cwd()
    latest = latest_session(store, agent, where)
    if latest is not None:
        return Resumed(latest, values.resumable(latest.session_id))
    if cli_latest_is_own(settings, store, agent):
        return Resumed(continue_latest=True)  # the one local user: whatever the CLI has is theirs
    raise RelayError(
        ErrorCode.SESSION_NOT_FOUND,
        f"no {agent} session of yours in {where} to continue",
        "no session of yours in this folder: start one without continue_latest "
        "(session_list lists the sessions you can resume by session_id)",
    )


def check_cost(settings: Settings, session: SessionRecord) -> None:
    """A session at its cost cap (`[jobs] max_session_cost_usd`) is not resumed."""
    cap = settings.max_session_cost_usd
    if cap is not None and session.total_cost_usd >= cap:
        raise RelayError(
            ErrorCode.LIMIT_REACHED,
            f"session {session.session_id} has cost ${session.total_cost_usd:.4f}, at its cap of ${cap:.4f}",
            "start a new session, or raise jobs.max_session_cost_usd in config.toml",
        )
