"""`[workspaces] default = "worktree"`: a compat tool whose agent edits (powerspawn's spawn_codex) gets its own worktree
through the same core request field, and the agent's sandbox flags follow the worktree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.argv import opt
from tests.compat.conftest import ProfileClient, call, data, wait_done
from tests.workspaces.conftest import git, one_commit_repo

pytestmark = pytest.mark.anyio


@pytest.fixture
def repo(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    one_commit_repo(workdir)
    monkeypatch.chdir(workdir)  # powerspawn's tools run in relay's own folder
    return workdir


async def test_spawn_codex_runs_in_its_own_worktree_with_the_sandbox_on_the_worktree(
    profile_client: ProfileClient, repo: Path, argv_log: Path
) -> None:
    async with profile_client(toolsets="core,powerspawn", RELAY_WORKSPACE="worktree") as c:
        spawned = data(await call(c, "spawn_codex", prompt="edit it [[fake:write=app.txt~two]]"))
        job_id = spawned.get("agent_id") or spawned.get("job_id")
        assert isinstance(job_id, str), spawned
        await wait_done(c, job_id)
        env = data(await call(c, "job_status", job_id=job_id))
    ws = env["workspace"]  # powerspawn's agent_id is the start of the job id
    assert ws["branch"] == f"relay/{env['job_id']}" and env["job_id"].startswith(job_id)
    assert ws["files_changed"] == ["app.txt"]
    started = json.loads(argv_log.read_text().splitlines()[-1])
    argv = started["argv"]
    assert started["cwd"] == ws["path"] and opt(argv, "--cd", "-C") == ws["path"]
    assert (repo / "app.txt").read_text() == "one\n"  # the caller's checkout is untouched
    assert git(repo, "show", f"relay/{env['job_id']}:app.txt") == "two"


async def test_the_default_leaves_read_only_jobs_and_folders_outside_a_repository_where_they_are(
    profile_client: ProfileClient, repo: Path, tmp_path: Path
) -> None:
    plain = tmp_path / "not-a-repo"
    plain.mkdir()
    async with profile_client(toolsets="core", RELAY_WORKSPACE="worktree", RELAY_ALLOWED_ROOTS=str(tmp_path)) as c:
        ro = data(await call(c, "delegate", prompt="look", cwd=str(repo), mode="sync"))
        outside = data(await call(c, "delegate", prompt="edit", cwd=str(plain), permission="edit", mode="sync"))
        edit = data(await call(c, "delegate", prompt="edit", cwd=str(repo), permission="edit", mode="sync"))
    assert ro["workspace"] is None and outside["workspace"] is None
    assert edit["workspace"]["branch"] == f"relay/{edit['job_id']}"
