"""The dashboard's live feeds on a PostgreSQL store: woken by the store's change notices, not by a poll.

The jobs are written by another front (another store object on the same database), as a job running on
another host is. The dashboard's store counts the feed's waits for a notice and how each one ended, so
a feed that polled instead (never waiting on a notice) or that read the store without a notice or a
full fallback wait fails here.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import pytest
from anyio.abc import ObjectSendStream
from starlette.testclient import TestClient

from relay.audit import open_audit
from relay.jobs.engine import Engine
from relay.store import JobStore, open_store
from relay.store.pg import PgStore
from relay.web import build_app
from relay.web.live import NOTICE_WAIT_S, JobFeed, JobsFeed, Pace
from tests.conftest import SettingsFactory
from tests.web.conftest import BASE_URL, SseEvent, parse_sse
from tests.web.test_live import events as sse_events

pytestmark = pytest.mark.anyio


class WatchedStore(PgStore):
    """The dashboard's store, counting its waits for a change notice (True: a notice ended it, False: the timeout)."""

    def __init__(self, url: str, home: Path) -> None:
        super().__init__(url, open_audit(home))
        self.waits: list[bool] = []
        self.waiting = threading.Event()  # set once a feed waits for a notice

    def wait_change(self, version: int, timeout: float) -> bool:
        self.waiting.set()
        woken = super().wait_change(version, timeout)
        self.waits.append(woken)
        return woken


async def forward(events: AsyncIterator[bytes], out: ObjectSendStream[SseEvent]) -> None:
    async for chunk in events:
        for event in parse_sse(chunk.decode()):
            await out.send(event)


async def changes_arrive(
    store: WatchedStore,
    events: AsyncIterator[bytes],
    writes: list[tuple[Callable[[], None], Callable[[SseEvent], bool]]],
) -> list[float]:
    """Make each write once the feed waits for a notice, then wait for the event it should bring; the latencies."""
    send, receive = anyio.create_memory_object_stream[SseEvent](1000)
    latencies: list[float] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(forward, events, send)
        for write, expected in writes:
            assert await anyio.to_thread.run_sync(store.waiting.wait, 30), "the feed never waited for a notice"
            started = time.monotonic()
            await anyio.to_thread.run_sync(write)
            with anyio.fail_after(30):
                while not expected(await receive.receive()):
                    pass
            latencies.append(time.monotonic() - started)
        tg.cancel_scope.cancel()
    return latencies


def assert_woken_by_notices(pace: Pace, store: WatchedStore, changes: int, elapsed: float) -> None:
    # Each change was seen after a wait that a notice ended (one may fall between a timeout and the next look).
    assert store.waits.count(True) >= changes - 1
    # No look without a notice or a full fallback wait: nothing polls faster than NOTICE_WAIT_S.
    assert pace.looks <= 1 + len(store.waits) + 1
    assert store.waits.count(False) <= elapsed / NOTICE_WAIT_S + 1


def running(writer: JobStore, job_id: str) -> None:
    writer.mark_running(
        job_id,
        pid=None,
        pid_start_ticks=None,
        boot_id=None,
        owner_pid=os.getpid(),
        owner_start_ticks=None,
        deadline_at=None,
        idle_timeout_s=None,
    )


def finished(writer: JobStore, job_id: str) -> None:
    result = {"cost_usd": 0.01}
    writer.finish_job(job_id, "completed", exit_code=0, result=result, error=None, session_id=None, model="m")


async def test_the_jobs_feed_on_postgresql_brings_another_fronts_changes_woken_by_the_stores_notices(
    make_settings: SettingsFactory, pg_url: str, relay_home: Path, workdir: Path
) -> None:
    settings = make_settings(RELAY_STORE=pg_url)
    store = WatchedStore(pg_url, relay_home)
    engine = Engine(settings, store=store)  # type: ignore[arg-type]
    writer = open_store(pg_url, home=relay_home)  # another front
    feed = JobsFeed(lambda: engine, since=None, max_s=120)

    def step(
        job_id: str, status: str, write: Callable[[], None]
    ) -> tuple[Callable[[], None], Callable[[SseEvent], bool]]:
        return write, lambda e: e.event == "job" and e.data["id"] == job_id and e.data["status"] == status

    writes = []
    for job_id in ("live-1", "live-2"):
        writes += [
            step(
                job_id,
                "queued",
                lambda j=job_id: writer.insert_job(j, "claude", "cli", {"prompt": "hi"}, None, str(workdir)),
            ),
            step(job_id, "running", lambda j=job_id: running(writer, j)),
            step(job_id, "completed", lambda j=job_id: finished(writer, j)),
        ]
    started = time.monotonic()
    latencies = await changes_arrive(store, feed.events(), writes)
    elapsed = time.monotonic() - started
    writer.close()
    store.close()
    assert len(latencies) == 6
    assert statistics.median(latencies) < NOTICE_WAIT_S / 2  # the notice, not the fallback, brought them
    assert_woken_by_notices(feed.pace, store, 6, elapsed)


async def test_a_job_feed_on_postgresql_brings_output_written_by_another_front_then_its_end(
    make_settings: SettingsFactory, pg_url: str, relay_home: Path, workdir: Path
) -> None:
    settings = make_settings(RELAY_STORE=pg_url)
    store = WatchedStore(pg_url, relay_home)
    engine = Engine(settings, store=store)  # type: ignore[arg-type]
    writer = open_store(pg_url, home=relay_home)  # the front of the host the job runs on
    writer.insert_job("out-1", "claude", "cli", {"prompt": "hi"}, None, str(workdir))
    running(writer, "out-1")
    feed = JobFeed(lambda: engine, "out-1", 0, max_s=120)

    def text(part: str) -> tuple[Callable[[], None], Callable[[SseEvent], bool]]:
        return (
            lambda: writer.append_output("out-1", "transcript", part.encode()),
            lambda e: e.event == "transcript" and e.data["text"] == part,
        )

    writes = [text("[assistant] hello\n"), text("[assistant] again\n")]
    writes.append((lambda: finished(writer, "out-1"), lambda e: e.event == "done"))
    started = time.monotonic()
    latencies = await changes_arrive(store, feed.events(), writes)
    elapsed = time.monotonic() - started
    writer.close()
    store.close()
    assert statistics.median(latencies) < NOTICE_WAIT_S / 2
    assert_woken_by_notices(feed.pace, store, 3, elapsed)


def test_the_dashboards_jobs_stream_on_postgresql_sends_a_job_another_front_queued_and_ended(
    make_settings: SettingsFactory, pg_url: str, relay_home: Path, workdir: Path
) -> None:
    settings = make_settings(RELAY_STORE=pg_url)
    writer = open_store(pg_url, home=relay_home)
    seen: list[str] = []
    with (
        TestClient(build_app(settings, feed_max_s=60), base_url=BASE_URL) as client,
        client.stream("GET", f"/events/jobs?since={time.time()}") as response,
    ):
        assert response.status_code == 200
        writer.insert_job("web-1", "claude", "cli", {"prompt": "hi"}, None, str(workdir))
        for event in sse_events(response):
            if event.event == "job" and event.data["id"] == "web-1":
                seen.append(event.data["status"])
                if event.data["status"] == "queued":
                    finished(writer, "web-1")
                if event.data["final"]:
                    break
    writer.close()
    assert seen == ["queued", "completed"]
