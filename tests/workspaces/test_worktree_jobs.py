"""Worktree jobs through the engine with the fake claude: isolation, the branch as the result, follow-ups."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine, JobRequest
from tests.conftest import SettingsFactory
from tests.workspaces.conftest import git, snapshot

pytestmark = pytest.mark.anyio


async def run(engine: Engine, req: JobRequest) -> str:
    job_id = engine.submit(req)
    with anyio.fail_after(20):
        rec = await engine.wait_one(job_id, 20)
    assert rec.is_final, rec.status
    return job_id


async def test_a_worktree_job_edits_its_own_branch_and_never_the_callers_checkout(
    make_settings: SettingsFactory, repo: Path
) -> None:
    before = snapshot(repo)
    async with Engine(make_settings()).running() as engine:
        prompt = "Make app.txt say hello\nmore detail [[fake:write=app.txt~hello\\n;new.txt~fresh]]"
        job_id = await run(engine, JobRequest(agent="claude", prompt=prompt, cwd=str(repo), workspace="worktree"))
        env = engine.envelope(job_id)
    assert env["status"] == "completed"
    ws = env["workspace"]
    branch = f"relay/{job_id}"
    assert (ws["branch"], ws["base"], ws["commits"], ws["state"]) == (branch, "main", 1, "active")
    assert ws["files_changed"] == ["app.txt", "new.txt"] == env["files_changed"]
    assert (ws["insertions"], ws["deletions"]) == (2, 3)
    assert Path(ws["path"]).parent == make_settings().worktrees_dir
    assert git(repo, "show", f"{branch}:app.txt") == "hello"
    assert (
        git(repo, "log", "-1", "--format=%an|%s|%b", branch)
        == f"relay|Make app.txt say hello|relay job {job_id} (claude)"
    )
    assert snapshot(repo) == before
    assert git(repo, "status", "--porcelain") == ""


async def test_a_job_started_in_a_sub_folder_runs_in_the_same_sub_folder_of_its_worktree(
    make_settings: SettingsFactory, repo: Path
) -> None:
    async with Engine(make_settings()).running() as engine:
        prompt = "edit lib [[fake:write=lib.txt~changed]]"
        job_id = await run(
            engine, JobRequest(agent="claude", prompt=prompt, cwd=str(repo / "src"), workspace="worktree")
        )
        env = engine.envelope(job_id)
        rec = engine.get(job_id)
    assert rec.cwd == env["workspace"]["path"] and rec.cwd.endswith(f"{job_id}/src")
    assert env["files_changed"] == ["src/lib.txt"]
    assert (repo / "src" / "lib.txt").read_text() == "lib\n"


async def test_carry_changes_starts_from_staged_unstaged_and_untracked_files_but_not_ignored_ones(
    make_settings: SettingsFactory, repo: Path
) -> None:
    (repo / ".gitignore").write_text("secret.env\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore")
    (repo / "app.txt").write_text("staged\n")
    git(repo, "add", "app.txt")
    (repo / "src" / "lib.txt").write_text("unstaged\n")
    (repo / "notes.txt").write_text("untracked\n")
    (repo / "secret.env").write_text("KEY=1\n")
    before = snapshot(repo)
    async with Engine(make_settings()).running() as engine:
        job_id = await run(
            engine,
            JobRequest(agent="claude", prompt="look", cwd=str(repo), workspace="worktree", carry_changes=True),
        )
        path = Path(engine.envelope(job_id)["workspace"]["path"])
    assert (path / "app.txt").read_text() == "staged\n"
    assert (path / "src" / "lib.txt").read_text() == "unstaged\n"
    assert (path / "notes.txt").read_text() == "untracked\n"
    assert not (path / "secret.env").exists()
    assert snapshot(repo) == before


async def test_a_follow_up_in_the_jobs_workspace_adds_a_commit_to_the_same_branch(
    make_settings: SettingsFactory, repo: Path
) -> None:
    async with Engine(make_settings()).running() as engine:
        first = await run(
            engine,
            JobRequest(agent="claude", prompt="one [[fake:write=a.txt~1]]", cwd=str(repo), workspace="worktree"),
        )
        session = engine.envelope(first)["session_id"]
        second = await run(
            engine,
            JobRequest(agent="claude", prompt="two [[fake:write=b.txt~2]]", workspace=f"job:{first}"),
        )
        env2 = engine.envelope(second)
        # Resuming the session alone finds its worktree too.
        third = await run(engine, JobRequest(agent="claude", prompt="three [[fake:write=c.txt~3]]", session_id=session))
        env3 = engine.envelope(third)
    branch = f"relay/{first}"
    assert env2["workspace"]["branch"] == env3["workspace"]["branch"] == branch
    assert env3["workspace"]["commits"] == 3 and env3["files_changed"] == ["a.txt", "b.txt", "c.txt"]
    assert [s.split()[0] for s in git(repo, "log", "--format=%s", branch).splitlines()[:3]] == ["three", "two", "one"]


async def test_a_follow_up_while_another_job_runs_in_the_worktree_is_refused(
    make_settings: SettingsFactory, repo: Path
) -> None:
    async with Engine(make_settings()).running() as engine:
        first = engine.submit(
            JobRequest(agent="claude", prompt="slow [[fake:sleep=5]]", cwd=str(repo), workspace="worktree")
        )
        with pytest.raises(RelayError) as caught:
            engine.submit(JobRequest(agent="claude", prompt="again", workspace=f"job:{first}"))
        await engine.cancel(first)
    assert caught.value.code is ErrorCode.LIMIT_REACHED and first in caught.value.hint


@pytest.mark.parametrize(
    ("setup", "request_args", "code", "words"),
    [
        ("plain", {}, ErrorCode.INVALID_ARGUMENT, "not in a git repository"),
        ("bare", {}, ErrorCode.INVALID_ARGUMENT, "bare repository"),
        ("repo", {"base": "no-such-branch"}, ErrorCode.INVALID_ARGUMENT, "not a branch, tag or commit"),
        ("repo", {"base": "--upload-pack=x"}, ErrorCode.INVALID_ARGUMENT, "is not a ref"),
        ("empty", {}, ErrorCode.INVALID_ARGUMENT, "no commit yet"),
        ("repo", {"base": "main", "carry_changes": True, "workspace": "cwd"}, ErrorCode.INVALID_ARGUMENT, "apply only"),
        ("repo", {"workspace": "elsewhere"}, ErrorCode.INVALID_ARGUMENT, "not one of cwd, worktree"),
    ],
)
async def test_bad_worktree_requests_get_a_clear_error_and_leave_nothing_behind(
    make_settings: SettingsFactory,
    workdir: Path,
    setup: str,
    request_args: dict[str, object],
    code: ErrorCode,
    words: str,
) -> None:
    if setup == "bare":
        git(workdir, "init", "-q", "--bare")
    elif setup in ("repo", "empty"):
        git(workdir, "init", "-q", "-b", "main")
        if setup == "repo":
            (workdir / "f").write_text("x")
            git(workdir, "add", ".")
            git(workdir, "commit", "-q", "-m", "x")
    args: dict[str, object] = {"workspace": "worktree"} | request_args
    settings = make_settings()
    async with Engine(settings).running() as engine:
        with pytest.raises(RelayError) as caught:
            engine.submit(JobRequest(agent="claude", prompt="x", cwd=str(workdir), **args))  # type: ignore[arg-type]
        assert engine.list() == []
    assert caught.value.code is code and words in caught.value.message and caught.value.hint
    assert not settings.worktrees_dir.exists() or list(settings.worktrees_dir.iterdir()) == []


async def test_a_worktree_deleted_by_hand_while_the_job_runs_ends_the_job_with_a_note(
    make_settings: SettingsFactory, repo: Path
) -> None:
    async with Engine(make_settings()).running() as engine:
        job_id = engine.submit(
            JobRequest(agent="claude", prompt="work [[fake:sleep=1]]", cwd=str(repo), workspace="worktree")
        )
        path = Path(engine.envelope(job_id)["workspace"]["path"])
        import shutil

        shutil.rmtree(path)
        with anyio.fail_after(20):
            await engine.wait_one(job_id, 20)
        env = engine.envelope(job_id)
    assert env["status"] in ("completed", "failed")
    assert "removed while the job ran" in env["workspace"]["note"]
    assert env["workspace"]["branch"] == f"relay/{job_id}"


async def test_a_restart_keeps_the_worktree_of_an_unlanded_job_and_a_short_retention_prunes_it(
    make_settings: SettingsFactory, repo: Path
) -> None:
    settings = make_settings()
    async with Engine(settings).running() as engine:
        job_id = await run(
            engine, JobRequest(agent="claude", prompt="x [[fake:write=a~1]]", cwd=str(repo), workspace="worktree")
        )
        path = Path(engine.envelope(job_id)["workspace"]["path"])
    async with Engine(settings).running() as engine:
        assert engine.prune_worktrees() == []
        assert path.is_dir()
    async with Engine(make_settings(RELAY_WORKTREE_KEEP_DAYS="1e-9")).running() as engine:
        assert engine.prune_worktrees() == [job_id]
        assert engine.envelope(job_id)["workspace"]["state"] == "pruned"
        # A follow-up makes it again from its branch.
        again = await run(engine, JobRequest(agent="claude", prompt="y [[fake:write=b~2]]", workspace=f"job:{job_id}"))
        assert engine.envelope(again)["workspace"]["commits"] == 2
    assert path.is_dir() and git(repo, "show", f"relay/{job_id}:a") == "1"


async def test_submodules_are_initialised_in_the_worktree_and_an_unreachable_one_is_refused_cleanly(
    make_settings: SettingsFactory, repo: Path, tmp_path: Path
) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    git(sub, "init", "-q", "-b", "main")
    (sub / "inner.txt").write_text("inner\n")
    git(sub, "add", ".")
    git(sub, "commit", "-q", "-m", "sub")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "vendor/sub")
    git(repo, "commit", "-q", "-m", "add submodule")
    settings = make_settings()
    async with Engine(settings).running() as engine:
        job = await run(engine, JobRequest(agent="claude", prompt="x", cwd=str(repo), workspace="worktree"))
        path = Path(engine.envelope(job)["workspace"]["path"])
        assert (path / "vendor" / "sub" / "inner.txt").read_text() == "inner\n"
        import shutil

        shutil.rmtree(sub)  # the submodule's source is gone: a new worktree cannot fetch it
        with pytest.raises(RelayError) as caught:
            engine.submit(JobRequest(agent="claude", prompt="y", cwd=str(repo), workspace="worktree"))
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT and "submodules" in caught.value.message
    assert sorted(p.name for p in settings.worktrees_dir.iterdir()) == [job]
    assert git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/relay") == f"relay/{job}"
