"""Landing a worktree job's branch: fast-forward, rebase, merge, squash, the test gate, and refusals that change nothing."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine, JobRequest
from relay.jobs.grants import chosen_by_the_person
from relay.workspaces import LandError
from tests.conftest import SettingsFactory
from tests.workspaces.conftest import git, snapshot

pytestmark = pytest.mark.anyio


async def edit(engine: Engine, repo: Path, writes: str, **kw: object) -> str:
    req = JobRequest(agent="claude", prompt=f"edit [[fake:write={writes}]]", cwd=str(repo), workspace="worktree", **kw)  # type: ignore[arg-type]
    job_id = engine.submit(req)
    with anyio.fail_after(20):
        await engine.wait_one(job_id, 20)
    return job_id


async def land_as_the_person(engine: Engine, job: str, **kw: str) -> dict[str, object]:
    """A land with a test command as `relay land --test` makes it: a command the person typed runs unasked."""
    with chosen_by_the_person("full"):
        return await engine.land(job, **kw)


def refs(repo: Path) -> dict[str, str]:
    return dict(line.split(" ", 1)[::-1] for line in git(repo, "show-ref").splitlines())


async def test_landing_the_first_fast_forwards_main_and_the_clean_checkout_and_the_second_rebases(
    make_settings: SettingsFactory, repo: Path
) -> None:
    async with Engine(make_settings()).running() as engine:
        first = await edit(engine, repo, "app.txt~ONE\\ntwo\\nthree\\n")
        second = await edit(engine, repo, "src/lib.txt~LIB\\n")
        path = Path(engine.envelope(first)["workspace"]["path"])
        base = git(repo, "rev-parse", "main")
        landed = await engine.land(first)
        assert (landed["into"], landed["old"], landed["commits"]) == ("main", base, 1)
        assert git(repo, "rev-parse", "main") == landed["new"] == git(repo, "rev-parse", f"relay/{first}")
        assert (repo / "app.txt").read_text() == "ONE\ntwo\nthree\n"  # the checkout moved with main
        assert git(repo, "status", "--porcelain") == ""
        assert not path.exists()  # a landed worktree is removed at once; its branch stays
        assert engine.envelope(first)["workspace"]["state"] == "landed"
        again = await engine.land(second)
        assert again["old"] == landed["new"] and again["commits"] == 1
        assert git(repo, "rev-parse", "main^") == landed["new"]
        assert (repo / "src" / "lib.txt").read_text() == "LIB\n" and (
            repo / "app.txt"
        ).read_text() == "ONE\ntwo\nthree\n"
        with pytest.raises(RelayError) as twice:
            await engine.land(first)
    assert twice.value.code is ErrorCode.INVALID_ARGUMENT and "already landed" in twice.value.message


async def test_a_conflicting_second_land_names_the_file_and_changes_nothing(
    make_settings: SettingsFactory, repo: Path
) -> None:
    async with Engine(make_settings()).running() as engine:
        first = await edit(engine, repo, "app.txt~A\\n")
        second = await edit(engine, repo, "app.txt~B\\n")
        await engine.land(first)
        before_refs, before_files = refs(repo), snapshot(repo)
        head2 = git(repo, "rev-parse", f"relay/{second}")
        with pytest.raises(LandError) as caught:
            await engine.land(second)
        env = engine.envelope(second)
    assert caught.value.code is ErrorCode.LAND_CONFLICT and caught.value.details["conflicts"] == ["app.txt"]
    assert "app.txt" in caught.value.message and caught.value.hint
    assert refs(repo) == before_refs and snapshot(repo) == before_files
    assert git(repo, "rev-parse", f"relay/{second}") == head2
    assert env["workspace"]["state"] == "active"
    assert git(Path(env["workspace"]["path"]), "status", "--porcelain") == ""


async def test_a_failing_test_command_refuses_the_land_and_its_output_pages_like_a_jobs(
    make_settings: SettingsFactory, repo: Path
) -> None:
    async with Engine(make_settings()).running() as engine:
        job = await edit(engine, repo, "app.txt~broken\\n")
        before = refs(repo)
        with pytest.raises(LandError) as caught:
            await land_as_the_person(
                engine, job, test_command="grep -q three app.txt || { echo 'three is missing'; exit 3; }"
            )
        page = engine.read_output(job, "test", 0, 1000)
        passed = await land_as_the_person(engine, job, test_command="test -f app.txt && echo ok")
    assert caught.value.code is ErrorCode.LAND_TEST_FAILED
    test = caught.value.details["test"]
    assert (test["passed"], test["exit_code"], test["output_tail"]) == (False, 3, "three is missing\n")
    assert page["text"] == "three is missing\n" and page["view"] == "test"
    assert before["refs/heads/main"] != passed["new"] and passed["test"]["passed"] is True
    assert refs(repo)["refs/heads/main"] == passed["new"]


async def test_a_test_command_past_its_time_is_killed_and_the_land_refused(
    make_settings: SettingsFactory, repo: Path
) -> None:
    async with Engine(make_settings(RELAY_LAND_TEST_TIMEOUT_S="0.5")).running() as engine:
        job = await edit(engine, repo, "app.txt~x\\n")
        with pytest.raises(LandError) as caught:
            await land_as_the_person(engine, job, test_command="sleep 30")
    assert caught.value.code is ErrorCode.LAND_TEST_FAILED and caught.value.details["test"]["timed_out"] is True


@pytest.mark.parametrize("strategy", ["merge", "squash"])
async def test_merge_and_squash_land_onto_a_main_that_moved(
    make_settings: SettingsFactory, repo: Path, strategy: str
) -> None:
    async with Engine(make_settings()).running() as engine:
        job = await edit(engine, repo, "new.txt~n\\n")
        (repo / "other.txt").write_text("o\n")
        git(repo, "add", "other.txt")
        git(repo, "commit", "-q", "-m", "main moved")
        moved = git(repo, "rev-parse", "main")
        landed = await engine.land(job, strategy=strategy)
    parents = git(repo, "log", "-1", "--format=%P", "main").split()
    assert parents[0] == moved and len(parents) == (2 if strategy == "merge" else 1)
    assert (repo / "new.txt").read_text() == "n\n" and (repo / "other.txt").exists()
    assert landed["new"] == git(repo, "rev-parse", "main")


async def test_a_dirty_checkout_of_the_target_refuses_a_land_that_touches_its_dirty_files(
    make_settings: SettingsFactory, repo: Path
) -> None:
    async with Engine(make_settings()).running() as engine:
        job = await edit(engine, repo, "app.txt~agent\\n")
        (repo / "app.txt").write_text("mine, not committed\n")
        before_refs, before_files = refs(repo), snapshot(repo)
        with pytest.raises(LandError) as caught:
            await engine.land(job)
        assert refs(repo) == before_refs and snapshot(repo) == before_files
        assert caught.value.details["conflicts"] == ["app.txt"] and "stash" in caught.value.hint
        # A dirty file the land does not touch does not stop it.
        (repo / "app.txt").write_text("one\ntwo\nthree\n")
        (repo / "src" / "lib.txt").write_text("mine\n")
        landed = await engine.land(job)
    assert git(repo, "rev-parse", "main") == landed["new"]
    assert (repo / "app.txt").read_text() == "agent\n" and (repo / "src" / "lib.txt").read_text() == "mine\n"


async def test_land_into_a_branch_not_checked_out_moves_only_that_ref(
    make_settings: SettingsFactory, repo: Path
) -> None:
    git(repo, "branch", "release")
    async with Engine(make_settings()).running() as engine:
        job = await edit(engine, repo, "app.txt~rel\\n")
        main = git(repo, "rev-parse", "main")
        landed = await engine.land(job, into="release")
    assert git(repo, "rev-parse", "release") == landed["new"] and git(repo, "rev-parse", "main") == main
    assert (repo / "app.txt").read_text() == "one\ntwo\nthree\n"


async def test_refusals_before_a_land_starts(make_settings: SettingsFactory, repo: Path) -> None:
    async with Engine(make_settings()).running() as engine:
        running = engine.submit(
            JobRequest(agent="claude", prompt="slow [[fake:sleep=5]]", cwd=str(repo), workspace="worktree")
        )
        plain = engine.submit(JobRequest(agent="claude", prompt="plain", cwd=str(repo)))
        with anyio.fail_after(20):
            await engine.wait_one(plain, 20)
        codes: dict[str, tuple[ErrorCode, str]] = {}
        for name, call in {
            "running": lambda: engine.land(running),
            "plain": lambda: engine.land(plain),
            "no-branch": lambda: engine.land(running, into="nope"),
        }.items():
            try:
                await call()
            except RelayError as err:
                codes[name] = (err.code, err.message)
        await engine.cancel(running)
        with pytest.raises(RelayError) as missing:
            await engine.land(running, into="nope")
        result = await engine.discard(running)
        with pytest.raises(RelayError) as discarded:
            await engine.land(running)
    assert codes["running"][0] is ErrorCode.INVALID_ARGUMENT and "still running" in codes["running"][1]
    assert codes["plain"][0] is ErrorCode.INVALID_ARGUMENT and "did not run in a worktree" in codes["plain"][1]
    assert missing.value.code is ErrorCode.INVALID_ARGUMENT and "does not exist" in missing.value.message
    assert result["discarded"] is True and not Path(result["path"]).exists()
    assert f"relay/{running}" not in git(repo, "branch", "--list")
    assert discarded.value.code is ErrorCode.INVALID_ARGUMENT and "discarded" in discarded.value.message


async def test_a_detached_head_job_lands_only_with_into(make_settings: SettingsFactory, repo: Path) -> None:
    git(repo, "checkout", "-q", "--detach", "HEAD")
    async with Engine(make_settings()).running() as engine:
        job = await edit(engine, repo, "app.txt~d\\n")
        with pytest.raises(RelayError) as caught:
            await engine.land(job)
        landed = await engine.land(job, into="main")
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT and "into=" in caught.value.hint
    assert landed["into"] == "main"


async def test_the_diff_view_pages_the_branch_against_its_base(make_settings: SettingsFactory, repo: Path) -> None:
    async with Engine(make_settings()).running() as engine:
        job = await edit(engine, repo, "app.txt~changed\\n")
        first = engine.read_output(job, "diff", 0, 40)
        rest = engine.read_output(job, "diff", first["next_offset"], 100_000)
    whole = first["text"] + rest["text"]
    assert whole.startswith("diff --git a/app.txt b/app.txt") and "+changed" in whole and "-one" in whole
    assert rest["next_offset"] is None and rest["complete"] is True


async def test_two_lands_of_one_repository_at_once_are_serialized(make_settings: SettingsFactory, repo: Path) -> None:
    async with Engine(make_settings()).running() as engine:
        a = await edit(engine, repo, "a.txt~a\\n")
        b = await edit(engine, repo, "b.txt~b\\n")
        results: list[dict[str, object]] = []

        async def land(job: str) -> None:
            results.append(await land_as_the_person(engine, job, test_command="sleep 0.3"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(land, a)
            tg.start_soon(land, b)
    first, second = results
    assert second["old"] == first["new"]  # the second went onto the first's result, not the old tip
    assert (repo / "a.txt").exists() and (repo / "b.txt").exists()


async def test_files_with_non_ascii_names_are_named_as_they_are_in_conflicts_and_dirty_checkouts(
    make_settings: SettingsFactory, repo: Path
) -> None:
    (repo / "café.txt").write_text("v1\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "café")
    async with Engine(make_settings()).running() as engine:
        first = await edit(engine, repo, "café.txt~A\\n")
        second = await edit(engine, repo, "café.txt~B\\n")
        (repo / "café.txt").write_text("mine\n")
        with pytest.raises(LandError) as dirty:
            await engine.land(first)
        (repo / "café.txt").write_text("v1\n")
        await engine.land(first)
        with pytest.raises(LandError) as conflict:
            await engine.land(second)
    assert dirty.value.details["conflicts"] == ["café.txt"] and "café.txt" in dirty.value.message
    assert conflict.value.details["conflicts"] == ["café.txt"]


async def test_a_landed_worktree_is_gone_at_once_and_its_files_leave_the_trash(
    make_settings: SettingsFactory, repo: Path
) -> None:
    settings = make_settings()
    async with Engine(settings).running() as engine:
        job = await edit(engine, repo, "app.txt~x\\n")
        path = Path(engine.envelope(job)["workspace"]["path"])
        await engine.land(job)
        assert not path.exists() and len(git(repo, "worktree", "list").splitlines()) == 1
        engine.prune_worktrees()
    assert not (settings.worktrees_dir / ".trash").exists()
