"""A repository whose checkout takes as long as a test wants (a smudge filter that sleeps, as git-lfs's downloads do),
and what a crashed relay may have left in one (worktrees, relay/* branches, locks) as git itself reports it."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from tests.workspaces.conftest import git


def slow_checkout_repo(folder: Path, seconds: float) -> Path:
    """A checkout on branch main whose `slow.txt` passes a smudge filter that sleeps `seconds` on every checkout."""
    git(folder, "init", "-q", "-b", "main")
    (folder / "app.txt").write_text("one\n")
    (folder / "slow.txt").write_text("slow\n")
    (folder / ".gitattributes").write_text("slow.txt filter=slow\n")
    git(folder, "add", ".")
    git(folder, "commit", "-q", "-m", "first")
    git(folder, "config", "filter.slow.smudge", f"sleep {seconds}; cat")
    git(folder, "config", "filter.slow.clean", "cat")
    return folder


def worktrees_of(repo: Path) -> list[str]:
    """The worktrees git lists for `repo` (its main checkout first), each with its `locked` line if any."""
    listing = git(repo, "worktree", "list", "--porcelain")
    found: list[str] = []
    for block in listing.split("\n\n"):
        lines = block.strip().splitlines()
        if lines:
            found.append(" ".join(line for line in lines if line.startswith(("worktree ", "locked"))))
    return found


def relay_branches(repo: Path) -> list[str]:
    return git(repo, "branch", "--list", "--format=%(refname:short)", "relay/*").split()


def git_locks(repo: Path) -> list[str]:
    """Every `*.lock` and `locked` file in the repository's git folder (its worktrees' admin folders among them)."""
    gd = repo / ".git"
    return sorted(
        str(p.relative_to(gd))
        for p in gd.rglob("*")
        if (p.name.endswith(".lock") and p.name != "relay-land.lock") or p.name == "locked"
    )


def descendants(pid: int) -> list[int]:
    """`pid`'s children, their children, ... as /proc says now (whatever session or group they are in)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            parents.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_tree(pid: int) -> list[int]:
    """SIGKILL `pid` and every process under it at once (a crash that takes the whole tree: OOM, a power cut)."""
    tree = [pid, *descendants(pid)]
    for member in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signal.SIGKILL)
    return tree


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")
