"""The dashboard and principals: each job shows who started it, the list filters by it, and only an admin's
token (or the one `--token`) logs in, since the dashboard shows every principal's jobs."""

from __future__ import annotations

import re
from pathlib import Path

from relay.config import Settings
from relay.store import Store
from relay.web import Access, admin_tokens, build_app
from tests.conftest import SettingsFactory
from tests.web.conftest import HTML, DashboardFactory

TOKENS = """
[server.tokens.alice]
token = "alice-token-0123456789"
[server.tokens.root]
token = "root-token-0123456789"
role = "admin"
"""


def _jobs(relay_home: Path) -> None:
    store = Store(relay_home / "relay.db")
    for job_id, who in (("aaaa0001", "alice"), ("bbbb0001", "bob")):
        store.insert_job(job_id, "claude", "cli", {"prompt": f"{who}'s"}, None, "/w", principal=who)
        store.finish_job(job_id, "completed", exit_code=0, result={}, error=None, session_id=None, model=None)
    store.close()


def test_the_jobs_page_shows_each_jobs_principal_and_filters_by_it(
    dashboard: DashboardFactory, settings: Settings, relay_home: Path
) -> None:
    _jobs(relay_home)
    client = dashboard()
    everyone = client.get("/jobs", headers=HTML).text
    only_bob = client.get("/jobs?principal=bob", headers=HTML).text
    detail = client.get("/jobs/aaaa0001", headers=HTML).text
    shown = dict(re.findall(r'<tr id="job-(\w+)".*?<td class="principal">(\w+)</td>', everyone, re.S))
    assert shown == {"aaaa0001": "alice", "bbbb0001": "bob"}
    assert "job-bbbb0001" in only_bob and "job-aaaa0001" not in only_bob
    assert re.search(r'<dd class="principal">alice</dd>', detail)


def test_an_admin_named_token_logs_in_to_the_dashboard_and_a_user_token_does_not(
    make_settings: SettingsFactory,
) -> None:
    from starlette.testclient import TestClient

    settings = make_settings(TOKENS)
    access = Access(host="0.0.0.0", port=8766, admin_tokens=admin_tokens(settings))
    client = TestClient(build_app(settings, access=access), base_url="http://127.0.0.1:8766")
    with client:
        user = client.post("/login", data={"token": "alice-token-0123456789", "next": "/jobs"}, follow_redirects=False)
        admin = client.post("/login", data={"token": "root-token-0123456789", "next": "/jobs"}, follow_redirects=False)
        page = client.get("/jobs", headers=HTML)
    assert user.status_code == 401
    assert admin.status_code == 303 and page.status_code == 200
