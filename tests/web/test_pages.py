"""Every dashboard page, rendered from what relay really stored: jobs run by `relay run`, threads, tasks, servers."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest

from relay.config import Settings
from relay.events import Event
from relay.gateway import ServerRegistry, make_config
from relay.runtime import procinfo
from relay.threads import NewTurn, new_thread_id, open_threads
from relay.tracker import TaskStore, resolve_project
from tests.web.conftest import HTML, DashboardFactory, Jobs, wait_until


def test_the_jobs_page_lists_each_job_with_status_agent_principal_via_model_cwd_age_duration_and_cost(
    dashboard: DashboardFactory, jobs: Jobs, workdir: Path
) -> None:
    job = jobs.run("say hi")
    page = dashboard().get("/jobs", headers=HTML)
    assert page.status_code == 200
    row = re.search(rf'<tr id="job-{job.id}".*?</tr>', page.text, re.S)
    assert row is not None
    cells = [re.sub(r"<[^>]+>", " ", c).split() for c in re.findall(r"<td[^>]*>(.*?)</td>", row.group(0), re.S)]
    assert cells[0] == ["completed"]
    assert cells[1][0] == job.id and cells[1][1:] == ["say", "hi"]
    assert cells[2] == ["claude"]
    assert cells[3] == ["local"]  # the local user's job: `relay run` is no HTTP principal
    assert cells[4] == ["cli/run"]  # started by `relay run`
    assert cells[5] == [job.model or "-"]
    assert cells[6] == [str(workdir)]
    assert cells[7][-1] == "ago"
    assert cells[8][0].endswith("s")
    assert cells[9] == ["$0.0002"]


def test_the_jobs_page_filters_by_status_agent_and_text_and_pages_on_the_server(
    dashboard: DashboardFactory, jobs: Jobs
) -> None:
    ok = jobs.run("alpha")
    failed = jobs.run("beta [[fake:replay=claude_stream_error_500]]")
    client = dashboard()
    only_failed = client.get("/jobs?status=failed", headers=HTML).text
    assert failed.status == "failed"
    assert f"job-{failed.id}" in only_failed and f"job-{ok.id}" not in only_failed
    by_text = client.get("/jobs?q=alpha", headers=HTML).text
    assert f"job-{ok.id}" in by_text and f"job-{failed.id}" not in by_text
    by_via = client.get("/jobs?q=cli/run", headers=HTML).text  # the search covers where a job came from
    assert f"job-{ok.id}" in by_via and f"job-{failed.id}" in by_via
    other_via = client.get("/jobs?q=powerspawn/", headers=HTML).text
    assert "job-" not in other_via.split("<tbody>")[1].split("</tbody>")[0]
    other_agent = client.get("/jobs?agent=codex", headers=HTML).text
    assert "job-" not in other_agent.split("<tbody>")[1].split("</tbody>")[0]
    beyond = client.get("/jobs?page=2", headers=HTML).text
    assert f"job-{ok.id}" not in beyond and "page 2" in beyond


def test_a_job_page_shows_the_envelope_transcript_stderr_and_files_changed(
    dashboard: DashboardFactory, jobs: Jobs
) -> None:
    job = jobs.run("hi [[fake:stderr=warning from the cli]]")
    page = dashboard().get(f"/jobs/{job.id}", headers=HTML)
    assert page.status_code == 200
    transcript = re.search(r'<pre id="transcript"[^>]*>(.*?)</pre>', page.text, re.S)
    assert transcript is not None and "[assistant] hi from mock" in transcript.group(1)
    stderr = re.search(r'<pre id="stderr"[^>]*>(.*?)</pre>', page.text, re.S)
    assert stderr is not None and "warning from the cli" in stderr.group(1)
    assert "&#34;status&#34;: &#34;completed&#34;" in page.text  # the envelope, escaped JSON
    assert '<dt>Via</dt><dd id="f-via">cli/run</dd>' in page.text  # started by `relay run`
    # its permission and what allowed it (relay.jobs.grants): read-only is within the default grant
    assert '<dd id="f-permission">read-only: within the grant (grant edit, default)</dd>' in page.text
    assert '<ul id="files"><li class="empty">none</li></ul>' in page.text
    assert 'id="cancel-form"' not in page.text  # a finished job has nothing to cancel


def test_a_long_transcript_opens_at_its_tail_and_pages_back_on_demand(
    dashboard: DashboardFactory, jobs: Jobs, relay_home: Path
) -> None:
    job = jobs.run("hi [[fake:flood=1]]")
    client = dashboard()
    page = client.get(f"/jobs/{job.id}", headers=HTML)
    total = (relay_home / "jobs" / job.id / "transcript.txt").stat().st_size
    start = int(re.search(r'id="earlier" data-start="(\d+)"', page.text).group(1))  # type: ignore[union-attr]
    assert 0 < start < total
    earlier = client.get(f"/jobs/{job.id}/transcript?offset=0&limit=100").json()
    assert earlier["offset"] == 0 and len(earlier["text"]) == 100 and earlier["next_offset"] == 100


def test_a_job_page_says_when_the_person_confirmed_its_permission() -> None:
    from relay.web.views import permission_fact

    grant = {"grant": "edit", "grant_source": "default", "by": "confirmation", "principal": "local (claude-code)"}
    assert permission_fact({"permission": "full", "grant": grant}) == (
        "full: the person confirmed it (grant edit, default; local (claude-code))"
    )
    assert permission_fact({"permission": "edit"}) == "edit"  # a job stored before grants were recorded
    assert permission_fact({"prompt": "an API job has no permission"}) is None


def test_an_unknown_job_is_a_404_page_with_the_hint(dashboard: DashboardFactory) -> None:
    page = dashboard().get("/jobs/0123456789abcdef", headers=HTML)
    assert page.status_code == 404
    assert "JOB_NOT_FOUND" in page.text and "relay jobs" in page.text


def test_the_costs_page_draws_spend_per_day_by_agent_and_model_and_the_caps(
    make_settings: object, dashboard: DashboardFactory, jobs: Jobs, settings: Settings
) -> None:
    job = jobs.run("hi")
    page = dashboard().get("/costs", headers=HTML)
    assert page.status_code == 200
    key = f"claude · {job.model}"
    assert re.search(r"<svg class=\"chart\"[^>]*role=\"img\"", page.text)
    assert "<title>" in page.text and f"{key}: $0.0002</title>" in page.text.replace("&#39;", "'")
    totals = re.search(r'<table id="cost-totals">.*?</table>', page.text, re.S)
    assert totals is not None
    cells = [c.strip() for c in re.findall(r"<td>(.*?)</td>", totals.group(0))]
    assert cells == [key, "1", "$0.0002", "10", "5", "0"]
    assert "no cap" in page.text


def test_the_costs_page_shows_how_close_jobs_are_to_the_spend_cap(
    make_settings: object, jobs: Jobs, relay_home: Path, workdir: Path
) -> None:
    from starlette.testclient import TestClient

    from relay.config import load_settings
    from relay.web import build_app

    jobs.run("hi")
    capped = load_settings({"RELAY_HOME": str(relay_home), "RELAY_MAX_COST_USD": "0.001"}, cwd=workdir)
    with TestClient(build_app(capped), base_url="http://127.0.0.1:8766") as client:
        page = client.get("/costs", headers=HTML).text
    assert '<dd id="job-cap">$0.0010</dd>' in page
    assert "17.5% of the cap" in page


@pytest.mark.parametrize("settings", ["sqlite", "postgresql"], indirect=True)
def test_the_threads_page_shows_a_threads_turns_across_tools_and_models(
    dashboard: DashboardFactory, settings: Settings
) -> None:
    threads = open_threads(settings)
    try:
        thread = threads.add_turns(
            new_thread_id(),
            [
                NewTurn("user", "Is this diff safe?"),
                NewTurn("assistant", "Mostly.", provider="openai", model="gpt-5"),
            ],
            tool="chat",
            title="diff review",
        )
        threads.add_turns(
            thread.id, [NewTurn("assistant", "One race found.", provider="xai", model="grok-4")], tool="codereview"
        )
    finally:
        threads.close()
    client = dashboard()
    listing = client.get("/threads", headers=HTML).text
    assert f'href="/threads/{thread.id}"' in listing and "diff review" in listing
    page = client.get(f"/threads/{thread.id}", headers=HTML).text
    heads = re.findall(r'<div class="turn-head">(.*?)</div>', page, re.S)
    fields = [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", h)).strip().split(" · ")[:-1] for h in heads]
    assert fields == [  # who, which tool, which model; the time is last
        ["user", "chat"],
        ["assistant", "chat", "gpt-5 (openai)"],
        ["assistant", "codereview", "grok-4 (xai)"],
    ]
    assert "One race found." in page


def test_the_tasks_page_groups_ready_blocked_and_closed_with_dependency_links(
    dashboard: DashboardFactory, settings: Settings, workdir: Path
) -> None:
    store = TaskStore.open(settings)
    project = resolve_project(workdir)
    try:
        base = store.create(project, "lay the base")
        roof = store.create(project, "put the roof on")
        store.add_dependency(project, roof.id, base.id)
        done = store.create(project, "buy the land")
        store.close_task(project, done.id)
    finally:
        store.close()
    page = dashboard().get(f"/tasks?project={workdir}", headers=HTML).text

    def ids(group: str) -> list[str]:
        section = re.search(rf'<section id="tasks-{group}">.*?</section>', page, re.S)
        assert section is not None
        return re.findall(r'<li id="task-([^"]+)"', section.group(0))

    assert (ids("ready"), ids("blocked"), ids("closed")) == ([base.id], [roof.id], [done.id])
    assert f'blocked by <a href="#task-{base.id}">' in page


def test_the_servers_page_shows_each_downstream_servers_state_and_tools(
    dashboard: DashboardFactory, settings: Settings
) -> None:
    registry = ServerRegistry(settings.db_path, settings.home)
    try:
        registry.put(make_config(name="files", transport="stdio", command="npx", args=["fs"], scope=""))
        registry.pin("", "files", "read_file", "0" * 64, {"name": "read_file"})
    finally:
        registry.close()
    page = dashboard().get("/servers", headers=HTML).text
    row = re.search(r"<tr>\s*<td><strong>files</strong>.*?</tr>", page, re.S)
    assert row is not None
    assert "configured" in row.group(0) and "stdio" in row.group(0) and "<code>read_file</code>" in row.group(0)


def test_the_audit_page_says_when_there_is_no_log_and_shows_the_log_when_there_is(
    dashboard: DashboardFactory, settings: Settings
) -> None:
    from relay.audit import open_audit, queued_data

    client = dashboard()
    empty = client.get("/audit", headers=HTML).text
    assert 'id="audit-empty"' in empty and "No audit log yet" in empty
    log = open_audit(settings.home, views=False)
    log.record("queued", "abcdef0123456789", queued_data("codex", "cli", {"prompt": "refactor it"}, "gpt-5", "/w"))
    log.record("running", "abcdef0123456789", {})
    page = client.get("/audit", headers=HTML).text
    assert "Chain intact: 2 lines" in page
    assert 'href="/jobs/abcdef0123456789"' in page and "refactor it" in page and "running" in page
    assert 'id="audit-refused"' not in page
    refusal = {"agent": "codex", "permission": "full", "grant": "edit", "answer": "decline", "task": "rm -rf it"}
    log.record("permission.refused", None, refusal | {"principal": "local (claude-code)", "via": "core/delegate"})
    refused = client.get("/audit", headers=HTML).text
    row = re.search(r'<table id="audit-refused">.*?<tbody>\s*<tr>(.*?)</tr>', refused, re.S)
    assert row is not None
    cells = re.findall(r"<td>(.*?)</td>", row.group(1))
    assert cells[1:] == ["codex", "full", "edit", "decline", "local (claude-code)", "core/delegate", "rm -rf it"]


def test_the_jobs_page_finalizes_a_job_whose_relay_died_as_relay_jobs_does(
    dashboard: DashboardFactory, jobs: Jobs, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pids"
    started = jobs.start(f"x [[fake:hang,pidfile={pidfile}]]")
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), what="the fake to start")
    started.proc.send_signal(signal.SIGKILL)  # relay dies; its job's process lives on in its own group
    started.proc.wait(30)
    group = jobs.get(started.job.id).pid
    assert group is not None
    os.killpg(group, signal.SIGKILL)  # then the job's processes end too
    wait_until(lambda: not procinfo.is_alive(group, None), what="the job's processes to end")
    page = dashboard().get("/jobs", headers=HTML).text
    row = re.search(rf'<tr id="job-{started.job.id}".*?</tr>', page, re.S)
    assert row is not None and "s-running" not in row.group(0)
    assert jobs.get(started.job.id).is_final


def test_a_jobs_usage_is_counted_once_even_when_its_transcript_repeats_entries(
    dashboard: DashboardFactory, jobs: Jobs, relay_home: Path
) -> None:
    job = jobs.run("hi")
    usage = Event("turn.completed", {"usage": {"input": 10, "output": 5, "cached": 0}, "cost_usd": 0.000175})
    jobs.store.add_events(job.id, jobs.store.max_event_seq(job.id) + 1, [usage, usage, usage])
    transcript = relay_home / "jobs" / job.id / "transcript.txt"
    transcript.write_text(transcript.read_text() * 3)
    page = dashboard().get("/costs", headers=HTML).text
    totals = re.search(r'<table id="cost-totals">.*?</table>', page, re.S)
    assert totals is not None
    cells = [c.strip() for c in re.findall(r"<td>(.*?)</td>", totals.group(0))]
    assert cells[1:] == ["1", "$0.0002", "10", "5", "0"]


def test_a_plain_jobs_page_has_no_worktree_section(dashboard: DashboardFactory, jobs: Jobs) -> None:
    job = jobs.run("hi")
    page = dashboard().get(f"/jobs/{job.id}", headers=HTML)
    assert page.status_code == 200 and 'id="workspace"' not in page.text and 'id="diff"' not in page.text
