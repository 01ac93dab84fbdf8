"""Server-Sent Events: the jobs and workers tables' changes and one job's transcript, pushed as they happen.

Jobs run in whichever relay process started them (an MCP server, `relay run`, a `relay worker` on
another host), so the feed watches the shared store: at each look it reads the jobs still running
and any newer ones, which is a couple of indexed queries, and pushes a row whenever what the row
shows has changed. When it looks depends on the store (`Pace`): relay.db is looked at every
LIVE_POLL_S (WORKERS_POLL_S for the workers); a PostgreSQL store announces every change of a job,
its events and its output (LISTEN/NOTIFY, pg/watch.py), so the feed waits for that notice, in a
worker thread, and looks once it came, or after NOTICE_WAIT_S without one (workers' heartbeats are
not announced: the workers feed sees them that often). It still looks at most every LIVE_POLL_S,
so a job streaming its output costs no more reads than on SQLite. The browser never polls.

Each event carries an id; a browser that reconnects sends it back (Last-Event-ID) and the feed
resumes from there: nothing that changed while it was away is lost, and the page drops a row it
already shows in the same state, so nothing appears twice.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any, TypeVar

import anyio

from relay.errors import RelayError
from relay.jobs.engine import Engine
from relay.store import JobStore
from relay.web.views import ACTIVE, TRANSCRIPT_TAIL_CHARS, job_row
from relay.web.workers import ACTIVE_WORKER_STATES, WORKERS_LIMIT, worker_row

# How often the feeds look at a SQLite store for changes (and the most often they look at a PostgreSQL one).
LIVE_POLL_S = 0.1
# How often the workers feed looks at a SQLite store (heartbeats come every few seconds; a claim shows within this).
WORKERS_POLL_S = 0.5
# The longest a feed on a PostgreSQL store waits for a change notice before it looks anyway.
NOTICE_WAIT_S = 1.0
# Feeds waiting for a notice at once, each in a thread (beyond, a wait starts when another ends, within NOTICE_WAIT_S).
NOTICE_WAITERS = 64
# A feed ends after this long; the browser's EventSource reconnects at once with its last event id
# (which also bounds how long a forgotten tab holds a connection).
FEED_MAX_S = 300.0
# How long the browser waits before reconnecting (sent as the SSE `retry` field), in ms.
RECONNECT_MS = 500
# A comment line this often keeps proxies from closing a quiet stream.
HEARTBEAT_S = 15.0
# Recent jobs checked on a reconnect for one that finished while the page was away.
RECONNECT_WINDOW = 500
# Most rows a feed tracks at once.
TRACK_LIMIT = 1000


def sse(event: str, data: Any, event_id: str | None = None) -> bytes:
    lines = [f"event: {event}"]
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines += [f"data: {part}" for part in json.dumps(data, default=str).split("\n")]
    return ("\n".join(lines) + "\n\n").encode()


def parse_since(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


T = TypeVar("T")


class Pace:
    """When a feed looks at the store: every `poll_s` (SQLite), or when a change notice came (PostgreSQL).

    `looks` counts the feed's reads of the store and `woken` the ones a notice started (tests read them)."""

    def __init__(self, store: Callable[[], JobStore], poll_s: float, waiters: anyio.CapacityLimiter | None) -> None:
        self._store = store
        self._poll_s = poll_s
        self._waiters = waiters
        self._wait: Callable[[int, float], bool] | None = None
        self._version = 0
        self._looked = 0.0
        self.looks = 0
        self.woken = 0

    def look(self, read: Callable[[], T]) -> T:
        """Run `read` (in a worker thread), noting first how far the store's changes went: a change made while
        it reads wakes the next wait at once."""
        store = self._store()
        # Every change, this process's own too (the dashboard may share a process with the engine).
        wait: Callable[[int, float], bool] | None = getattr(store, "wait_change", None)
        version: Callable[[], int] | None = getattr(store, "change_version", None)
        self._wait = wait if store.spans_hosts and version is not None else None
        if self._wait is not None and version is not None:
            self._version = version()
        self._looked = time.monotonic()
        self.looks += 1
        return read()

    async def wait(self) -> None:
        """Until the next look: `poll_s`, or the next change notice (at most NOTICE_WAIT_S, at least LIVE_POLL_S)."""
        if self._wait is None:
            await anyio.sleep(self._poll_s)
            return
        woken = await anyio.to_thread.run_sync(
            self._wait, self._version, NOTICE_WAIT_S, abandon_on_cancel=True, limiter=self._waiters
        )
        self.woken += int(woken)
        rest = LIVE_POLL_S - (time.monotonic() - self._looked)
        if rest > 0:
            await anyio.sleep(rest)  # notices in a burst (a job streaming its output): one look for them


class JobsFeed:
    """Yields a `job` event for every job whose row changed since `since` (a unix time), then as they change."""

    def __init__(
        self,
        engine: Callable[[], Engine],
        since: float | None,
        max_s: float = FEED_MAX_S,
        waiters: anyio.CapacityLimiter | None = None,
    ) -> None:
        self._engine = engine
        self._since = since
        self._max_s = max_s
        self._sigs: dict[str, str] = {}
        self._active: set[str] = set()
        self._watermark = since if since is not None else time.time()
        self.pace = Pace(lambda: engine().store, LIVE_POLL_S, waiters)

    def _tick(self, first: bool) -> tuple[float, list[dict[str, Any]]]:
        engine = self._engine()
        stamp = time.time()
        now = stamp
        recs = engine.list(since=self._watermark, limit=TRACK_LIMIT)
        if first:
            recs += engine.list(statuses=ACTIVE, limit=TRACK_LIMIT)
            if self._since is not None:
                since = self._since
                recs += [
                    r
                    for r in engine.list(limit=RECONNECT_WINDOW)
                    if (r.finished_at or 0) >= since or (r.started_at or 0) >= since
                ]
        seen = {r.id for r in recs}
        for job_id in list(self._active - seen):
            try:
                recs.append(engine.get(job_id))
            except RelayError:
                self._active.discard(job_id)
        changed: list[dict[str, Any]] = []
        for rec in recs:
            self._watermark = max(self._watermark, rec.created_at)
            row = job_row(rec, now)
            if self._sigs.get(rec.id) == row["sig"]:
                continue
            self._sigs[rec.id] = row["sig"]
            (self._active.discard if rec.is_final else self._active.add)(rec.id)
            changed.append(row)
        return stamp, changed

    def events(self) -> AsyncIterator[bytes]:
        return _rows_feed(self._tick, "job", self._max_s, self.pace)


async def _rows_feed(
    tick: Callable[[bool], tuple[float, list[dict[str, Any]]]], event: str, max_s: float, pace: Pace
) -> AsyncIterator[bytes]:
    """At each look of `pace` until `max_s`: the rows `tick` found changed (True on its first call), each an event."""
    yield f"retry: {RECONNECT_MS}\n\n".encode()
    started = time.monotonic()
    beat = started
    first = True
    while time.monotonic() - started < max_s:
        stamp, rows = await anyio.to_thread.run_sync(pace.look, partial(tick, first))
        first = False
        for row in rows:
            yield sse(event, row, f"{stamp:.6f}")
        if time.monotonic() - beat > HEARTBEAT_S:
            beat = time.monotonic()
            yield b": ping\n\n"
        await pace.wait()


class JobFeed:
    """One job: `transcript` events with new text from `offset`, `status` on each change, `done` at the end."""

    def __init__(
        self,
        engine: Callable[[], Engine],
        job_id: str,
        offset: int,
        max_s: float = FEED_MAX_S,
        waiters: anyio.CapacityLimiter | None = None,
    ) -> None:
        self._engine = engine
        self._job_id = job_id
        self._offset = max(0, offset)
        self._max_s = max_s
        self._sig: str | None = None
        self.pace = Pace(lambda: engine().store, LIVE_POLL_S, waiters)

    def _tick(self) -> tuple[list[bytes], bool]:
        engine = self._engine()
        out: list[bytes] = []
        page = engine.read_output(self._job_id, "transcript", self._offset, TRANSCRIPT_TAIL_CHARS)
        while page["text"]:
            self._offset += len(page["text"])
            out.append(sse("transcript", {"text": page["text"]}, str(self._offset)))
            if page["next_offset"] is None:
                break
            page = engine.read_output(self._job_id, "transcript", self._offset, TRANSCRIPT_TAIL_CHARS)
        rec = engine.get(self._job_id)
        row = job_row(rec)
        if row["sig"] != self._sig:
            self._sig = row["sig"]
            out.append(sse("status", row, str(self._offset)))
        if page["complete"]:
            env = engine.envelope(rec.id)
            stderr = engine.read_output(rec.id, "stderr", 0, TRANSCRIPT_TAIL_CHARS)["text"]
            out.append(sse("done", {"envelope": env, "stderr": stderr}, str(self._offset)))
            return out, True
        return out, False

    async def events(self) -> AsyncIterator[bytes]:
        yield f"retry: {RECONNECT_MS}\n\n".encode()
        started = time.monotonic()
        while time.monotonic() - started < self._max_s:
            chunks, done = await anyio.to_thread.run_sync(self.pace.look, self._tick)
            for chunk in chunks:
                yield chunk
            if done:
                return
            await self.pace.wait()


class WorkersFeed:
    """Yields a `worker` event for every worker whose row changed: all of them at first, then as they change.

    Each look reads only the running and stopping workers; a worker the feed showed that left that list
    (stopped, or judged lost) is read once more among all workers, so the page sees how it ended."""

    def __init__(
        self,
        store: Callable[[], JobStore],
        show_all: bool,
        max_s: float = FEED_MAX_S,
        waiters: anyio.CapacityLimiter | None = None,
    ) -> None:
        self._store = store
        self._show_all = show_all
        self._max_s = max_s
        self._sigs: dict[str, str] = {}
        self._active: set[str] = set()
        self.pace = Pace(store, WORKERS_POLL_S, waiters)

    def _tick(self, first: bool) -> tuple[float, list[dict[str, Any]]]:
        store = self._store()
        now = time.time()
        workers = store.list_workers(include_stopped=first and self._show_all)[:WORKERS_LIMIT]
        left = self._active - {w.id for w in workers}
        if left:
            workers += [w for w in store.list_workers() if w.id in left]
            self._active -= left
        changed: list[dict[str, Any]] = []
        for w in workers:
            (self._active.add if w.state in ACTIVE_WORKER_STATES else self._active.discard)(w.id)
            row = worker_row(w, now)
            if self._sigs.get(w.id) != row["sig"]:
                self._sigs[w.id] = row["sig"]
                changed.append(row)
        return now, changed

    def events(self) -> AsyncIterator[bytes]:
        return _rows_feed(self._tick, "worker", self._max_s, self.pace)
