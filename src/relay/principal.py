"""Who asked: the principal a job, an MCP task, a thread or a tracker change belongs to.

Each HTTP bearer token named in config (`[server.tokens.NAME]`) is a principal with a role: a
`user` sees, waits on, pages and cancels only what it started (anything else is "not found"); an
`admin` sees everything. stdio, the CLI, the dashboard's local user and HTTP on loopback without
tokens act as the one local user, `local`, who sees everything (as before principals existed).

The surface that knows who is calling (the HTTP front, per request) sets it with `acting_as`; the
core reads it with `current()` and hands the store `visible_to()` as a filter.
"""

from __future__ import annotations

import re
from collections.abc import Generator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal

Role = Literal["user", "admin"]
ROLES: tuple[Role, ...] = ("user", "admin")
# What a principal's name may be: it is shown in lists and used as a filter value.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
LOCAL_NAME = "local"


@dataclass(frozen=True)
class Principal:
    """A caller: its name (recorded on what it starts) and its role."""

    name: str
    role: Role = "user"
    # What this principal's calls run without asking (`[server.tokens.NAME] grant`; None: the relay's grant) and
    # the level no confirmation can raise them past (`cap`; None: `full` for an admin, the grant for a user).
    grant: str | None = None
    cap: str | None = None

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def sees(self, owner: str | None) -> bool:
        """Whether this caller may see something recorded as `owner`'s (None: recorded before principals)."""
        return self.is_admin or (owner or LOCAL_NAME) == self.name


# The single local user: stdio, the CLI, and HTTP on loopback without tokens.
LOCAL = Principal(LOCAL_NAME, "admin")

_CURRENT: ContextVar[Principal] = ContextVar("relay_principal", default=LOCAL)


def current() -> Principal:
    """The principal the code running now acts for (LOCAL unless a surface said otherwise)."""
    return _CURRENT.get()


def visible_to() -> str | None:
    """The store filter for the current principal: its name for a `user`, None (everything) for an `admin`."""
    who = _CURRENT.get()
    return None if who.is_admin else who.name


@contextmanager
def acting_as(principal: Principal) -> Generator[Principal]:
    """Run the block as `principal`: what it starts records that name, what it reads is filtered by it."""
    token = _CURRENT.set(principal)
    try:
        yield principal
    finally:
        _CURRENT.reset(token)
