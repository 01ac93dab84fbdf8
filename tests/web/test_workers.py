"""The workers page: every `relay worker` of the store with its heartbeat, slots, running jobs and what it ran."""

from __future__ import annotations

import html
import re
import signal
from urllib.parse import quote

from tests.web.conftest import HTML, DashboardFactory, Jobs, Workers, parse_sse, wait_until

HOSTILE = "<img src=x onerror=alert(1)>\"'&"


def _row(page: str, worker_id: str) -> str:
    found = re.search(rf'<tr id="worker-{re.escape(html.escape(worker_id))}".*?</tr>', page, re.S)
    assert found is not None, f"no row for worker {worker_id}"
    return found.group(0)


def _cells(row: str) -> list[str]:
    return [" ".join(re.sub(r"<[^>]+>", " ", c).split()) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]


def test_the_workers_page_lists_each_worker_with_host_state_heartbeat_slots_running_jobs_run_agents_and_labels(
    dashboard: DashboardFactory, workers: Workers
) -> None:
    _, gpu = workers.start("host-a", "--slots", "3", "--labels", "gpu,big-repo", "--agents", "claude")
    _, plain = workers.start("host-b", "--slots", "2")
    workers.run_job("hi from the queue")
    page = dashboard().get("/workers", headers=HTML)
    assert page.status_code == 200
    assert '<a href="/workers" aria-current="page">Workers</a>' in page.text  # the nav link
    row = _row(page.text, gpu.id)
    a, b = _cells(row), _cells(_row(page.text, plain.id))
    assert a[0] == f"host-a {gpu.id}" and b[0] == f"host-b {plain.id}"
    assert a[1] == f"{gpu.host} · pid {gpu.pid}"
    assert a[2] == "running" and re.match(r"\d+s ago", a[3])
    assert '<span class="flag" hidden>' in row and 'class="stale"' not in row  # heard from within its lease
    assert (a[4], a[5]) == ("3", "0") and (b[4], b[5]) == ("2", "0")
    assert int(a[6]) + int(b[6]) == 1  # the one job, run by whichever worker claimed it
    assert (a[7], a[8]) == ("claude", "gpu, big-repo") and (b[7], b[8]) == ("every agent", "-")


def test_a_workers_running_jobs_count_shows_the_job_it_holds_now(
    dashboard: DashboardFactory, workers: Workers, jobs: Jobs
) -> None:
    _, worker = workers.start("host-a", "--slots", "2")
    started = jobs.start("hold on [[fake:hang]]", RELAY_RUN_JOBS="0")
    wait_until(lambda: jobs.get(started.job.id).status == "running", what="the worker to run the job")
    row = _row(dashboard().get("/workers", headers=HTML).text, worker.id)
    assert _cells(row)[5] == "1"


def test_a_worker_killed_without_a_word_is_flagged_stale_once_its_lease_is_older_than_its_heartbeat(
    dashboard: DashboardFactory, workers: Workers
) -> None:
    proc, worker = workers.start("doomed", lease_s=1.0)
    _, alive = workers.start("alive")
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    client = dashboard()

    def flagged() -> str | None:
        page = client.get("/workers", headers=HTML).text
        return page if 'class="stale"' in _row(page, worker.id) else None

    page = wait_until(flagged, what="the killed worker to be flagged stale")
    row = _row(page, worker.id)
    assert "stale: older than its 1 s lease" in _cells(row)[3]
    assert '<span class="flag" hidden>' not in row
    assert 'class="stale"' not in _row(page, alive.id)
    assert re.search(r'<span id="n-running">1</span> running, <span id="n-stale" class="flag">1</span> stale', page)


def test_a_workers_link_lists_the_jobs_it_ran_and_the_job_page_names_the_worker(
    dashboard: DashboardFactory, workers: Workers, jobs: Jobs
) -> None:
    _, worker = workers.start("host-a")
    ran = workers.run_job("run by the worker")
    elsewhere = jobs.run("run by relay run itself")
    assert ran.worker == worker.id and elsewhere.worker not in (None, worker.id)
    client = dashboard()
    link = f"/jobs?worker={quote(worker.id)}"
    assert f'href="{link}"' in _row(client.get("/workers", headers=HTML).text, worker.id)
    listed = client.get(link, headers=HTML).text
    assert f"job-{ran.id}" in listed and f"job-{elsewhere.id}" not in listed
    assert "Jobs run by worker <strong>host-a</strong>" in listed
    assert f'data-worker="{worker.id}"' in listed  # the live table keeps the filter
    detail = client.get(f"/jobs/{ran.id}", headers=HTML).text
    assert f'<dd id="f-worker"><a href="{link}">host-a</a> (host {worker.host}, pid {worker.pid})</dd>' in detail


def test_a_hostile_worker_name_is_escaped_in_the_table_the_links_and_the_job_page(
    dashboard: DashboardFactory, workers: Workers
) -> None:
    _, worker = workers.start(HOSTILE)
    ran = workers.run_job("hi")
    client = dashboard()
    pages = [
        client.get("/workers", headers=HTML).text,
        client.get(f"/jobs?worker={quote(worker.id)}", headers=HTML).text,
        client.get(f"/jobs/{ran.id}", headers=HTML).text,
    ]
    for page in pages:
        assert "<img" not in page and "onerror=alert(1)>" not in page
        assert "&lt;img src=x onerror=alert(1)&gt;&#34;&#39;&amp;" in page
    assert f'href="/jobs?worker={quote(worker.id)}"' in pages[0]  # the id travels url-encoded in the link


def test_the_workers_stream_sends_a_worker_that_starts_after_the_page_loaded_and_its_stop(
    dashboard: DashboardFactory, workers: Workers
) -> None:
    client = dashboard(feed_max_s=60.0)
    seen: list[str] = []
    with client.stream("GET", "/events/workers") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        proc, worker = workers.start("late")
        buffer, stopping = "", False
        for chunk in response.iter_text():
            buffer += chunk
            for event in parse_sse(buffer.rpartition("\n\n")[0] + "\n\n"):
                if event.event == "worker" and event.data["id"] == worker.id and event.data["state"] not in seen[-1:]:
                    seen.append(event.data["state"])
            buffer = buffer.rpartition("\n\n")[2]
            if seen == ["running"] and not stopping:
                proc.send_signal(signal.SIGTERM)  # stops cleanly: the page sees it stopped
                stopping = True
            if seen[-1:] == ["stopped"]:
                break
    assert seen[0] == "running" and seen[-1] == "stopped"


def test_an_empty_queue_says_that_no_worker_runs(dashboard: DashboardFactory) -> None:
    page = dashboard().get("/workers", headers=HTML).text
    assert 'id="workers-empty"' in page and "--no-worker" in page


def test_a_stopped_worker_leaves_the_default_list_and_stays_under_also_stopped_ones(
    dashboard: DashboardFactory, workers: Workers
) -> None:
    proc, worker = workers.start("leaving")
    _, staying = workers.start("staying")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0

    def stopped() -> bool:
        found = workers.store.get_worker(worker.id)
        return found is not None and found.state == "stopped"

    wait_until(stopped, what="the worker to stop")
    client = dashboard()
    default, everything = client.get("/workers", headers=HTML).text, client.get("/workers?all=1", headers=HTML).text
    assert f'id="worker-{worker.id}"' not in default and f'id="worker-{staying.id}"' in default
    assert _cells(_row(everything, worker.id))[2] == "stopped" and 'class="stale"' not in _row(everything, worker.id)
    assert 'data-all="1"' in everything  # its live stream keeps the stopped ones too
