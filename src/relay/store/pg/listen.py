"""LISTEN/NOTIFY: wake whoever waits on a job (or on the queue) the moment the store announces a change.

`PgChanges` holds one connection of its own that LISTENs on `relay_jobs` (payload: the id of the
job that changed: inserted, claimed, running, finished, cancel requested, new events or output) and
`relay_queue` (a job became queued). A waiter subscribes first, then reads the store, then waits, so a
change between its read and its wait is never missed:

    async with PgChanges(url) as changes:
        with changes.subscribe(job_id) as sub:
            while not store.get_job(job_id).is_final:
                await sub.wait(timeout)

When the connection drops (PostgreSQL restarted, the link cut) every subscriber is woken (what
happened meanwhile was not announced: read the store again) and the listener connects again, with a
backoff of RECONNECT_FIRST_S doubling to RECONNECT_MAX_S; once back, every subscriber is woken again.
Nothing here polls.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from contextlib import contextmanager
from types import TracebackType

import anyio
import psycopg
from anyio.abc import TaskGroup

from relay.errors import RelayError
from relay.store.pg.connect import conninfo
from relay.store.pg.errors import pg_error
from relay.store.pg.schema import JOBS_CHANNEL, QUEUE_CHANNEL

# The first wait before connecting again after the connection dropped, and the longest.
RECONNECT_FIRST_S = 0.1
RECONNECT_MAX_S = 2.0


class Subscription:
    """Changes of one job (or of every job, or of the queue) since the subscription began or was last waited on."""

    def __init__(self, channel: str, job_id: str | None) -> None:
        self.channel = channel
        self.job_id = job_id
        self._event = anyio.Event()

    def fire(self) -> None:
        self._event.set()

    def pending(self) -> bool:
        return self._event.is_set()

    async def wait(self, timeout: float) -> bool:
        """True as soon as a change came (at once if one came since the last wait); False after `timeout` seconds."""
        with anyio.move_on_after(timeout):
            await self._event.wait()
        fired = self._event.is_set()
        if fired:
            self._event = anyio.Event()
        return fired


class PgChanges:
    """A listener on the PostgreSQL store's channels, on its own connection, that reconnects by itself."""

    def __init__(self, url: str, channels: tuple[str, ...] = (JOBS_CHANNEL, QUEUE_CHANNEL)) -> None:
        self.url = url
        self.channels = channels
        self._subs: set[Subscription] = set()
        self._tg: TaskGroup | None = None
        self._up: anyio.Event | None = None  # made once entered (an anyio.Event belongs to its event loop)
        # How many times the listener has connected (1 after the first), and why it last could not.
        self.connections = 0
        self.last_error: RelayError | None = None

    async def __aenter__(self) -> PgChanges:
        self._up = anyio.Event()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._run)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        return await self._tg.__aexit__(exc_type, exc, tb)

    @property
    def listening(self) -> bool:
        return self._up is not None and self._up.is_set()

    async def ready(self, timeout: float = math.inf) -> bool:
        """Wait until the listener is connected and LISTENing (True), or `timeout` seconds (False)."""
        assert self._up is not None, "enter the listener first (async with)"
        with anyio.move_on_after(timeout):
            await self._up.wait()
        return self._up.is_set()

    @contextmanager
    def subscribe(self, job_id: str | None = None, *, channel: str = JOBS_CHANNEL) -> Generator[Subscription]:
        """Changes of `job_id` (None: of any job) on `channel`, for as long as the block runs."""
        sub = Subscription(channel, job_id)
        self._subs.add(sub)
        try:
            yield sub
        finally:
            self._subs.discard(sub)

    async def wait(self, timeout: float, *, channel: str = JOBS_CHANNEL) -> bool:
        """Wait for the next change on `channel` (of any job) for at most `timeout` seconds; True if one came."""
        with self.subscribe(channel=channel) as sub:
            return await sub.wait(timeout)

    def _deliver(self, channel: str, payload: str) -> None:
        for sub in list(self._subs):
            if sub.channel == channel and sub.job_id in (None, payload):
                sub.fire()

    def _wake_all(self) -> None:
        for sub in list(self._subs):
            sub.fire()

    async def _run(self) -> None:
        delay = RECONNECT_FIRST_S
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(conninfo(self.url), autocommit=True)
            except psycopg.Error as exc:
                self.last_error = pg_error(exc, self.url)
                await anyio.sleep(delay)
                delay = min(delay * 2, RECONNECT_MAX_S)
                continue
            try:
                async with conn:
                    for channel in self.channels:
                        await conn.execute(f"LISTEN {channel}".encode())
                    self.connections += 1
                    self.last_error = None
                    delay = RECONNECT_FIRST_S
                    assert self._up is not None
                    self._up.set()
                    self._wake_all()  # changes made while no one listened were not announced
                    async for note in conn.notifies():
                        self._deliver(note.channel, note.payload)
            except psycopg.Error as exc:
                self.last_error = pg_error(exc, self.url)
            if self._up is None or self._up.is_set():
                self._up = anyio.Event()
            self._wake_all()
            await anyio.sleep(delay)  # a server that accepts and drops at once is not hammered
