"""Who may use the dashboard: the login beyond loopback, Host/Origin checks, CSRF, and the two real actions."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.config import Settings
from relay.errors import ErrorCode, RelayError
from relay.runtime import procinfo
from relay.tracker import TaskStore, resolve_project
from relay.web import Access, build_app
from tests.web.conftest import HTML, DashboardFactory, Jobs, csrf_of, wait_until

REMOTE = Access(host="0.0.0.0", port=8766, token="s3cret-token")


def test_serving_beyond_loopback_without_a_token_is_refused(settings: Settings) -> None:
    with pytest.raises(RelayError) as caught:
        build_app(settings, access=Access(host="0.0.0.0", port=8766))
    assert caught.value.code == ErrorCode.INVALID_ARGUMENT and "token" in caught.value.hint


def test_beyond_loopback_every_page_and_feed_wants_the_login(dashboard: DashboardFactory) -> None:
    client = dashboard(access=REMOTE)
    page = client.get("/jobs?status=running", headers=HTML, follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"] == "/login?next=%2Fjobs%3Fstatus%3Drunning"
    assert client.get("/events/jobs").status_code == 401
    assert client.get("/costs", headers=HTML).url.path == "/login"
    assert client.get("/static/app.js").status_code == 200  # public: nothing secret in it


def test_the_login_sets_an_httponly_samesite_strict_cookie_and_no_token_travels_in_a_url(
    dashboard: DashboardFactory,
) -> None:
    client = dashboard(access=REMOTE)
    wrong = client.post("/login", data={"token": "guess", "next": "/jobs"}, follow_redirects=False)
    assert wrong.status_code == 401 and "relay_dashboard" not in wrong.headers.get("set-cookie", "")
    right = client.post("/login", data={"token": "s3cret-token", "next": "/costs"}, follow_redirects=False)
    assert right.status_code == 303 and right.headers["location"] == "/costs"
    cookie = right.headers["set-cookie"]
    assert cookie.startswith("relay_dashboard=") and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert "s3cret-token" not in cookie and "s3cret-token" not in right.headers["location"]
    assert client.get("/costs", headers=HTML).status_code == 200


def test_a_login_may_not_send_the_browser_to_another_site(dashboard: DashboardFactory) -> None:
    client = dashboard(access=REMOTE)
    out = client.post("/login", data={"token": "s3cret-token", "next": "//evil.example/x"}, follow_redirects=False)
    assert out.headers["location"] == "/jobs"


def test_the_mcp_bearer_token_also_opens_the_dashboard(dashboard: DashboardFactory) -> None:
    client = dashboard(access=REMOTE)
    page = client.get("/jobs", headers={**HTML, "authorization": "Bearer s3cret-token"})
    assert page.status_code == 200


def test_a_foreign_host_header_is_refused_as_for_mcp(dashboard: DashboardFactory) -> None:
    client = dashboard()
    assert client.get("/jobs", headers={**HTML, "host": "evil.example:8766"}).status_code == 421
    assert client.get("/jobs", headers={**HTML, "host": "localhost:8766"}).status_code == 200


def test_a_cross_site_post_is_refused_even_with_the_csrf_token(dashboard: DashboardFactory, jobs: Jobs) -> None:
    started = jobs.start("x [[fake:hang]]")
    client = dashboard()
    token = csrf_of(client)
    out = client.post(f"/jobs/{started.job.id}/cancel", data={"csrf": token}, headers={"origin": "http://evil.example"})
    assert out.status_code == 403
    assert jobs.get(started.job.id).status in ("queued", "running")


def test_a_post_without_the_csrf_token_or_with_a_wrong_one_is_refused(dashboard: DashboardFactory, jobs: Jobs) -> None:
    started = jobs.start("x [[fake:hang]]")
    client = dashboard()
    csrf_of(client)
    missing = client.post(f"/jobs/{started.job.id}/cancel", data={})
    wrong = client.post(f"/jobs/{started.job.id}/cancel", data={"csrf": "0" * 32})
    assert (missing.status_code, wrong.status_code) == (403, 403)
    assert jobs.get(started.job.id).status in ("queued", "running")


def test_cancel_through_the_page_kills_the_job_another_relay_runs(
    dashboard: DashboardFactory, jobs: Jobs, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pids"
    started = jobs.start(f"x [[fake:hang,pidfile={pidfile}]]")
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), what="the fake to start")
    pid = int(pidfile.read_text().split()[0])
    client = dashboard()
    token = csrf_of(client)
    out = client.post(
        f"/jobs/{started.job.id}/cancel",
        data={"csrf": token},
        headers={"origin": "http://127.0.0.1:8766", "accept": "application/json"},
    )
    assert out.status_code == 200 and out.json()["status"] == "cancelled"
    assert jobs.get(started.job.id).status == "cancelled"
    assert started.proc.wait(30) == 1
    assert not procinfo.is_alive(pid, None)
    page = client.get(f"/jobs/{started.job.id}", headers=HTML).text
    assert 'class="badge s-cancelled">cancelled<' in page and 'id="cancel-form"' not in page


def test_a_task_status_changes_through_the_page_with_csrf(
    dashboard: DashboardFactory, settings: Settings, workdir: Path
) -> None:
    store = TaskStore.open(settings)
    project = resolve_project(workdir)
    try:
        task = store.create(project, "write the docs")
    finally:
        store.close()
    client = dashboard()
    refused = client.post(f"/tasks/{task.id}/status", data={"status": "in_progress", "project": str(workdir)})
    token = csrf_of(client)
    done = client.post(
        f"/tasks/{task.id}/status",
        data={"status": "in_progress", "project": str(workdir), "csrf": token},
        follow_redirects=False,
    )
    assert refused.status_code == 403
    assert done.status_code == 303
    store = TaskStore.open(settings)
    try:
        assert store.get(project, task.id).status == "in_progress"
    finally:
        store.close()
