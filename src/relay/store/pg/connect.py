"""How the PostgreSQL store connects: a URL plus relay's timeout and keepalive settings."""

from __future__ import annotations

from psycopg.conninfo import conninfo_to_dict, make_conninfo

# How long one connection attempt may take (an address that drops packets answers nothing).
CONNECT_TIMEOUT_S = 5
# TCP keepalives, so a connection to a server that vanished (power loss, a cut link) is found dead in ~30 s.
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 4}


def conninfo(url: str) -> str:
    """`url` with relay's connection settings (timeout, keepalives) added; the URL's own settings win."""
    return make_conninfo(url, **({"connect_timeout": CONNECT_TIMEOUT_S} | KEEPALIVES | conninfo_to_dict(url)))
