"""How the PostgreSQL store connects: a URL plus relay's timeout and keepalive settings."""

from __future__ import annotations

import select
import time

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

# How long one connection attempt may take (an address that drops packets answers nothing).
CONNECT_TIMEOUT_S = 5
# TCP keepalives, so a connection to a server that vanished (power loss, a cut link) is found dead in ~30 s.
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 4}
# A connection idle longer than this is checked (one empty round trip) before it is used again; one used a
# moment ago is checked only when the server sent something meanwhile (a server that restarts or ends the
# session says so, then closes it): a lost server costs a reconnect, a busy caller no round trip per call.
CHECK_IDLE_S = 1.0


def conninfo(url: str) -> str:
    """`url` with relay's connection settings (timeout, keepalives) added; the URL's own settings win."""
    return make_conninfo(url, **({"connect_timeout": CONNECT_TIMEOUT_S} | KEEPALIVES | conninfo_to_dict(url)))


def needs_check(conn: psycopg.Connection[object], used_at: float) -> bool:
    """Whether `conn`, last used at `used_at` (time.monotonic()), must be checked before it is used again."""
    return time.monotonic() - used_at > CHECK_IDLE_S or bool(select.select([conn.fileno()], [], [], 0)[0])
