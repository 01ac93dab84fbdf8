"""Who changed a task: the principal of every write, recorded by the tracker's own connection."""

from __future__ import annotations

import sqlite3

from relay.principal import current


def record_principals(db: sqlite3.Connection) -> None:
    """Every write to a task through this connection records who made it (relay/principal.py): `created_by`
    on insert, `changed_by` on every insert and update, whichever path writes (tools, dashboard, JSONL import)."""
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
