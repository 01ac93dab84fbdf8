"""Two real agent CLIs, each in its own git worktree, editing the same file of one repository at once.

The real claude and the real codex run side by side (`delegate` async, `workspace="worktree"`,
`permission="edit"`) against one mock model server, which holds both first turns until the test
has seen both CLIs running (their argv and cwd read from /proc), then scripts each to rewrite the
same file through its own tool: claude reads it and writes it with its Read and Write tools, codex
runs a shell command in its sandbox. Then the branches, the caller's checkout and both lands are
checked with plain git.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from relay.runtime import procinfo
from tests.e2e.conftest import Relay, World
from tests.e2e.mocks import Api, Reply, WriteFile
from tests.workspaces.conftest import git, snapshot

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

SHARED = "shared.txt"
BASE_TEXT = "alpha\nbeta\ngamma\n"
EDITS = {
    "claude": "alpha\nbeta, as claude rewrote it\ngamma\n",
    "codex": "alpha\nbeta, as codex rewrote it\ngamma\n",
}
APIS: dict[str, Api] = {"claude": "anthropic", "codex": "responses"}
# Seconds for both CLIs to reach the mock, and for each job to end once released.
START_TIMEOUT_S = 60.0
JOB_TIMEOUT_S = 90.0


def _blob(repo: Path, rev: str, path: str) -> bytes:
    """A file's exact bytes at a revision."""
    return subprocess.run(
        ["git", "show", f"{rev}:{path}"], cwd=repo, capture_output=True, check=True, stdin=subprocess.DEVNULL
    ).stdout


def _launches(relay: Relay, job_id: str) -> list[tuple[list[str], str]]:
    """(argv, cwd) of every process in the job's process group."""
    found: list[tuple[list[str], str]] = []
    for pid in procinfo.group_members(relay.job_pid(job_id)):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        found.append((argv, cwd))
    return found


def _after(argv: list[str], flag: str, long: str | None = None) -> str | None:
    """The value of `flag` (`-C DIR`), or of its long form written as one argument (`--cd=DIR`)."""
    if long is not None:
        joined = [a.removeprefix(f"{long}=") for a in argv if a.startswith(f"{long}=")]
        if joined:
            return joined[0]
    return argv[argv.index(flag) + 1] if flag in argv[:-1] else None


async def _land(relay: Relay, job_id: str) -> dict[str, Any]:
    """job_land through call_tool, as a client that has only the default tools calls it."""
    args = {"server_name": "workspaces", "tool_name": "job_land", "arguments": {"job_id": job_id}}
    return await relay.call("call_tool", args)


def _make_repo(repo: Path) -> str:
    """The caller's checkout: branch main, one commit with the shared file; returns the commit."""
    git(repo, "symbolic-ref", "HEAD", "refs/heads/main")
    (repo / SHARED).write_text(BASE_TEXT, encoding="utf-8")
    (repo / "README.md").write_text("a repository two agents edit at once\n", encoding="utf-8")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "base")
    return git(repo, "rev-parse", "HEAD")


async def test_codex_and_claude_edit_one_file_at_once_in_their_own_worktrees_and_only_the_first_lands(
    world: World, codex_sandbox: tuple[bool, str]
) -> None:
    if not codex_sandbox[0]:
        # Codex runs its shell tool inside bubblewrap even in workspace-write.
        pytest.skip(f"codex's sandbox cannot run here, so its shell tool cannot write: {codex_sandbox[1]}")
    repo = world.workdir
    base = _make_repo(repo)
    before = snapshot(repo)
    world.mock.hold()
    async with world.relay() as relay:
        jobs: dict[str, str] = {}
        for agent in APIS:
            handle = await relay.delegate(
                agent, f"Rewrite the second line of {SHARED}", mode="async", workspace="worktree", permission="edit"
            )
            jobs[agent] = handle["job_id"]
        for agent, api in APIS.items():
            arrived = await anyio.to_thread.run_sync(world.mock.wait_turns, api, 1, START_TIMEOUT_S)
            assert arrived, f"{agent} never reached the mock"

        # Both CLIs are running now, each started in its own worktree with its sandbox on it.
        trees: dict[str, Path] = {}
        for agent, job_id in jobs.items():
            status = await relay.call("job_status", {"job_id": job_id})
            assert status["status"] == "running", status
            trees[agent] = Path(status["workspace"]["path"])
            assert trees[agent] == relay.settings.worktrees_dir / job_id
            assert status["workspace"]["branch"] == f"relay/{job_id}"
        assert trees["claude"] != trees["codex"]
        codex = [(argv, cwd) for argv, cwd in _launches(relay, jobs["codex"]) if "exec" in argv and "--json" in argv]
        assert codex, _launches(relay, jobs["codex"])
        for argv, cwd in codex:
            assert (_after(argv, "-C", "--cd"), _after(argv, "-s", "--sandbox"), cwd) == (
                str(trees["codex"]),
                "workspace-write",
                str(trees["codex"]),
            ), argv
        claude = [(argv, cwd) for argv, cwd in _launches(relay, jobs["claude"]) if "--permission-mode" in argv]
        assert claude, _launches(relay, jobs["claude"])
        for argv, cwd in claude:
            assert (_after(argv, "--permission-mode"), cwd) == ("acceptEdits", str(trees["claude"])), argv

        # Each rewrites the same file of its own worktree through its own tool.
        claude_file, codex_file = str(trees["claude"] / SHARED), str(trees["codex"] / SHARED)
        world.mock.script_for(
            "anthropic",
            Reply(read=claude_file),
            Reply(write=WriteFile(claude_file, EDITS["claude"])),
            Reply(text="claude rewrote it DONE-c7", echo_tool_result=True),
        )
        world.mock.script_for(
            "responses",
            Reply(write=WriteFile(codex_file, EDITS["codex"])),
            Reply(text="codex rewrote it DONE-x7", echo_tool_result=True),
        )
        world.mock.release()
        finals = {agent: await relay.wait_final(job_id, JOB_TIMEOUT_S) for agent, job_id in jobs.items()}
        diffs = {
            agent: await relay.call("job_result", {"job_id": job_id, "view": "diff"}) for agent, job_id in jobs.items()
        }

        for agent, job_id in jobs.items():
            env = finals[agent]
            assert env["status"] == "completed", env["error"]
            assert env["tool_uses"] >= 1 and env["permission_denials"] == [], env
            ws = env["workspace"]
            assert (ws["branch"], ws["base"], ws["base_sha"], ws["commits"]) == (f"relay/{job_id}", "main", base, 1)
            assert ws["files_changed"] == [SHARED] == env["files_changed"]
            assert (ws["insertions"], ws["deletions"]) == (1, 1)
            assert _blob(repo, f"relay/{job_id}", SHARED) == EDITS[agent].encode()
            assert git(repo, "rev-parse", f"relay/{job_id}") == ws["head"]
            assert f"-beta\n+{EDITS[agent].splitlines()[1]}\n" in diffs[agent]["text"], diffs[agent]
        assert len(world.mock.turns("anthropic")) == 3 and len(world.mock.turns("responses")) == 2
        # The caller's checkout, index, HEAD and main are exactly as they were.
        assert snapshot(repo) == before
        assert (repo / SHARED).read_bytes() == BASE_TEXT.encode()
        assert git(repo, "rev-parse", "main") == base and git(repo, "status", "--porcelain") == ""

        # The first land fast-forwards main, and the checkout (main, clean) follows it.
        first = await _land(relay, jobs["claude"])
        assert first["success"] is True, first
        landed = first["result"]
        claude_head = finals["claude"]["workspace"]["head"]
        assert (landed["landed"], landed["into"], landed["old"], landed["new"], landed["commits"]) == (
            True,
            "main",
            base,
            claude_head,
            1,
        )
        assert git(repo, "rev-parse", "main") == claude_head
        assert git(repo, "symbolic-ref", "HEAD") == "refs/heads/main"
        assert (repo / SHARED).read_bytes() == EDITS["claude"].encode()
        assert git(repo, "status", "--porcelain") == ""
        after_first = snapshot(repo)

        # The second conflicts on the shared file: refused, naming it, and nothing changes.
        codex_head = finals["codex"]["workspace"]["head"]
        second = await _land(relay, jobs["codex"])
        assert second["success"] is False and second["error_type"] == "LAND_CONFLICT", second
        assert SHARED in second["error"]
        assert second["result"]["landed"] is False and second["result"]["conflicts"] == [SHARED], second
        status = await relay.call("job_status", {"job_id": jobs["codex"]})
    assert git(repo, "rev-parse", "main") == claude_head
    assert snapshot(repo) == after_first
    assert git(repo, "rev-parse", f"relay/{jobs['codex']}") == codex_head
    assert git(trees["codex"], "symbolic-ref", "HEAD") == f"refs/heads/relay/{jobs['codex']}"
    assert git(trees["codex"], "status", "--porcelain") == ""
    assert (trees["codex"] / SHARED).read_bytes() == EDITS["codex"].encode()
    assert status["workspace"]["state"] == "active"
