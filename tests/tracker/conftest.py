"""Fixtures for the tracker: a task store in RELAY_HOME and projects that are real git repositories."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.tracker import Project, TaskStore, resolve_project

GIT_ENV = {
    "GIT_AUTHOR_NAME": "relay tests",
    "GIT_AUTHOR_EMAIL": "tests@relay.invalid",
    "GIT_COMMITTER_NAME": "relay tests",
    "GIT_COMMITTER_EMAIL": "tests@relay.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(cwd: Path, *args: str) -> str:
    """Run real git in `cwd` with a fixed identity and no user or system configuration."""
    env = {"PATH": "/usr/bin:/bin:/usr/local/bin", "HOME": str(cwd), **GIT_ENV}
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, encoding="utf-8", timeout=60, check=False
    )
    if done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {done.stderr}")
    return done.stdout


def init_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    return path


@pytest.fixture
def store(relay_home: Path) -> Iterator[TaskStore]:
    s = TaskStore(relay_home / "relay.db")
    yield s
    s.close()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return init_repo(tmp_path / "repo")


@pytest.fixture
def project(repo: Path) -> Project:
    return resolve_project(repo)
