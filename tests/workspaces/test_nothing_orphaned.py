"""A relay killed while git makes a worktree leaves nothing the next relay does not know: its start-up sweep takes
back the worktree, its relay/<id> branch and git's locks (and kills a git the dead relay left running)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from relay.doctor import worktree_report
from relay.jobs.engine import Engine
from relay.workspaces import Workspaces
from tests.conftest import SettingsFactory
from tests.workspaces.slow import (
    alive,
    descendants,
    git_locks,
    kill_tree,
    relay_branches,
    slow_checkout_repo,
    worktrees_of,
)

pytestmark = pytest.mark.anyio

CHECKOUT_S = 5
WAIT_S = 30

RELAY = """
import sys
import anyio
from relay.config import load_settings
from relay.jobs.engine import Engine, JobRequest

async def main():
    async with Engine(load_settings()).running() as engine:
        await engine.submit_confirmed(JobRequest(agent="claude", prompt="look", cwd=sys.argv[1], workspace="worktree"))
        await anyio.sleep(60)

anyio.run(main)
"""


def start_relay(relay_home: Path, repo: Path) -> subprocess.Popen[bytes]:
    env = {"RELAY_HOME": str(relay_home), "HOME": str(relay_home), "PATH": os.environ.get("PATH", "")}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return subprocess.Popen([sys.executable, "-c", RELAY, str(repo)], env=env, cwd=repo, stdin=subprocess.DEVNULL)


def wait_for_worktree_folder(worktrees: Path, relay: subprocess.Popen[bytes]) -> Path:
    """The worktree's folder, once git has made it and its `.git` (its checkout then takes CHECKOUT_S)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        assert relay.poll() is None, "relay ended before it made the worktree"
        found = [p for p in worktrees.glob("*/.git") if not p.parent.name.startswith(".")]
        if found:
            return found[0].parent
        time.sleep(0.01)
    raise AssertionError("git never started on the worktree")


@pytest.mark.parametrize("what", ["relay and every process under it", "relay alone (its git left running)"])
async def test_a_relay_killed_during_git_worktree_add_leaves_nothing_after_a_restart(
    make_settings: SettingsFactory, relay_home: Path, workdir: Path, what: str
) -> None:
    (workdir / "repo").mkdir()
    repo = slow_checkout_repo(workdir / "repo", CHECKOUT_S)
    settings = make_settings()
    relay = start_relay(relay_home, repo)
    try:
        folder = wait_for_worktree_folder(settings.worktrees_dir, relay)
        assert len(worktrees_of(repo)) == 2 and relay_branches(repo) == [f"relay/{folder.name}"]
        if what.startswith("relay and"):
            tree = kill_tree(relay.pid)
        else:
            tree = descendants(relay.pid)  # git, its checkout, the smudge filter: left running
            os.kill(relay.pid, 9)
        relay.wait(WAIT_S)
    finally:
        if relay.poll() is None:
            relay.kill()
            relay.wait()
    assert any(line.startswith(f"worktree {folder}") for line in worktrees_of(repo))  # what the crash left
    line, usage = worktree_report(settings)  # relay doctor sees it, and git's locks on it
    assert [w["job_id"] for w in usage["worktrees"]] == [folder.name] and f"relay/{folder.name}" in line
    if what.startswith("relay and"):
        assert usage["worktrees"][0]["locks"] and "locked by git" in line

    async with Engine(settings).running() as engine:  # the next relay, and its start-up sweep
        with anyio.fail_after(WAIT_S):
            await anyio.to_thread.run_sync(engine.prune_worktrees)

    assert worktrees_of(repo) == [f"worktree {repo}"]
    assert relay_branches(repo) == []
    assert git_locks(repo) == []
    assert [p.name for p in settings.worktrees_dir.iterdir() if not p.name.startswith(".")] == []
    spaces = Workspaces(settings)
    try:
        assert spaces.store.get(folder.name) is None
        assert spaces.usage()["count"] == 0
    finally:
        spaces.close()
    assert not [pid for pid in tree if alive(pid)]
    assert git(repo, "status", "--porcelain") == ""


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


async def test_a_worktree_folder_no_row_accounts_for_is_listed_by_doctor_and_removed_with_its_branch_and_locks(
    make_settings: SettingsFactory, repo: Path
) -> None:
    settings = make_settings()
    async with Engine(settings).running():  # a relay ran here before (relay.db is there)
        pass
    folder = settings.worktrees_dir / "0123456789abcdef"  # what a relay of before left: no row, no mark
    settings.worktrees_dir.mkdir(parents=True)
    git(repo, "worktree", "add", "-q", "-b", f"relay/{folder.name}", str(folder))
    admin = repo / ".git" / "worktrees" / folder.name
    (admin / "locked").write_text("initializing")
    (admin / "index.lock").write_text("")
    mine = settings.worktrees_dir / "notes"  # a folder that is no worktree at all
    mine.mkdir()

    _, usage = worktree_report(settings)
    listed = {w["job_id"]: (w["state"], w["locks"]) for w in usage["worktrees"]}
    assert listed == {
        folder.name: ("unrecorded", [f"{folder.name}/locked", f"{folder.name}/index.lock"]),
        "notes": ("unrecorded", []),
    }

    async with Engine(settings).running() as engine:
        with anyio.fail_after(WAIT_S):
            await anyio.to_thread.run_sync(engine.prune_worktrees)
    assert worktrees_of(repo) == [f"worktree {repo}"]
    assert relay_branches(repo) == []
    assert git_locks(repo) == []
    assert [p.name for p in settings.worktrees_dir.iterdir() if not p.name.startswith(".")] == []
