"""The dashboard's read-only queries on a PostgreSQL store: the same body (`QueriesBody`) as on relay.db.

Loaded only when the store is a postgresql:// URL (psycopg comes with it). A small pool of its own,
each connection's transactions read-only. The jobs table keeps a job's request and result as JSON
text (pg/schema.py), read with PostgreSQL's json operators (the store's dialect, pg/conn.py).
"""

from __future__ import annotations

from relay.store.pg.conn import PG, Conn, PoolConn
from relay.web._queries import QueriesBody

__all__ = ["PG", "PgJobQueries"]

# Connections the dashboard keeps to the server (its queries are short; pages render one at a time or so).
POOL_SIZE = 2
# How long a query waits for a free connection (or for the server to come back) before STORE_UNAVAILABLE.
POOL_WAIT_S = 10.0


def _read_only(conn: Conn) -> None:
    conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")


class PgJobQueries(QueriesBody):
    """Read-only queries on the PostgreSQL store at `url`, safe to share between worker threads."""

    def __init__(self, url: str, *, pool_size: int = POOL_SIZE, wait_s: float = POOL_WAIT_S) -> None:
        self._db = PoolConn(url, size=pool_size, wait_s=wait_s, name="relay-dashboard", configure=_read_only)
