"""A relay killed inside `git rebase` during a land (relay and its git at once): the next land clears git's half-done
rebase (its folder, index.lock) and lands the first time."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from relay.jobs.engine import Engine, JobRequest
from tests.conftest import SettingsFactory
from tests.workspaces.conftest import git
from tests.workspaces.slow import alive, kill_tree, slow_checkout_repo, worktrees_of

pytestmark = pytest.mark.anyio

CHECKOUT_S = 2
WAIT_S = 30

LANDING_RELAY = """
import sys
import anyio
from relay.config import load_settings
from relay.jobs.engine import Engine

async def main():
    async with Engine(load_settings()).running() as engine:
        await engine.land(sys.argv[1])

anyio.run(main)
"""


async def test_a_land_killed_inside_git_rebase_lands_the_first_time_it_is_tried_again(
    make_settings: SettingsFactory, relay_home: Path, workdir: Path
) -> None:
    repo = slow_checkout_repo(workdir, CHECKOUT_S)
    settings = make_settings()
    async with Engine(settings).running() as engine:
        prompt = "add a file [[fake:write=new.txt~fresh]]"
        job_id = engine.submit(JobRequest(agent="claude", prompt=prompt, cwd=str(repo), workspace="worktree"))
        with anyio.fail_after(WAIT_S):
            assert (await engine.wait_one(job_id, WAIT_S)).status == "completed"
    (repo / "slow.txt").write_text("main moved\n")  # the rebase checks it out again: through the slow filter
    git(repo, "commit", "-q", "-am", "main moves")
    tip = git(repo, "rev-parse", "main")
    admin = repo / ".git" / "worktrees" / job_id

    env = {"RELAY_HOME": str(relay_home), "HOME": str(relay_home), "PATH": os.environ.get("PATH", "")}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    relay = subprocess.Popen([sys.executable, "-c", LANDING_RELAY, job_id], env=env, cwd=repo)
    try:
        deadline = time.monotonic() + WAIT_S
        while not ((admin / "rebase-merge").is_dir() or (admin / "rebase-apply").is_dir()):
            assert relay.poll() is None and time.monotonic() < deadline, "the land never got inside git rebase"
            time.sleep(0.01)
        tree = kill_tree(relay.pid)  # relay, and git's rebase under it
        relay.wait(WAIT_S)
    finally:
        if relay.poll() is None:
            relay.kill()
            relay.wait()
    assert git(repo, "rev-parse", "main") == tip  # the crash landed nothing

    async with Engine(settings).running() as engine:  # the next relay lands again
        with anyio.fail_after(WAIT_S * 2):
            landed = await engine.land(job_id)
    assert landed["landed"] is True and landed["commits"] == 1
    assert git(repo, "show", "main:new.txt") == "fresh"
    assert git(repo, "rev-parse", "main~1") == tip
    assert worktrees_of(repo) == [f"worktree {repo}"]
    assert not [pid for pid in tree if alive(pid)]
