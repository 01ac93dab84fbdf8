"""Landing and discarding a worktree job from its page: guarded like cancel, the gate's output shown, and the jobs
table naming a worktree job by repository, branch and target rather than by its worktree's folder."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from relay.store import Store
from relay.web import Access, build_app
from relay.web.views import job_row
from tests.conftest import SettingsFactory
from tests.web.conftest import BASE_URL, HTML, RELAY
from tests.workspaces.conftest import git, one_commit_repo

# The gate the person configured: it says it ran, and fails when the landed app.txt lost its first line.
GATE = "echo gate-ran-in-$(basename $PWD) && grep -q '^landed$' app.txt"
GATED = f'[workspaces]\ntest_command = "{GATE}"\n'
TOKEN = "s3cret-token-0123456789"
ORIGIN = "http://127.0.0.1:8766"


def worktree_job(home: Path, repo: Path, writes: str) -> str:
    """A finished `relay run --worktree` job of the fake claude that wrote `writes` (path~content); its id."""
    done = subprocess.run(
        [RELAY, "run", "claude", f"edit [[fake:write={writes}]]", "--worktree"],
        env={**os.environ, "RELAY_HOME": str(home)},
        cwd=str(repo),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    store = Store(home / "relay.db")
    try:
        return store.list_jobs(limit=1)[0].id
    finally:
        store.close()


def client_for(make_settings: SettingsFactory, access: Access | None = None) -> Iterator[TestClient]:
    settings = make_settings(GATED)
    with TestClient(build_app(settings, access=access or Access()), base_url=BASE_URL) as client:
        yield client


@pytest.fixture
def repo(workdir: Path) -> Path:
    return one_commit_repo(workdir)


@pytest.fixture
def page(make_settings: SettingsFactory) -> Iterator[TestClient]:
    yield from client_for(make_settings)


@pytest.fixture
def remote_page(make_settings: SettingsFactory) -> Iterator[TestClient]:
    yield from client_for(make_settings, Access(host="0.0.0.0", port=8766, token=TOKEN))


def csrf(client: TestClient, job_id: str) -> str:
    client.get(f"/jobs/{job_id}", headers=HTML)
    token = client.cookies.get("relay_csrf")
    assert token
    return token


def untouched(repo: Path, job_id: str, main: str, home: Path) -> None:
    """Nothing of the land or discard happened: main where it was, the job's branch and worktree still there."""
    assert git(repo, "rev-parse", "main") == main
    assert git(repo, "branch", "--list", f"relay/{job_id}")
    assert (home / "worktrees" / job_id).is_dir()


def test_land_and_discard_without_a_login_are_refused_and_change_nothing(
    remote_page: TestClient, repo: Path, relay_home: Path
) -> None:
    job = worktree_job(relay_home, repo, "app.txt~landed\\n")
    main = git(repo, "rev-parse", "main")
    remote_page.get("/login")  # the login form gives this browser its CSRF cookie
    token = remote_page.cookies.get("relay_csrf")
    assert token
    for action in ("land", "discard"):
        out = remote_page.post(f"/jobs/{job}/{action}", data={"csrf": token, "test_command": GATE})
        wrong = remote_page.post(
            f"/jobs/{job}/{action}", data={"csrf": token}, headers={"authorization": "Bearer not-the-token"}
        )
        assert (out.status_code, wrong.status_code) == (401, 401), action
    untouched(repo, job, main, relay_home)
    # The same post with the login lands it: the refusals above were the login's, not a missing action's.
    landed = remote_page.post(
        f"/jobs/{job}/land",
        data={"csrf": token, "test_command": GATE},
        headers={"authorization": f"Bearer {TOKEN}", "accept": "application/json"},
    )
    assert landed.status_code == 200 and landed.json()["landed"] is True
    assert git(repo, "rev-parse", "main") == landed.json()["new"] != main


def test_land_and_discard_from_another_origin_or_without_the_csrf_token_are_refused(
    page: TestClient, repo: Path, relay_home: Path
) -> None:
    job = worktree_job(relay_home, repo, "app.txt~landed\\n")
    main = git(repo, "rev-parse", "main")
    token = csrf(page, job)
    for action in ("land", "discard"):
        cross = page.post(f"/jobs/{job}/{action}", data={"csrf": token}, headers={"origin": "http://evil.example"})
        referred = page.post(
            f"/jobs/{job}/{action}", data={"csrf": token}, headers={"referer": "http://evil.example/page"}
        )
        missing = page.post(f"/jobs/{job}/{action}", data={}, headers={"origin": ORIGIN})
        wrong = page.post(f"/jobs/{job}/{action}", data={"csrf": "0" * 32}, headers={"origin": ORIGIN})
        codes = (cross.status_code, referred.status_code, missing.status_code, wrong.status_code)
        assert codes == (403, 403, 403, 403), action
    untouched(repo, job, main, relay_home)


def test_a_land_from_the_page_moves_main_and_shows_the_gate_output_and_a_discard_removes_the_branch(
    page: TestClient, repo: Path, relay_home: Path
) -> None:
    job = worktree_job(relay_home, repo, "app.txt~landed\\n")
    shown = page.get(f"/jobs/{job}", headers=HTML).text
    assert 'id="land-form"' in shown and 'id="discard-form"' in shown and "app.txt</option>" in shown
    token = csrf(page, job)
    out = page.post(
        f"/jobs/{job}/land",
        data={"csrf": token, "test_command": GATE, "strategy": "rebase", "into": ""},
        headers={"origin": ORIGIN},
    )
    assert out.status_code == 200, out.text
    assert git(repo, "rev-parse", "main") == git(repo, "rev-parse", f"relay/{job}")
    assert (repo / "app.txt").read_text() == "landed\n"
    assert f'<pre id="land-output" tabindex="0">gate-ran-in-{job}\n</pre>' in out.text
    assert "<strong>Landed</strong>" in out.text and 'id="land-form"' not in out.text
    done = page.post(f"/jobs/{job}/discard", data={"csrf": token}, headers={"origin": ORIGIN}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == f"/jobs/{job}"
    assert not git(repo, "branch", "--list", f"relay/{job}")
    after = page.get(f"/jobs/{job}", headers=HTML).text
    assert '<dd id="w-state">discarded' in after and 'id="discard-form"' not in after


def test_a_refused_land_shows_the_refusal_and_its_hint_and_the_failing_gates_output(
    page: TestClient, repo: Path, relay_home: Path, tmp_path: Path
) -> None:
    first = worktree_job(relay_home, repo, "app.txt~landed\\n")
    second = worktree_job(relay_home, repo, "app.txt~mine\\n")
    failing = worktree_job(relay_home, repo, "other.txt~x\\n")
    token = csrf(page, first)
    post = {"csrf": token, "test_command": GATE}
    assert page.post(f"/jobs/{first}/land", data=post).status_code == 200
    main = git(repo, "rev-parse", "main")
    conflict = page.post(f"/jobs/{second}/land", data=post)
    assert conflict.status_code == 409
    assert "<strong>LAND_CONFLICT</strong>" in conflict.text and "<li><code>app.txt</code></li>" in conflict.text
    assert 'id="land-hint">nothing was changed' in conflict.text and 'id="land-form"' in conflict.text
    # app.txt says "one" on that branch (rebased onto main it says "landed"): made to fail, the gate shows why.
    git(repo, "branch", "other", f"{main}~1")
    refused = page.post(f"/jobs/{failing}/land", data=post | {"into": "other"})
    assert refused.status_code == 409
    assert "<strong>LAND_TEST_FAILED</strong>" in refused.text and "failed (exit 1)" in refused.text
    assert f'<pre id="land-output" tabindex="0">gate-ran-in-{failing}\n</pre>' in refused.text
    planted = tmp_path / "pwned-by-a-page"
    own = page.post(f"/jobs/{failing}/land", data={"csrf": token, "test_command": f"touch {planted}"})
    assert own.status_code == 409 and "only a test command the person configured" in own.text
    assert not planted.exists()
    assert git(repo, "rev-parse", "main") == main


def test_the_jobs_list_names_a_worktree_job_by_repository_branch_and_target(
    page: TestClient, repo: Path, relay_home: Path
) -> None:
    job = worktree_job(relay_home, repo, "app.txt~landed\\n")
    listed = page.get("/jobs", headers=HTML).text
    where = f"{repo.name} @ relay/{job} \u2192 main"
    tree = str(relay_home / "worktrees" / job)
    assert f'title="{tree}">{where}</td>' in listed
    assert f">{tree}<" not in listed
    store = Store(relay_home / "relay.db")
    try:
        row = job_row(store.get_job(job) or pytest.fail("no job"))  # what the live table's stream sends
    finally:
        store.close()
    assert (row["where"], row["cwd"]) == (where, tree)
