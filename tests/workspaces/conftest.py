"""A git repository to run worktree jobs in, and a way to see that the caller's checkout was never touched."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from tests.conftest import SettingsFactory


def git(cwd: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    import os

    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True, env={**os.environ, **env})
    return out.stdout.strip()


def one_commit_repo(folder: Path) -> Path:
    """`folder` made a checkout on branch main with one commit: app.txt saying "one"."""
    git(folder, "init", "-q", "-b", "main")
    (folder / "app.txt").write_text("one\n")
    git(folder, "add", ".")
    git(folder, "commit", "-q", "-m", "first")
    return folder


@pytest.fixture
def repo(workdir: Path) -> Path:
    """A checkout on branch main with two commits: app.txt, and src/lib.txt in a sub-folder."""
    git(workdir, "init", "-q", "-b", "main")
    (workdir / "app.txt").write_text("one\ntwo\nthree\n")
    git(workdir, "add", ".")
    git(workdir, "commit", "-q", "-m", "first")
    (workdir / "src").mkdir()
    (workdir / "src" / "lib.txt").write_text("lib\n")
    git(workdir, "add", ".")
    git(workdir, "commit", "-q", "-m", "second")
    return workdir


def snapshot(checkout: Path) -> dict[str, str]:
    """Every file of a checkout (its .git's HEAD, index and refs among them) by content hash."""
    found: dict[str, str] = {}
    for path in sorted(checkout.rglob("*")):
        rel = path.relative_to(checkout).as_posix()
        if path.is_file() and not rel.startswith((".git/objects/", ".git/worktrees/", ".git/logs/")):
            # relay's own refs (relay/<job-id>; git rewrites packed-refs when one is deleted) and its land lock
            if rel in (".git/relay-land.lock", ".git/packed-refs") or rel.startswith(".git/refs/heads/relay/"):
                continue
            found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@pytest.fixture
def settings_in(make_settings: SettingsFactory) -> SettingsFactory:
    return make_settings
