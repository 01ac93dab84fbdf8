"""A test gate changes nothing: what the test command writes in a worktree is gone before anything seals or lands."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from relay.jobs.engine import Engine, JobRequest
from relay.jobs.grants import chosen_by_the_person
from relay.workspaces import LandError
from tests.conftest import SettingsFactory
from tests.workspaces.conftest import git

pytestmark = pytest.mark.anyio

# A gate as a real one behaves: a report not in .gitignore, a tracked file rewritten, a file deleted, a folder made,
# and a file git ignores (a cache), which may stay.
MESSY = (
    "echo '<testsuite/>' > report.xml && echo rewritten > app.txt && rm src/lib.txt"
    " && mkdir -p out/deep && echo x > out/deep/r.txt && echo cached > cache.tmp"
)


async def run(engine: Engine, req: JobRequest) -> str:
    job_id = engine.submit(req)
    with anyio.fail_after(20):
        await engine.wait_one(job_id, 20)
    assert engine.envelope(job_id)["status"] == "completed"
    return job_id


async def edit(engine: Engine, repo: Path) -> str:
    prompt = "edit [[fake:write=new.txt~NEW\\n]]"
    return await run(engine, JobRequest(agent="claude", prompt=prompt, cwd=str(repo), workspace="worktree"))


def files_on(repo: Path, ref: str) -> list[str]:
    return git(repo, "ls-tree", "-r", "--name-only", ref).splitlines()


@pytest.fixture
def ignoring(repo: Path) -> Path:
    """The repository, its .gitignore naming *.tmp."""
    (repo / ".gitignore").write_text("*.tmp\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore")
    return repo


async def test_a_passing_gate_that_writes_a_report_and_edits_files_lands_only_the_agents_change(
    make_settings: SettingsFactory, ignoring: Path
) -> None:
    repo = ignoring
    async with Engine(make_settings()).running() as engine:
        job = await edit(engine, repo)
        with chosen_by_the_person("full"):
            landed = await engine.land(job, test_command=MESSY)
    assert landed["landed"] is True and landed["test"]["passed"] is True
    assert files_on(repo, "main") == [".gitignore", "app.txt", "new.txt", "src/lib.txt"]
    assert landed["test"]["undone"] == ["app.txt", "out/deep/r.txt", "report.xml", "src/lib.txt"]
    assert git(repo, "show", "main:app.txt") == "one\ntwo\nthree"
    assert not (repo / "report.xml").exists() and not (repo / "out").exists()
    assert git(repo, "status", "--porcelain") == ""


async def test_a_failing_gate_leaves_nothing_for_the_follow_ups_seal_to_commit(
    make_settings: SettingsFactory, ignoring: Path
) -> None:
    repo = ignoring
    async with Engine(make_settings()).running() as engine:
        job = await edit(engine, repo)
        path = Path(engine.envelope(job)["workspace"]["path"])
        with chosen_by_the_person("full"), pytest.raises(LandError) as caught:
            await engine.land(job, test_command=MESSY + " && exit 1")
        assert sorted(p.name for p in path.iterdir()) == [
            ".git",
            ".gitignore",
            "app.txt",
            "cache.tmp",
            "new.txt",
            "src",
        ]
        assert (path / "app.txt").read_text() == "one\ntwo\nthree\n" and (path / "src" / "lib.txt").exists()
        prompt = "more [[fake:write=more.txt~MORE\\n]]"
        follow = await run(engine, JobRequest(agent="claude", prompt=prompt, workspace=f"job:{job}"))
        sealed = engine.envelope(follow)["workspace"]
    assert caught.value.details["test"]["undone"] == ["app.txt", "out/deep/r.txt", "report.xml", "src/lib.txt"]
    assert sealed["files_changed"] == ["more.txt", "new.txt"]
    assert files_on(repo, f"relay/{job}") == [".gitignore", "app.txt", "more.txt", "new.txt", "src/lib.txt"]


async def test_best_ofs_test_of_a_candidate_leaves_nothing_for_its_land_to_commit(
    make_settings: SettingsFactory, ignoring: Path
) -> None:
    repo = ignoring
    async with Engine(make_settings()).running() as engine:
        job = await edit(engine, repo)
        with chosen_by_the_person("full"):
            permitted = await engine.permit_command(MESSY, what="best_of's test command", cwd=str(repo))
        tested = await engine.test_worktree(job, MESSY, permitted)  # as best_of tests each candidate
        landed = await engine.land(job)
    assert files_on(repo, "main") == [".gitignore", "app.txt", "new.txt", "src/lib.txt"]
    assert git(repo, "show", "main:app.txt") == "one\ntwo\nthree"
    assert tested["passed"] is True and "report.xml" in tested["undone"] and landed["commits"] == 1


async def test_a_gate_puts_back_what_it_changed_of_the_files_the_agent_left_uncommitted(
    make_settings: SettingsFactory, ignoring: Path
) -> None:
    repo = ignoring
    async with Engine(make_settings()).running() as engine:
        job = await edit(engine, repo)
        path = Path(engine.envelope(job)["workspace"]["path"])
        (path / "draft.txt").write_text("mine\n")  # edits made in the worktree after the job, not yet committed
        (path / "app.txt").write_text("edited by hand\n")
        command = "echo gate > draft.txt && echo gate > app.txt && echo r > report.xml"
        with chosen_by_the_person("full"):
            permitted = await engine.permit_command(command, what="a test command", cwd=str(repo))
        tested = await engine.test_worktree(job, command, permitted)
        landed = await engine.land(job)
    assert landed["landed"] is True
    assert files_on(repo, "main") == [".gitignore", "app.txt", "draft.txt", "new.txt", "src/lib.txt"]
    assert git(repo, "show", "main:app.txt") == "edited by hand" and git(repo, "show", "main:draft.txt") == "mine"
    assert tested["undone"] == ["app.txt", "draft.txt", "report.xml"]
