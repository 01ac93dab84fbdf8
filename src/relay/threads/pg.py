"""Conversation threads in the PostgreSQL store: every front of one store continues every thread.

Loaded only when RELAY_STORE names PostgreSQL (`open_threads`), so relay on SQLite never loads psycopg.
The tables are those of migration m004_threads (store/pg/schema.py); the body (lifetime, turn limit,
principal filter, turns numbered one after the other across fronts) is the SQLite store's, `ThreadStore`.
Each store holds one connection (pg/conn.py's OneConn: one a closed store of this process left, when there
is one, so opening a thread store per call costs ~1 ms instead of ~8 ms on loopback).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from relay.store.pg.conn import IDLE_KEPT, OneConn
from relay.threads import ThreadSettings, ThreadStore

__all__ = ["IDLE_KEPT", "PgThreads"]


class PgThreads(ThreadStore):
    """Threads in the PostgreSQL store at `url`; safe to share between the event loop and worker threads."""

    def __init__(
        self, url: str, config: ThreadSettings | None = None, *, clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__(config, clock, _utf8)
        self.url = url
        self._db = OneConn(url)


def _utf8(content: str) -> bytes:
    """A turn's text as the bytea column keeps it: UTF-8 (a turn may hold NUL, which PostgreSQL's text cannot)."""
    return content.encode("utf-8", "surrogatepass")
