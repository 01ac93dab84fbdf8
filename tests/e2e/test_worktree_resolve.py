"""A land's conflict resolved by the real claude in its own worktree (job_land on_conflict="agent").

The real claude rewrites a line of a file in its worktree; meanwhile main rewrites the same line.
`job_land(on_conflict="agent")` keeps the conflict in the worktree and starts a follow-up on claude
there; the mock model, seeing the prompt, has claude read the file (git's markers in it) and write
the resolution with its own Write tool. relay commits it, checks no marker is left, and lands it
through the gate. Checked with plain git.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from relay.config import load_settings
from relay.server.app import build_server
from relay.store import Store
from tests.e2e.conftest import Relay, World
from tests.e2e.mocks import Reply, WriteFile
from tests.workspaces.conftest import git

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

SHARED = "shared.txt"
BASE_TEXT = "alpha\nbeta\ngamma\n"
OURS = "alpha\nbeta, as claude rewrote it\ngamma\n"
THEIRS = "alpha\nbeta, as main rewrote it\ngamma\n"
RESOLVED = "alpha\nbeta, as claude and main rewrote it\ngamma\n"
GATE = "grep -q 'claude and main' shared.txt && echo the-gate-saw-it"
# Seconds for each job (and the land with its follow-up) to end.
JOB_TIMEOUT_S = 120.0


async def test_claude_resolves_a_land_conflict_in_its_worktree_and_the_resolution_lands_through_the_gate(
    world: World,
) -> None:
    repo = world.workdir
    git(repo, "symbolic-ref", "HEAD", "refs/heads/main")
    (repo / SHARED).write_text(BASE_TEXT, encoding="utf-8")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "base")
    world.settings()  # the CLIs on the mock, and the gate as the person's own command (config.toml)
    with (world.relay_home / "config.toml").open("a", encoding="utf-8") as config:
        config.write(f'\n[workspaces]\ntest_command = "{GATE}"\n')
    settings = load_settings(world.relay_environ(), cwd=world.workdir)
    async with Client(build_server(settings)) as client:
        relay = Relay(client, settings, world)
        tree = relay.settings.worktrees_dir
        world.mock.hold()  # claude's first turn waits until its script (which names its worktree) is queued
        handle = await relay.delegate(
            "claude", f"Rewrite the second line of {SHARED}", mode="async", workspace="worktree", permission="edit"
        )
        job = handle["job_id"]
        mine = str(tree / job / SHARED)
        world.mock.script_for(
            "anthropic",
            Reply(read=mine),
            Reply(write=WriteFile(mine, OURS)),
            Reply(text="rewrote it", echo_tool_result=True),
        )
        world.mock.release()
        first = await relay.wait_final(job, JOB_TIMEOUT_S)
        assert first["status"] == "completed" and first["workspace"]["files_changed"] == [SHARED], first
        ours = git(repo, "rev-parse", f"relay/{job}")

        (repo / SHARED).write_text(THEIRS, encoding="utf-8")
        git(repo, "commit", "-q", "-am", "main rewrites the second line too")
        theirs = git(repo, "rev-parse", "main")

        # The follow-up: claude reads the file (git's markers in it) and writes the resolution.
        turns_before = len(world.mock.turns("anthropic"))
        world.mock.script_for(
            "anthropic",
            Reply(read=mine),
            Reply(write=WriteFile(mine, RESOLVED)),
            Reply(text="resolved it", echo_tool_result=True),
        )
        args = {"job_id": job, "on_conflict": "agent", "test_command": GATE}
        landed = await relay.call(
            "call_tool",
            {"server_name": "workspaces", "tool_name": "job_land", "arguments": args},
            JOB_TIMEOUT_S,
        )
    assert landed["success"] is True, landed
    result = landed["result"]
    store = Store(relay.settings.db_path)
    try:
        follow = next(r for r in store.list_jobs(limit=10) if r.id != job)
    finally:
        store.close()
    assert result["resolved_by"] == follow.id and result["landed"] is True and result["into"] == "main"
    assert result["test"]["passed"] is True and "the-gate-saw-it" in result["test"]["output_tail"]
    assert (follow.agent, follow.status, follow.request["permission"]) == ("claude", "completed", "edit")
    # The follow-up's first model turn carried the prompt naming the file and both sides.
    asked = world.mock.turns("anthropic")[turns_before].text
    for named in (f"- {SHARED}", f"relay/{job}", ours[:12], theirs[:12], "main rewrites the second line too"):
        assert named in asked, named
    # The marked file was what claude read.
    assert "<<<<<<< HEAD" in world.mock.turns("anthropic")[turns_before + 1].text
    # main holds the resolution on top of both sides, and the checkout followed it.
    assert git(repo, "rev-parse", "main") == result["new"]
    assert git(repo, "show", f"main:{SHARED}") + "\n" == RESOLVED == (repo / SHARED).read_text()
    for side in (ours, theirs):
        assert git(repo, "merge-base", "--is-ancestor", side, "main") == ""
    assert git(repo, "status", "--porcelain") == ""
    assert not Path(mine).exists()  # a landed worktree is removed
