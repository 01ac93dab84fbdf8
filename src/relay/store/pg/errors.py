"""PostgreSQL failures as results: psycopg's errors translated to relay codes with hints, in one place.

Like store/health.py for SQLite: every way the PostgreSQL store can fail (server down or restarting,
wrong password, unknown database, disk full on the server, a read-only standby, lock timeouts) becomes
a `RelayError` whose hint says what to do. A URL is only ever shown without its password.
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg

from relay.errors import ErrorCode, RelayError

# SQLSTATE classes and codes (PostgreSQL's appendix A) and the relay code each becomes.
_BY_STATE: dict[str, ErrorCode] = {
    "08": ErrorCode.STORE_UNAVAILABLE,  # connection exception
    "57P01": ErrorCode.STORE_UNAVAILABLE,  # admin_shutdown (the server is stopping or restarting)
    "57P02": ErrorCode.STORE_UNAVAILABLE,  # crash_shutdown
    "57P03": ErrorCode.STORE_UNAVAILABLE,  # cannot_connect_now (starting up, in recovery)
    "57014": ErrorCode.STORE_BUSY,  # query_canceled (statement_timeout)
    "40": ErrorCode.STORE_BUSY,  # transaction rollback: serialization failure, deadlock
    "55P03": ErrorCode.STORE_BUSY,  # lock_not_available
    "53100": ErrorCode.DISK_FULL,  # disk_full
    "53": ErrorCode.STORE_BUSY,  # insufficient resources: too many connections, out of memory
    "28": ErrorCode.CONFIG_INVALID,  # invalid authorization: wrong user or password
    "3D": ErrorCode.CONFIG_INVALID,  # invalid catalog name: no such database
    "25006": ErrorCode.STORE_READONLY,  # read_only_sql_transaction (a standby)
    "42501": ErrorCode.STORE_READONLY,  # insufficient_privilege
    "XX001": ErrorCode.STORE_DAMAGED,  # data_corrupted
    "XX002": ErrorCode.STORE_DAMAGED,  # index_corrupted
    "22": ErrorCode.INVALID_ARGUMENT,  # data exception: a NUL in text, a value out of range
}

# A refused connection carries no SQLSTATE (libpq reports the server's FATAL as text): what it says.
_REFUSALS: tuple[tuple[str, ErrorCode], ...] = (
    ("does not exist", ErrorCode.CONFIG_INVALID),  # no such database or role
    ("authentication failed", ErrorCode.CONFIG_INVALID),
    ("no password supplied", ErrorCode.CONFIG_INVALID),
    ("no pg_hba.conf entry", ErrorCode.CONFIG_INVALID),
    ("too many clients", ErrorCode.STORE_BUSY),
    ("connection slots are reserved", ErrorCode.STORE_BUSY),
)


def redact(url: str) -> str:
    """`url` without its password (in the authority or as a `password=` query parameter)."""
    try:
        parts = urlsplit(url)
        host = parts.netloc.rpartition("@")[2]
        user = parts.username
    except ValueError:
        return "<the PostgreSQL URL>"
    netloc = f"{user}@{host}" if user else host
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "password"])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def code_of(exc: psycopg.Error) -> ErrorCode:
    """The relay code for a psycopg error: by its SQLSTATE (code, then class), else by what a refused connection says."""
    state = exc.sqlstate
    if state is None:
        if not isinstance(exc, psycopg.OperationalError):
            return ErrorCode.INTERNAL
        text = str(exc)
        return next((code for words, code in _REFUSALS if words in text), ErrorCode.STORE_UNAVAILABLE)
    return _BY_STATE.get(state) or _BY_STATE.get(state[:2]) or ErrorCode.INTERNAL


def pg_error(exc: psycopg.Error, url: str) -> RelayError:
    """The RelayError for a failure of the PostgreSQL store at `url`."""
    where = redact(url)
    text = " ".join(str(exc).split()) or type(exc).__name__
    code = code_of(exc)
    hints = {
        ErrorCode.STORE_UNAVAILABLE: (
            f"PostgreSQL at {where} cannot be reached now: {text}",
            f"start it or check the address (pg_isready -d '{where}'); relay retries, and jobs keep running meanwhile",
        ),
        ErrorCode.STORE_BUSY: (
            f"PostgreSQL at {where} is busy: {text}",
            "retry; if it lasts, raise max_connections on the server or lower [store] pool_size on the relays",
        ),
        ErrorCode.DISK_FULL: (
            f"the disk of PostgreSQL at {where} is full: {text}",
            "free space on the database server (its data directory), then run the job again",
        ),
        ErrorCode.CONFIG_INVALID: (
            f"PostgreSQL at {where} refused relay: {text}",
            "check the user, password (or ~/.pgpass) and database name in RELAY_STORE / [store] url",
        ),
        ErrorCode.STORE_READONLY: (
            f"PostgreSQL at {where} does not let relay write: {text}",
            "point RELAY_STORE at the primary, and grant the user CREATE and write rights on the database",
        ),
        ErrorCode.STORE_DAMAGED: (
            f"PostgreSQL at {where} reports damaged data: {text}",
            "stop the relays and ask the database's administrator to check it (amcheck, a REINDEX, a restore)",
        ),
        ErrorCode.INVALID_ARGUMENT: (
            f"PostgreSQL at {where} cannot store that value: {text}",
            "remove NUL characters and out-of-range numbers from the request",
        ),
    }
    message, hint = hints.get(
        code, (f"PostgreSQL at {where}: {type(exc).__name__}: {text}", "report this as a relay bug")
    )
    return RelayError(code, message.replace(url, where), hint)


@contextmanager
def relay_errors(url: str) -> Generator[None]:
    """A psycopg failure inside the block becomes the RelayError for the store at `url` (pg_error)."""
    try:
        yield
    except psycopg.Error as exc:
        raise pg_error(exc, url) from None
