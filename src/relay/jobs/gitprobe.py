"""`files_changed` from git: the porcelain status of a job's cwd before and after it ran."""

from __future__ import annotations

import os
import shutil
import subprocess

from relay.workspaces import GIT_SAFE_CONFIG

# `git status` of a job's cwd, before and after, must not hold a job up for long.
GIT_TIMEOUT_S = 5.0
# The folder's own git config is not relay's to obey: an agent allowed to edit it could name a program that
# `git status` runs (core.fsmonitor), outside that agent's sandbox and above its permission. Nor does a hook of
# the folder's run (git status runs none today): relay's git is run as the worktrees' is (GIT_SAFE_CONFIG).
# Nor a submodule's: `git status` would run itself in each, under the submodule's own config.
UNTRUSTED_STATUS = ("--ignore-submodules=all",)


def git_status(cwd: str) -> dict[str, str] | None:
    """Path -> porcelain status (with size and mtime) of a git work tree (None when cwd is not in one, or git is missing)."""
    # Most job folders are not repositories: look for .git before paying for a git process.
    if not in_work_tree(cwd) or not shutil.which("git"):
        return None
    try:
        filters = _no_filters(cwd)
        if filters is None:
            return None
        out = subprocess.run(
            ["git", *GIT_SAFE_CONFIG, "status", "--porcelain", "--untracked-files=all", "-z", *UNTRUSTED_STATUS],
            cwd=cwd,
            env={**os.environ, **filters},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    entries: dict[str, str] = {}
    for item in out.stdout.decode("utf-8", "replace").split("\0"):
        if len(item) > 3:
            path = item[3:]
            try:
                st = os.stat(os.path.join(cwd, path))
                stamp = f"{st.st_size}:{st.st_mtime_ns}"
            except OSError:
                stamp = "gone"
            # Status plus size and mtime: an already-dirty file edited again still counts as changed.
            entries[path] = f"{item[:2]} {stamp}"
    return entries


def _no_filters(cwd: str) -> dict[str, str] | None:
    """Environment that empties every filter driver the folder's git config names (None: its config is unreadable).

    A clean filter (or a long-running `process` one) that the tree's .gitattributes applies runs when
    `git status` compares a file whose stat changed; its command is the folder's config, the agent's to write.
    Given as GIT_CONFIG_COUNT/KEY/VALUE: a driver's name is matched exactly, whatever characters it holds.
    """
    listed = subprocess.run(
        ["git", *GIT_SAFE_CONFIG, "config", "--null", "--get-regexp", r"^filter\."],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=GIT_TIMEOUT_S,
        check=False,
    )
    if listed.returncode not in (0, 1):  # 1: no filter configured
        return None
    names = {
        key.removeprefix("filter.").rpartition(".")[0]
        for key in (item.split("\n", 1)[0] for item in listed.stdout.decode("utf-8", "surrogateescape").split("\0"))
        if key.startswith("filter.")
    }
    keys = [f"filter.{name}.{var}" for name in sorted(names) for var in ("clean", "smudge", "process")]
    if not keys:
        return {}
    env = {"GIT_CONFIG_COUNT": str(len(keys))}
    for i, key in enumerate(keys):
        env |= {f"GIT_CONFIG_KEY_{i}": key, f"GIT_CONFIG_VALUE_{i}": ""}
    return env


def in_work_tree(cwd: str) -> bool:
    """Whether `cwd` or a folder above it holds `.git` (os.path: this runs before every job's spawn)."""
    folder = os.path.abspath(cwd)
    while True:
        if os.path.exists(os.path.join(folder, ".git")):
            return True
        parent = os.path.dirname(folder)
        if parent == folder:
            return False
        folder = parent


def changed_files(before: dict[str, str], cwd: str) -> set[str]:
    """Paths whose status (or size, or mtime) differs from `before`."""
    after = git_status(cwd) or {}
    return {path for path, state in after.items() if before.get(path) != state}
