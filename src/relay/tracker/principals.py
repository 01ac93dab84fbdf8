"""Whose a task is: the principal of every write, recorded by the tracker's own connection, and the filter reads use.

A task belongs to the principal that created it (`created_by`; a task from before principals were
recorded is the local user's). A `user` token sees, changes, links and deletes only its own tasks;
another's id answers as an unknown one. An admin, and the local user (stdio, the CLI), see all.
Session links (`task_sessions.principal`) and tombstones (`task_tombstones.principal`) record whose
they are too: a link shows only to the principal that made it, so a user linking a task to another's
session id puts nothing into that session's summary.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from relay.principal import LOCAL_NAME, current, visible_to

# A task row's owner (created_by; NULL before principals were recorded: the local user).
OWNER = "COALESCE({0}created_by, 'local')"


def owner_of(created_by: str | None) -> str:
    """The principal a task (or link, or tombstone) belongs to."""
    return created_by or LOCAL_NAME


def owned(alias: str = "", who: str | None = None, *, everyone: bool = False) -> tuple[str, tuple[Any, ...]]:
    """An SQL condition and its parameters limiting task rows (`alias.`) to what `who` (default: the
    current principal's filter, None for an admin) may see; `everyone`: no limit (relay's own work)."""
    name = None if everyone else (who if who is not None else visible_to())
    if name is None:
        return "1=1", ()
    return f"{OWNER.format(alias)}=?", (name,)


def linker() -> str:
    """The name a new session link or tombstone records."""
    return current().name


def record_principals(db: sqlite3.Connection) -> None:
    """Every write to a task through this connection records who made it (relay/principal.py): `created_by`
    on insert, `changed_by` on every insert and update, whichever path writes (tools, dashboard, JSONL import).
    The JSONL import then sets `created_by` to the principal its line names (merge.py), never the importer."""
    db.create_function("relay_principal", 0, lambda: current().name)
    db.executescript(
        """
        CREATE TEMP TRIGGER IF NOT EXISTS tasks_created_by AFTER INSERT ON main.tasks BEGIN
            UPDATE tasks SET created_by = relay_principal(), changed_by = relay_principal() WHERE rowid = NEW.rowid;
        END;
        CREATE TEMP TRIGGER IF NOT EXISTS tasks_changed_by AFTER UPDATE ON main.tasks BEGIN
            UPDATE tasks SET changed_by = relay_principal() WHERE rowid = NEW.rowid;
        END;
        """
    )
