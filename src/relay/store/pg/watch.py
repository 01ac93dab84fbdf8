"""The store's version on PostgreSQL: a count of the change notices a thread hears on a connection of its own.

SQLite tells cheaply that another connection committed (`PRAGMA data_version`); PostgreSQL has no such
number, but every change of a job is announced after its commit (the triggers of pg/schema.py). A
thread LISTENs for those notices and counts them, so `queue_version()` reads a number in memory and
the engine's watch loop asks the database nothing until something changed. While the thread is not
listening (PostgreSQL restarting) every call returns a new number: the caller then reads the store
itself, as it would without notices; each (re)connection counts as a change, since what happened
meanwhile was not announced.
"""

from __future__ import annotations

import select
import threading
from collections.abc import Callable

import psycopg
from psycopg.pq.abc import PGconn

from relay.store.pg.connect import CONNECT_TIMEOUT_S, conninfo
from relay.store.pg.schema import JOBS_CHANNEL, QUEUE_CHANNEL

# How often the listening thread looks at whether its store was closed (it waits for notices meanwhile).
STOP_CHECK_S = 1.0
# The first wait before connecting again after the connection dropped, and the longest.
RECONNECT_FIRST_S = 0.1
RECONNECT_MAX_S = 2.0


class ChangeCount:
    """How many change notices of the store this process has heard, all of them and those of other processes
    (`own(pid)` tells whether the server process that sent one serves a connection of this one); started by
    the first `version()`."""

    def __init__(self, url: str, own: Callable[[int], bool] = lambda _: False) -> None:
        self._url = url
        self._own = own
        self._count = 0
        self._others = 0
        self._queued = 0  # notices on the queue's channel (a job became claimable) of other processes
        self._mu = threading.Condition()
        self._up = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def version(self, *, others: bool = False) -> int:
        """The count of every notice, or (`others`) of those another process's writes sent."""
        with self._mu:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="relay-store-notices", daemon=True)
                self._thread.start()
        # The first call waits for the LISTEN, so a change committed after it returns is counted.
        if not self._up.wait(CONNECT_TIMEOUT_S if self._count == 0 else 0):
            self._bump()  # not listening: a new number, so the caller looks at the store itself
        with self._mu:
            return self._others if others else self._count

    def queued(self) -> int:
        """The count of notices that another process queued a job (this one's own are known to it), and of
        reconnections."""
        self.version()
        with self._mu:
            return self._queued

    def wait_past(self, version: int, timeout: float, *, others: bool = False) -> bool:
        """Block until the count passes `version` (True) or `timeout` seconds went by (False)."""
        self.version()  # listening from now on
        with self._mu:
            return self._mu.wait_for(lambda: (self._others if others else self._count) > version, timeout)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(STOP_CHECK_S + CONNECT_TIMEOUT_S)

    def _bump(self, sender: int | None = None, queued: bool = True) -> None:
        """One more notice (sent by the server process `sender`; None: a (re)connection, which counts for all;
        `queued`: on the queue's channel)."""
        other = sender is None or not self._own(sender)
        with self._mu:
            self._count += 1
            self._others += int(other)
            self._queued += int(queued and other)
            self._mu.notify_all()

    def _hear(self, pg: PGconn) -> None:
        """Count the notices as they come, until closed or the connection fails (libpq's own calls: a notice costs
        this thread a few microseconds, at the moment a commit's answer reaches the thread that made it)."""
        poll = select.poll()
        poll.register(pg.socket, select.POLLIN)
        queue = QUEUE_CHANNEL.encode()
        while not self._stop.is_set():
            if poll.poll(STOP_CHECK_S * 1000):
                pg.consume_input()  # a connection that failed raises here
                while (notice := pg.notifies()) is not None:
                    self._bump(notice.be_pid, notice.relname == queue)

    def _run(self) -> None:
        delay = RECONNECT_FIRST_S
        while not self._stop.is_set():
            try:
                with psycopg.connect(conninfo(self._url), autocommit=True) as conn:
                    for channel in (JOBS_CHANNEL, QUEUE_CHANNEL):
                        conn.execute(f"LISTEN {channel}".encode())
                    self._bump()
                    self._up.set()
                    delay = RECONNECT_FIRST_S
                    self._hear(conn.pgconn)
            except psycopg.Error:
                pass
            self._up.clear()
            self._bump()
            self._stop.wait(delay)
            delay = min(delay * 2, RECONNECT_MAX_S)
