"""Open the job store a setting names: a path is SQLite, a postgresql:// URL is PostgreSQL (loaded only then)."""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path

from relay.audit import AuditLog, Witness, open_audit, unwitnessed
from relay.config import DEFAULT_STORE_POOL_SIZE
from relay.errors import ErrorCode, RelayError
from relay.store.api import JobStore
from relay.store.db import AuditExpectation, Store, audit_expectation

PG_SCHEMES = ("postgresql://", "postgres://")


def is_pg_url(target: str | Path) -> bool:
    return isinstance(target, str) and target.startswith(PG_SCHEMES)


def open_store(
    target: str | Path, *, home: Path, audit: AuditLog | None = None, pool_size: int = DEFAULT_STORE_POOL_SIZE
) -> JobStore:
    """The job store at `target`: a SQLite file (a path, or `sqlite:///path`) or a PostgreSQL URL.

    `home` is this process's RELAY_HOME: the audit log of the jobs it changes lives there, whichever
    backend holds the jobs. `pool_size`: the connections a PostgreSQL store may hold.
    """
    if is_pg_url(target):
        from relay.store.pg import PgStore  # psycopg is loaded only by a relay that uses PostgreSQL

        return PgStore(str(target), audit if audit is not None else open_audit(home), pool_size=pool_size)
    text = str(target)
    if text.startswith("sqlite://"):
        return Store(Path(text.removeprefix("sqlite://")), audit)
    if "://" in text:
        scheme = text.split("://", 1)[0]
        raise RelayError(
            ErrorCode.CONFIG_INVALID,
            f"relay cannot keep its jobs in a {scheme}:// store",
            "use a postgresql://user@host/db URL, or a SQLite file path (the default: RELAY_HOME/relay.db)",
        )
    return Store(Path(text), audit)


def audit_expectation_at(target: str | Path, *, home: Path) -> AuditExpectation:
    """What the store at `target` records of the audit log in `home` (`relay audit verify` checks the log's end
    against it), read without creating or migrating anything."""
    if is_pg_url(target):
        from relay.store.pg.store import audit_expectation as pg_audit_expectation

        return pg_audit_expectation(str(target), home)
    return audit_expectation(Path(str(target).removeprefix("sqlite://")))


@contextmanager
def audit_witness_at(target: str | Path, *, home: Path) -> Generator[tuple[Witness | None, str]]:
    """The witness of the audit log in `home` that the store at `target` keeps (None: none that relay's role can
    read; a SQLite store has none), its rows streamed while the block runs, and one line saying what it proves."""
    if not is_pg_url(target):
        yield None, unwitnessed()
        return
    from relay.store.pg.store import audit_log_name
    from relay.store.pg.witness import where, witness_rows

    with witness_rows(str(target), audit_log_name(home)) as (status, rows):
        if rows is None:
            yield None, status.describe()
            return
        yield Witness(where(str(target)), rows, status.holds, status.describe()), status.describe()
