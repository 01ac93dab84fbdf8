"""How the PostgreSQL store connects: a URL plus relay's timeout and keepalive settings."""

from __future__ import annotations

import select
import time

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool.base import AttemptWithBackoff

# How long one connection attempt may take (an address that drops packets answers nothing).
CONNECT_TIMEOUT_S = 5
# TCP keepalives, so a connection to a server that vanished (power loss, a cut link) is found dead in ~30 s.
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 4}
# A connection idle longer than this is checked (one empty round trip) before it is used again; one used a
# moment ago is checked only when the server sent something meanwhile (a server that restarts or ends the
# session says so, then closes it): a lost server costs a reconnect, a busy caller no round trip per call.
CHECK_IDLE_S = 1.0
# A pool whose server went away tries to connect again this often, as long as it is away. psycopg_pool's own
# delay doubles (1, 2, 4, 8 ... s): after an 8 s outage a pool could stay away 7 s more, past a worker's chance to
# renew its lease (a third of 15 s). A refused connection costs the server nothing; a lease lost costs a job.
RECONNECT_EVERY_S = 0.5
AttemptWithBackoff.INITIAL_DELAY = RECONNECT_EVERY_S
AttemptWithBackoff.DELAY_BACKOFF = 1.0


def conninfo(url: str) -> str:
    """`url` with relay's connection settings (timeout, keepalives) added; the URL's own settings win."""
    return make_conninfo(url, **({"connect_timeout": CONNECT_TIMEOUT_S} | KEEPALIVES | conninfo_to_dict(url)))


def needs_check(conn: psycopg.Connection[object], used_at: float) -> bool:
    """Whether `conn`, last used at `used_at` (time.monotonic()), must be checked before it is used again."""
    return time.monotonic() - used_at > CHECK_IDLE_S or bool(select.select([conn.fileno()], [], [], 0)[0])
