"""Fixtures for the tracker: a task store in RELAY_HOME, projects that are real git repositories, two clones."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay.tracker import Project, TaskStore, TaskSync, resolve_project

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


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


class Machine:
    """One clone of the shared repository with its own relay store, as on another computer."""

    def __init__(self, root: Path, origin: Path) -> None:
        root.mkdir()
        git(root, "clone", "-q", str(origin), "repo")
        self.repo = root / "repo"
        git(self.repo, "config", "pull.rebase", "false")
        self.store = TaskStore(root / "relay-home" / "relay.db")
        self.sync = TaskSync(self.store)
        self.project = resolve_project(self.repo)

    def commit_and_merge(self, message: str) -> None:
        """Sync, commit and pull: the JSONL is then git's union merge of both sides, not yet imported."""
        self.sync.sync(self.project)
        git(self.repo, "add", ".gobby")
        if git(self.repo, "status", "--porcelain", ".gobby"):
            git(self.repo, "commit", "-q", "-m", message)
        git(self.repo, "pull", "-q", "--no-edit", "origin", "main")  # union merge of tasks.jsonl, no markers

    def sync_and_push(self, message: str) -> None:
        self.sync.sync(self.project)
        git(self.repo, "add", ".gobby")
        if git(self.repo, "status", "--porcelain", ".gobby"):
            git(self.repo, "commit", "-q", "-m", f"{message}: merged tasks")
        git(self.repo, "push", "-q", "origin", "HEAD:main")

    def publish(self, message: str) -> None:
        self.commit_and_merge(message)
        self.sync_and_push(message)

    def pull(self) -> None:
        git(self.repo, "pull", "-q", "--no-edit", "origin", "main")
        self.sync.sync(self.project)

    def state(self) -> dict[str, tuple[object, ...]]:
        """Each task as (title, status, priority, labels, updated_at, its dependencies, parent)."""
        tasks = self.store.all_tasks(self.project)
        deps = {(d.task_id, d.depends_on, d.dep_type) for d in self.store.all_dependencies(self.project)}
        return {
            t.id: (
                t.title,
                t.status,
                t.priority,
                t.labels,
                t.updated_at,
                sorted(x for x in deps if x[0] == t.id),
                t.parent_task_id,
            )
            for t in tasks
        }

    def file(self) -> Path:
        return self.repo / ".gobby" / "tasks.jsonl"


@pytest.fixture
def machines(tmp_path: Path) -> Iterator[tuple[Machine, Machine]]:
    """Two clones of one bare origin, each with its own relay store (a SQLite file of its own)."""
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    seed = init_repo(tmp_path / "seed")
    (seed / "README").write_text("shared\n")
    git(seed, "add", "README")
    git(seed, "commit", "-q", "-m", "start")
    git(seed, "push", "-q", str(origin), "main")
    a, b = Machine(tmp_path / "machine-a", origin), Machine(tmp_path / "machine-b", origin)
    yield a, b
    a.store.close()
    b.store.close()
