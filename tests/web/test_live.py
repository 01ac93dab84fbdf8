"""Server-Sent Events: job changes reach the page as they happen, a reconnect resumes without loss or repeats."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx2 as httpx

from tests.web.conftest import DashboardFactory, Jobs, SseEvent, parse_sse, wait_until

# Every stream in these tests ends by itself after this long, so a broken feed fails instead of hanging.
FEED_MAX_S = 60.0


def events(response: httpx.Response) -> Iterator[SseEvent]:
    buffer = ""
    for chunk in response.iter_text():
        buffer += chunk
        while "\n\n" in buffer:
            block, buffer = buffer.split("\n\n", 1)
            yield from parse_sse(block + "\n\n")


def test_a_job_started_after_the_page_loaded_arrives_and_changes_status_on_the_stream(
    dashboard: DashboardFactory, jobs: Jobs
) -> None:
    client = dashboard(feed_max_s=FEED_MAX_S)
    seen: list[str] = []
    with client.stream("GET", f"/events/jobs?since={time.time()}") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        started = jobs.start("hi [[fake:sleep=1]]")
        for event in events(response):
            assert event.event == "job" and event.id is not None
            if event.data["id"] == started.job.id:
                seen.append(event.data["status"])
                if event.data["final"]:
                    break
    assert seen[-1] == "completed"
    assert "running" in seen
    assert len(seen) == len(set(seen))  # each state once


def test_a_reconnect_with_the_last_event_id_neither_repeats_nor_drops_a_change(
    dashboard: DashboardFactory, jobs: Jobs
) -> None:
    client = dashboard(feed_max_s=FEED_MAX_S)
    slow = jobs.start("hi [[fake:sleep=1.5]]")
    with client.stream("GET", f"/events/jobs?since={time.time() - 60}") as response:
        running = next(e for e in events(response) if e.data["id"] == slow.job.id and e.data["status"] == "running")
    # The page is away while the job finishes.
    slow.proc.wait(60)
    wait_until(lambda: jobs.get(slow.job.id).status == "completed", what="the job to complete")
    with client.stream("GET", "/events/jobs", headers={"last-event-id": str(running.id)}) as response:
        done = next(e for e in events(response) if e.data["id"] == slow.job.id)
    assert done.data["status"] == "completed"
    # Reconnecting after the last change sends that job no more.
    quick = dashboard(feed_max_s=1.5)
    with quick.stream("GET", "/events/jobs", headers={"last-event-id": str(done.id)}) as response:
        again = [e for e in events(response) if e.data["id"] == slow.job.id]
    assert again == []


def test_a_job_stream_sends_the_transcript_as_it_grows_then_the_final_envelope(
    dashboard: DashboardFactory, jobs: Jobs
) -> None:
    client = dashboard(feed_max_s=FEED_MAX_S)
    started = jobs.start("hi [[fake:sleep=1]]")
    text = ""
    statuses: list[str] = []
    with client.stream("GET", f"/events/jobs/{started.job.id}") as response:
        for event in events(response):
            if event.event == "transcript":
                text += event.data["text"]
                assert event.id == str(len(text))  # the id is the offset to resume from
            elif event.event == "status":
                statuses.append(event.data["status"])
            elif event.event == "done":
                envelope = event.data["envelope"]
                break
    assert "[assistant] hi from mock" in text
    assert statuses[-1] == "completed"
    assert envelope["status"] == "completed" and envelope["output"] == "hi from mock"
    # Resuming from an offset sends only what comes after it.
    with client.stream("GET", f"/events/jobs/{started.job.id}", headers={"last-event-id": "5"}) as response:
        rest = "".join(e.data["text"] for e in events(response) if e.event == "transcript")
    assert rest == text[5:]
