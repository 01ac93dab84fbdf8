"""The audit witness on PostgreSQL: a table relay's role may add rows to and read, never change or remove.

The audit log, audit.head and the store's mark all belong to relay's user and relay's database role, so
a process with relay's rights can drop a line, re-chain the rest and rewrite all three. The witness is
what it cannot rewrite: each entry's seq and hash, written also to `audit_witness.entries`, a table
owned by another role (the operator creates it with `relay audit witness-sql`), on which relay's role
holds INSERT (of log, seq and hash; `at` is the server's clock) and SELECT only. `relay audit verify`
checks the log against its rows, and `witness_status` says whether the table really is out of reach:
a role that owns the table, its schema or the database, may UPDATE, DELETE, TRUNCATE or add a trigger,
is a superuser or may create roles, can rewrite it, and relay says so at start and in `relay doctor`.

Rows are written off the job's path (as the mark, store/marks.py): a thread writes every entry given to
`put`, in order, batched, retrying while the server is away. An entry is witnessed a moment after it
is written; one written while the server is away, or by a relay killed in that moment, is not, and
`relay audit verify` says which.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg

from relay.store.marks import Behind
from relay.store.pg.connect import conninfo
from relay.store.pg.errors import redact, relay_errors

logger = logging.getLogger("relay.audit")

SCHEMA = "audit_witness"
TABLE = f"{SCHEMA}.entries"
# Rows kept while the server is away; past this the oldest are dropped (verify then finds them unwitnessed).
MAX_PENDING = 100_000

# A batch of rows in one statement: (log, [seq], [hash]).
INSERT_ROWS = f"INSERT INTO {TABLE} (log, seq, hash) SELECT %s, s, h FROM unnest(%s::bigint[], %s::text[]) AS w(s, h)"
_ROWS = f"SELECT seq, hash FROM {TABLE} WHERE log = %s ORDER BY seq, at"
_ROLE = (
    "SELECT current_user, to_regclass(%s) IS NOT NULL, r.rolsuper, r.rolcreaterole,"
    " pg_has_role(d.datdba, 'MEMBER') FROM pg_roles r, pg_database d"
    " WHERE r.rolname = current_user AND d.datname = current_database()"
)
_TABLE = (
    "SELECT has_any_column_privilege(c.oid, 'INSERT'), has_any_column_privilege(c.oid, 'SELECT'),"
    " has_any_column_privilege(c.oid, 'UPDATE'), has_table_privilege(c.oid, 'DELETE'),"
    " has_table_privilege(c.oid, 'TRUNCATE'), has_table_privilege(c.oid, 'TRIGGER'),"
    " pg_has_role(c.relowner, 'MEMBER'), pg_has_role(n.nspowner, 'MEMBER'),"
    " has_column_privilege(c.oid, 'at', 'INSERT')"
    " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass(%s)"
)
# What each column of _TABLE (from the third) lets relay's role do to the witness.
_TABLE_POWERS = (
    "UPDATE it",
    "DELETE from it",
    "TRUNCATE it",
    "add a trigger to it",
    "owns it",
    f"owns its schema {SCHEMA} (and may drop the table)",
)


@dataclass(frozen=True)
class WitnessStatus:
    """Whether the witness table exists, and what relay's role (`role`) can do to it."""

    role: str
    present: bool
    can_insert: bool = False
    can_select: bool = False
    # What relay's role could do to rewrite the witness (empty: nothing; the witness holds).
    powers: tuple[str, ...] = ()
    # The role may write `at` itself (the server's clock no longer dates each row).
    sets_time: bool = False

    @property
    def holds(self) -> bool:
        """The witness exists, relay's role can add rows and read them, and cannot change or remove any."""
        return self.present and self.can_insert and self.can_select and not self.powers

    def describe(self) -> str:
        """One sentence for `relay doctor`, the start log and `relay audit verify`."""
        if not self.present:
            return (
                f"no witness table {TABLE}: a rewrite of the log, audit.head and the store's mark together by a "
                f"process with relay's rights is not detectable (create it: relay audit witness-sql)"
            )
        if not (self.can_insert and self.can_select):
            return (
                f"{TABLE} exists but relay's role {self.role} cannot INSERT and SELECT it: nothing is witnessed "
                f"(run the GRANT of relay audit witness-sql --role {self.role})"
            )
        if self.powers:
            return (
                f"{TABLE} does NOT hold: relay's role {self.role} {', '.join(self.powers)}, so a process with "
                f"relay's rights can rewrite the witness too (relay audit witness-sql shows the setup)"
            )
        clock = "; it may also set each row's time" if self.sets_time else ""
        return f"witnessed by {TABLE}: relay's role {self.role} can add rows and read them, not change or remove any{clock}"


def witness_status(conn: psycopg.Connection[Any]) -> WitnessStatus:
    """What relay's role (the connection's user) can do to the witness table."""
    row = conn.execute(_ROLE, (TABLE,)).fetchone()
    assert row is not None  # current_user is a role and current_database() a database
    role, present, superuser, createrole, owns_db = (str(row[0]), bool(row[1]), *(bool(v) for v in row[2:]))
    powers = [
        *(["is a superuser"] if superuser else []),
        *(["may create roles (CREATEROLE: it can make itself a member of the table's owner)"] if createrole else []),
        *(["owns the database (and may drop it with the witness)"] if owns_db else []),
    ]
    if not present:
        return WitnessStatus(role, False, powers=tuple(powers))
    flags = conn.execute(_TABLE, (TABLE,)).fetchone()
    assert flags is not None
    powers += [power for power, held in zip(_TABLE_POWERS, flags[2:8], strict=True) if held]
    return WitnessStatus(role, True, bool(flags[0]), bool(flags[1]), tuple(powers), bool(flags[8]))


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def setup_sql(role: str) -> str:
    """The SQL an operator runs, as a role other than `role` (relay's), in relay's database: the witness table
    owned by that other role, with INSERT (of log, seq and hash) and SELECT granted to `role` only."""
    who = _ident(role)
    return f"""-- The audit witness of relay (`relay audit verify` checks the log against it).
-- Run this in relay's database as a role OTHER than relay's {who} (the database's owner, or a role made
-- for it), e.g. psql -U postgres -d DB -f witness.sql. {who} must not own the database, the table or its
-- schema, be a superuser or have CREATEROLE: `relay doctor` says whether the witness holds.
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
CREATE TABLE IF NOT EXISTS {TABLE} (
    log TEXT NOT NULL,
    seq BIGINT NOT NULL,
    hash TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL DEFAULT extract(epoch FROM clock_timestamp())
);
CREATE INDEX IF NOT EXISTS entries_log_seq ON {TABLE} (log, seq);
REVOKE ALL ON SCHEMA {SCHEMA} FROM PUBLIC;
REVOKE ALL ON {TABLE} FROM PUBLIC;
GRANT USAGE ON SCHEMA {SCHEMA} TO {who};
GRANT SELECT, INSERT (log, seq, hash) ON {TABLE} TO {who};
"""


def status_at(url: str) -> WitnessStatus:
    """`witness_status` of the store at `url` (a RelayError when it cannot be reached)."""
    with relay_errors(url), psycopg.connect(conninfo(url), autocommit=True) as conn:
        return witness_status(conn)


@contextmanager
def witness_rows(url: str, log: str) -> Generator[tuple[WitnessStatus, Iterator[tuple[int, str]] | None]]:
    """The witness's status at `url` and, when relay's role can read it, its rows of `log` (seq, hash) in seq
    order, streamed while the block runs."""
    with relay_errors(url), psycopg.connect(conninfo(url), autocommit=True) as conn:
        status = witness_status(conn)
        if not (status.present and status.can_select):
            yield status, None
            return
        rows = ((int(seq), str(line_hash)) for seq, line_hash in conn.cursor().stream(_ROWS, (log,)))
        yield status, rows


def where(url: str) -> str:
    """The witness as a reader is told where it is (the URL without its password)."""
    return f"{TABLE} in {redact(url)}"


class WitnessWriter(Behind[list[tuple[int, str]]]):
    """Hands every (seq, hash) given to `put` to `write`, in order and in batches, in a thread of its own."""

    name = "relay-audit-witness"

    def __init__(self, write: Callable[[list[int], list[str]], None]) -> None:
        super().__init__(lambda batch: write([seq for seq, _ in batch], [line_hash for _, line_hash in batch]))
        self._pending: list[tuple[int, str]] = []
        self.dropped = 0

    def _add(self, seq: int, line_hash: str) -> None:
        self._pending.append((seq, line_hash))
        if len(self._pending) > MAX_PENDING:
            self.dropped += len(self._pending) - MAX_PENDING
            del self._pending[:-MAX_PENDING]

    def _ready(self) -> bool:
        return bool(self._pending)

    def _take(self) -> list[tuple[int, str]]:
        batch, self._pending = self._pending, []
        return batch

    def _warn(self, taken: list[tuple[int, str]], exc: Exception) -> None:
        logger.warning("audit witness write failed (%d entries wait): %s", len(taken), exc)

    def _give_back(self, taken: list[tuple[int, str]]) -> None:
        self._pending[:0] = taken
