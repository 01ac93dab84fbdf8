"""job_land(on_conflict="agent") and `relay land --resolve`: a conflict resolved by the job's own agent (the fake
claude, which writes the file a directive in its prompt names), then landed through the gate; without it, or when
the agent leaves a marker, today's refusal, and nothing loops.

The fake acts on `[[fake:write=F~TEXT]]` anywhere in its prompt. The follow-up's prompt names both sides' commits,
so the commit the test makes on main carries the resolution in its subject: the agent reads it there, as a real
one reads the commits the prompt names."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.config import Settings
from relay.errors import ErrorCode
from relay.jobs.engine import Engine, JobRequest
from relay.server.app import build_server
from relay.server.models import LandResult
from relay.store import JobRecord, Store
from relay.workflows.resolve import Land, land
from relay.workspaces import LandError, Workspaces
from relay.workspaces import conflict as conflicts
from relay.workspaces.seal import commit_leftovers
from tests.conftest import SettingsFactory
from tests.web.conftest import wait_until
from tests.workspaces.conftest import git

pytestmark = pytest.mark.anyio

GATE = "grep -q 'ours and theirs' app.txt && echo gate-saw-both"
CONFIG = f'[workspaces]\ntest_command = "{GATE}"\n'
OURS = "change app.txt\n[[fake:write=app.txt~ours\\n]]"  # the directive is not in the commit's subject line
RESOLVES = "[[fake:write=app.txt~ours and theirs\\n]]"
RELAY = str(Path(sys.executable).with_name("relay"))


def main_moves(repo: Path, subject: str, text: str = "theirs\n") -> str:
    """Someone commits on main meanwhile, over the same line of app.txt; returns main's new tip."""
    (repo / "app.txt").write_text(text)
    git(repo, "commit", "-q", "-am", subject)
    return git(repo, "rev-parse", "main")


def jobs_of(home: Path) -> list[JobRecord]:
    store = Store(home / "relay.db")
    try:
        return store.list_jobs(limit=100)
    finally:
        store.close()


async def tool(c: Client, name: str, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    with anyio.fail_after(90):
        result = await c.call_tool(name, args)
    assert result.structured_content is not None, result.content
    return bool(result.is_error), result.structured_content


async def worktree_job(c: Client, repo: Path, prompt: str, permission: str = "edit") -> str:
    args = {"prompt": prompt, "cwd": str(repo), "mode": "sync", "workspace": "worktree", "permission": permission}
    failed, env = await tool(c, "delegate", args)
    assert not failed and env["status"] == "completed", env
    return str(env["job_id"])


def server(make_settings: SettingsFactory) -> Client:
    return Client(build_server(make_settings(CONFIG, RELAY_PROFILE="", RELAY_TOOLSETS="core,workspaces")))


async def test_the_jobs_agent_resolves_the_conflict_in_its_worktree_and_the_land_goes_through_the_gate(
    make_settings: SettingsFactory, repo: Path, relay_home: Path
) -> None:
    async with server(make_settings) as c:
        job = await worktree_job(c, repo, OURS)
        head = git(repo, "rev-parse", f"relay/{job}")
        theirs = main_moves(repo, f"main's own edit {RESOLVES}")
        failed, out = await tool(c, "job_land", {"job_id": job, "test_command": GATE, "on_conflict": "agent"})
    assert not failed, out
    landed = LandResult.model_validate(out)  # the answer holds to the tool's published schema
    follow = next(r for r in jobs_of(relay_home) if r.id != job)
    assert landed.resolved_by == follow.id and landed.landed and landed.into == "main"
    assert landed.test is not None and landed.test.passed and "gate-saw-both" in landed.test.output_tail
    assert (follow.agent, follow.status, follow.request["permission"]) == ("claude", "completed", "edit")
    assert (follow.principal, follow.request["workspace"]) == ("local", f"job:{job}")
    prompt = str(follow.request["prompt"])
    for named in ("- app.txt", f"relay/{job}", head[:12], theirs[:12], "ours (HEAD", "theirs (main", "main's own edit"):
        assert named in prompt, (named, prompt)
    # main holds the agent's resolution, on top of both sides; the checkout followed it.
    assert git(repo, "rev-parse", "main") == landed.new == git(repo, "rev-parse", f"relay/{job}")
    assert git(repo, "show", "main:app.txt") == "ours and theirs" == (repo / "app.txt").read_text().strip()
    for side in (head, theirs):
        assert subprocess.run(["git", "merge-base", "--is-ancestor", side, "main"], cwd=repo).returncode == 0
    assert git(repo, "status", "--porcelain") == ""


async def test_without_on_conflict_agent_the_land_is_refused_as_before_and_no_job_starts(
    make_settings: SettingsFactory, repo: Path, relay_home: Path
) -> None:
    async with server(make_settings) as c:
        job = await worktree_job(c, repo, OURS)
        main = main_moves(repo, f"main's own edit {RESOLVES}")
        failed, out = await tool(c, "job_land", {"job_id": job})
    assert failed and out["error"]["code"] == "LAND_CONFLICT" and out["conflicts"] == ["app.txt"]
    assert out["resolved_by"] is None and LandResult.model_validate(out).landed is False
    assert [r.id for r in jobs_of(relay_home)] == [job] and git(repo, "rev-parse", "main") == main


async def test_an_agent_that_leaves_a_marker_stops_the_land_with_the_refusal_once_and_the_branch_goes_back(
    make_settings: SettingsFactory, repo: Path, relay_home: Path
) -> None:
    async with server(make_settings) as c:
        job = await worktree_job(c, repo, OURS)
        head = git(repo, "rev-parse", f"relay/{job}")
        main = main_moves(repo, "main's own edit, with nothing for the agent to do")
        failed, out = await tool(c, "job_land", {"job_id": job, "on_conflict": "agent"})
    follow = [r for r in jobs_of(relay_home) if r.id != job]
    assert len(follow) == 1  # one follow-up: no loop
    assert failed and out["error"]["code"] == "LAND_CONFLICT" and out["resolved_by"] == follow[0].id
    assert "left conflict markers in: app.txt" in out["error"]["message"] and out["error"]["hint"]
    assert git(repo, "rev-parse", "main") == main and git(repo, "rev-parse", f"relay/{job}") == head
    tree = relay_home / "worktrees" / job
    assert git(tree, "status", "--porcelain") == "" and (tree / "app.txt").read_text() == "ours\n"


async def test_a_read_only_job_gets_no_follow_up_it_could_not_use(
    make_settings: SettingsFactory, repo: Path, relay_home: Path
) -> None:
    async with server(make_settings) as c:
        job = await worktree_job(c, repo, OURS, permission="read-only")
        main_moves(repo, f"main's own edit {RESOLVES}")
        failed, out = await tool(c, "job_land", {"job_id": job, "on_conflict": "agent"})
    assert failed and out["error"]["code"] == "LAND_CONFLICT" and "permission 'read-only'" in out["error"]["message"]
    assert "permission='edit'" in out["error"]["hint"] and [r.id for r in jobs_of(relay_home)] == [job]


def test_relay_land_resolve_has_the_agent_resolve_it_and_says_which_job_did(
    make_settings: SettingsFactory, repo: Path, relay_home: Path
) -> None:
    make_settings()
    env = {**os.environ, "RELAY_HOME": str(relay_home)}

    def relay(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([RELAY, *args], env=env, cwd=repo, capture_output=True, text=True, timeout=120)

    ran = relay("run", "claude", OURS, "--worktree", "--permission", "edit", "--json")
    assert ran.returncode == 0, ran.stderr
    job = next(r.id for r in jobs_of(relay_home))
    main_moves(repo, f"main's own edit {RESOLVES}")
    refused = relay("land", job)
    landed = relay("land", job, "--resolve", "--test", GATE)
    follow = next(r.id for r in jobs_of(relay_home) if r.id != job)
    assert refused.returncode == 1 and "LAND_CONFLICT" in refused.stderr
    assert landed.returncode == 0, landed.stderr
    assert f"after the test passed, its conflict resolved by job {follow}" in landed.stdout
    assert git(repo, "show", "main:app.txt") == "ours and theirs"


async def kept_conflict(engine: Engine, repo: Path, settings: Settings) -> tuple[str, str, str, Any]:
    """A job whose land's conflict was kept in its worktree, as on_conflict='agent' leaves it before its follow-up:
    (job, the branch's head before, main's tip, the workspace record)."""
    job = engine.submit(JobRequest(agent="claude", prompt=OURS, cwd=str(repo), workspace="worktree"))
    with anyio.fail_after(30):
        await engine.wait_one(job, 30)
    head = git(repo, "rev-parse", f"relay/{job}")
    main = main_moves(repo, "main's own edit")
    spaces = Workspaces(settings)
    rec = spaces.get(job)
    spaces.close()
    assert rec is not None
    kept = conflicts.keep(rec, None)
    assert kept is not None and kept.files == ("app.txt",) and kept.head == head
    return job, head, main, rec


async def test_a_resolution_relay_went_away_in_the_middle_of_never_lands_its_markers(
    make_settings: SettingsFactory, repo: Path
) -> None:
    settings = make_settings()
    async with Engine(settings).running() as engine:
        job, head, main, rec = await kept_conflict(engine, repo, settings)
        # relay went away; the follow-up's seal committed what it left: the merge, markers and all.
        commit_leftovers(rec, "a follow-up that resolved nothing\n")
        assert "<<<<<<<" in git(repo, "show", f"relay/{job}:app.txt")
        with pytest.raises(LandError) as refused:
            await land(engine, Land(job))
    assert refused.value.code is ErrorCode.LAND_CONFLICT and refused.value.details["conflicts"] == ["app.txt"]
    assert git(repo, "rev-parse", "main") == main and "<<<<<<<" not in git(repo, "show", "main:app.txt")
    assert git(repo, "rev-parse", f"relay/{job}") == head
    assert git(Path(rec.path), "status", "--porcelain") == "" and conflicts.pending(rec) is None


async def test_a_resolution_whose_follow_up_completed_while_relay_was_away_lands(
    make_settings: SettingsFactory, repo: Path
) -> None:
    settings = make_settings()
    async with Engine(settings).running() as engine:
        job, head, main, rec = await kept_conflict(engine, repo, settings)
        (Path(rec.path) / "app.txt").write_text("ours and theirs\n")
        commit_leftovers(rec, "the follow-up's resolution\n")
        kept = conflicts.pending(rec)
        assert kept is not None
        conflicts.note(rec, kept[0], job)  # a completed job stands for the follow-up that resolved it
        landed = await land(engine, Land(job))
    assert landed["landed"] is True and git(repo, "show", "main:app.txt") == "ours and theirs"
    for side in (head, main):
        assert subprocess.run(["git", "merge-base", "--is-ancestor", side, "main"], cwd=repo).returncode == 0


async def test_a_second_conflict_after_the_agents_resolution_stops_with_the_refusal_and_starts_no_other_job(
    make_settings: SettingsFactory, repo: Path, relay_home: Path, tmp_path: Path
) -> None:
    started, gate = tmp_path / "started", tmp_path / "gate"
    found: dict[str, tuple[bool, dict[str, Any]]] = {}
    async with server(make_settings) as c:
        job = await worktree_job(c, repo, OURS)
        # The agent resolves, then waits at the gate while main moves again over the same line.
        main_moves(repo, f"main's own edit [[fake:write=app.txt~ours and theirs\\n,pidfile={started},until={gate}]]")

        async def land_it() -> None:
            found["out"] = await tool(c, "job_land", {"job_id": job, "on_conflict": "agent"})

        async with anyio.create_task_group() as tg:
            tg.start_soon(land_it)
            await anyio.to_thread.run_sync(lambda: wait_until(started.exists, what="the follow-up to start"))
            moved = main_moves(repo, "main rewrites the line again", "theirs again\n")
            gate.touch()
    failed, out = found["out"]
    follow = [r for r in jobs_of(relay_home) if r.id != job]
    assert len(follow) == 1 and follow[0].status == "completed"  # one follow-up: no loop
    assert failed and out["error"]["code"] == "LAND_CONFLICT" and out["resolved_by"] == follow[0].id
    assert out["conflicts"] == ["app.txt"] and git(repo, "rev-parse", "main") == moved
    # The agent's resolution stays committed on the branch, for a follow-up of the caller's own.
    assert git(repo, "show", f"relay/{job}:app.txt") == "ours and theirs"
