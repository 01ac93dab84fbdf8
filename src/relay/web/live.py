"""Server-Sent Events: the jobs and workers tables' changes and one job's transcript, pushed as they happen.

Jobs run in whichever relay process started them (an MCP server, `relay run`), so the feed watches
the shared store: every LIVE_POLL_S it reads the jobs still running and any newer ones, which is a
couple of indexed queries, and pushes a row whenever what the row shows has changed. The browser
never polls. Each event carries an id; a browser that reconnects sends it back (Last-Event-ID)
and the feed resumes from there: nothing that changed while it was away is lost, and the page
drops a row it already shows in the same state, so nothing appears twice.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio

from relay.errors import RelayError
from relay.jobs.engine import Engine
from relay.store import JobStore
from relay.web.views import ACTIVE, TRANSCRIPT_TAIL_CHARS, job_row
from relay.web.workers import ACTIVE_WORKER_STATES, WORKERS_LIMIT, worker_row

# How often the feeds look at the store for changes.
LIVE_POLL_S = 0.1
# How often the workers feed looks (heartbeats come every few seconds; a claim shows within this).
WORKERS_POLL_S = 0.5
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


class JobsFeed:
    """Yields a `job` event for every job whose row changed since `since` (a unix time), then as they change."""

    def __init__(self, engine: Callable[[], Engine], since: float | None, max_s: float = FEED_MAX_S) -> None:
        self._engine = engine
        self._since = since
        self._max_s = max_s
        self._sigs: dict[str, str] = {}
        self._active: set[str] = set()
        self._watermark = since if since is not None else time.time()

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
        return _rows_feed(self._tick, "job", self._max_s, LIVE_POLL_S)


async def _rows_feed(
    tick: Callable[[bool], tuple[float, list[dict[str, Any]]]], event: str, max_s: float, poll_s: float
) -> AsyncIterator[bytes]:
    """Every `poll_s` until `max_s`: the rows `tick` found changed (True on its first call), each as one event."""
    yield f"retry: {RECONNECT_MS}\n\n".encode()
    started = time.monotonic()
    beat = started
    first = True
    while time.monotonic() - started < max_s:
        stamp, rows = await anyio.to_thread.run_sync(tick, first)
        first = False
        for row in rows:
            yield sse(event, row, f"{stamp:.6f}")
        if time.monotonic() - beat > HEARTBEAT_S:
            beat = time.monotonic()
            yield b": ping\n\n"
        await anyio.sleep(poll_s)


class JobFeed:
    """One job: `transcript` events with new text from `offset`, `status` on each change, `done` at the end."""

    def __init__(self, engine: Callable[[], Engine], job_id: str, offset: int, max_s: float = FEED_MAX_S) -> None:
        self._engine = engine
        self._job_id = job_id
        self._offset = max(0, offset)
        self._max_s = max_s
        self._sig: str | None = None

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
            chunks, done = await anyio.to_thread.run_sync(self._tick)
            for chunk in chunks:
                yield chunk
            if done:
                return
            await anyio.sleep(LIVE_POLL_S)


class WorkersFeed:
    """Yields a `worker` event for every worker whose row changed: all of them at first, then as they change.

    Each look reads only the running and stopping workers; a worker the feed showed that left that list
    (stopped, or judged lost) is read once more among all workers, so the page sees how it ended."""

    def __init__(self, store: Callable[[], JobStore], show_all: bool, max_s: float = FEED_MAX_S) -> None:
        self._store = store
        self._show_all = show_all
        self._max_s = max_s
        self._sigs: dict[str, str] = {}
        self._active: set[str] = set()

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
        return _rows_feed(self._tick, "worker", self._max_s, WORKERS_POLL_S)
