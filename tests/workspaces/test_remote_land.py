"""The caller's side of a job run on a worker host: its pushed branch fetched from the URL, then landed as any other."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay.errors import ErrorCode, RelayError
from relay.workspaces import Workspaces
from relay.workspaces.records import WorkspaceRecord
from tests.conftest import SettingsFactory
from tests.git_daemon import GitDaemon, bare_repo, git_daemon
from tests.workspaces.conftest import git


@pytest.fixture
def daemon(tmp_path: Path, repo: Path) -> Iterator[GitDaemon]:
    base = tmp_path / "served"
    base.mkdir()
    bare_repo(base, "app.git", repo)
    with git_daemon(base) as d:
        yield d


@pytest.fixture
def worker(make_settings: SettingsFactory, tmp_path: Path) -> Iterator[Workspaces]:
    """The workspaces of a worker host (a RELAY_HOME of its own)."""
    spaces = Workspaces(make_settings(RELAY_HOME=str(tmp_path / "worker-home")))
    yield spaces
    spaces.close()


@pytest.fixture
def caller(make_settings: SettingsFactory) -> Iterator[Workspaces]:
    spaces = Workspaces(make_settings())
    yield spaces
    spaces.close()


def run_job(
    worker: Workspaces, job_id: str, url: str, writes: dict[str, str]
) -> tuple[WorkspaceRecord, dict[str, Any]]:
    """A job placed from `url` on the worker, its files written as an agent would, sealed and pushed back."""
    rec = worker.place(job_id, url)
    for name, text in writes.items():
        Path(rec.path, name).write_text(text)
    return rec, worker.seal_and_push(rec, f"job {job_id}\n\nrelay job {job_id} (claude)\n")


def land(spaces: Workspaces, rec: WorkspaceRecord, tmp_path: Path, test: str | None = None) -> dict[str, Any]:
    log = tmp_path / f"land-{rec.job_id}.log"
    return spaces.land(rec, into=None, strategy="rebase", test_command=test, test_log=log, message="land\n")


def test_a_job_run_on_a_worker_host_lands_in_the_callers_clone_after_its_branch_is_fetched(
    daemon: GitDaemon, worker: Workspaces, caller: Workspaces, tmp_path: Path
) -> None:
    url = daemon.url("app.git")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "--quiet", url, str(clone))
    placed, sealed = run_job(worker, "job1", url, {"new.txt": "from the worker\n"})
    assert sealed["remote"] == {"url": url, "branch": "relay/job1", "head": sealed["head"], "pushed": True}
    assert worker.url_of(placed) == url
    rec = caller.fetch_result(
        "job1", url=url, cwd=str(clone), base_sha=sealed["base_sha"], base_ref=sealed["base"], subdir=""
    )
    assert (rec.repo, rec.branch, rec.state, rec.head_sha) == (str(clone), "relay/job1", "pruned", sealed["head"])
    assert caller.get("job1") == rec and caller.url_of(rec) is None
    landed = land(caller, rec, tmp_path, test="test -f new.txt")
    assert landed["into"] == "main" and landed["test"]["passed"] is True
    assert (clone / "new.txt").read_text() == "from the worker\n" and git(clone, "status", "--porcelain") == ""
    assert git(clone, "rev-parse", "main") == landed["new"] and caller.get("job1").state == "landed"  # type: ignore[union-attr]


def test_a_worker_on_the_callers_own_home_pushing_into_the_callers_checkout_by_file_url_lands_there(
    repo: Path, worker: Workspaces, tmp_path: Path
) -> None:
    url = f"file://{repo}"
    placed, sealed = run_job(worker, "job1", url, {"app.txt": "ONE\n"})
    assert git(repo, "rev-parse", "relay/job1") == sealed["head"]  # pushed into the checkout's repository
    rec = worker.fetch_result("job1", url=url, cwd=str(repo), base_sha=placed.base_sha, base_ref="main")
    assert rec.common_dir == str(repo / ".git") and not Path(placed.path).exists()  # the cache's worktree is gone
    landed = land(worker, rec, tmp_path)
    assert (repo / "app.txt").read_text() == "ONE\n" and git(repo, "rev-parse", "main") == landed["new"]
    assert git(Path(placed.common_dir), "worktree", "list").count("\n") == 0  # only the bare cache itself


def test_fetching_again_fast_forwards_the_branch_and_a_job_that_never_pushed_is_refused(
    daemon: GitDaemon, worker: Workspaces, caller: Workspaces, tmp_path: Path
) -> None:
    url = daemon.url("app.git")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "--quiet", url, str(clone))
    placed, sealed = run_job(worker, "job1", url, {"new.txt": "one\n"})
    caller.fetch_result("job1", url=url, cwd=str(clone), base_sha=placed.base_sha, base_ref="main")
    Path(placed.path, "more.txt").write_text("a follow-up\n")  # a follow-up on the worker adds a commit
    again = worker.seal_and_push(placed, "follow-up\n")
    rec = caller.fetch_result("job1", url=url, cwd=str(clone), base_sha=placed.base_sha, base_ref="main")
    assert again["head"] != sealed["head"] and rec.head_sha == again["head"] == git(clone, "rev-parse", "relay/job1")
    with pytest.raises(RelayError) as caught:
        caller.fetch_result("job2", url=url, cwd=str(clone), base_sha=placed.base_sha, base_ref="main")
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT and "did not push" in caught.value.message
    assert caller.get("job2") is None


def test_a_local_branch_of_that_name_that_went_another_way_is_refused_and_nothing_changes(
    daemon: GitDaemon, worker: Workspaces, caller: Workspaces, tmp_path: Path
) -> None:
    url = daemon.url("app.git")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "--quiet", url, str(clone))
    placed, _ = run_job(worker, "job1", url, {"new.txt": "one\n"})
    git(clone, "branch", "relay/job1", "main")
    git(clone, "commit", "-q", "--allow-empty", "-m", "mine")
    mine = git(clone, "rev-parse", "main")
    git(clone, "update-ref", "refs/heads/relay/job1", mine)
    with pytest.raises(RelayError) as caught:
        caller.fetch_result("job1", url=url, cwd=str(clone), base_sha=placed.base_sha, base_ref="main")
    assert caught.value.code is ErrorCode.LAND_CONFLICT and "git branch -D relay/job1" in caught.value.hint
    assert git(clone, "rev-parse", "relay/job1") == mine and caller.get("job1") is None
    assert git(clone, "for-each-ref", "refs/relay-fetch") == ""
