"""Making worktrees: a failure half-way (the disk filling) takes back everything it made."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from relay.errors import ErrorCode, RelayError
from relay.workspaces import _git, make
from relay.workspaces.records import WorkspaceStore
from tests.workspaces.conftest import git, snapshot


def test_a_disk_that_fills_while_the_worktree_is_made_leaves_no_worktree_branch_or_record(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = _git.run

    def filling(args: Any, cwd: Any, **kw: Any) -> subprocess.CompletedProcess[str]:
        done = real(args, cwd, **kw)
        if list(args[:2]) == ["worktree", "add"]:  # git wrote the worktree, then the disk filled
            raise _git.GitError(args, 128, "fatal: write error: No space left on device")
        return done

    monkeypatch.setattr(_git, "run", filling)
    before = snapshot(repo)
    store = WorkspaceStore(tmp_path / "relay.db")
    with pytest.raises(RelayError) as caught:
        make.create(tmp_path / "worktrees", store, "abc123", str(repo))
    assert caught.value.code is ErrorCode.DISK_FULL and "relay doctor" in caught.value.hint
    assert list((tmp_path / "worktrees").iterdir()) == []
    assert git(repo, "for-each-ref", "refs/heads/relay") == ""
    assert len(git(repo, "worktree", "list").splitlines()) == 1
    assert store.get("abc123") is None and snapshot(repo) == before


def test_a_branch_name_already_taken_is_refused_before_anything_is_made(repo: Path, tmp_path: Path) -> None:
    git(repo, "branch", "relay/abc123")
    store = WorkspaceStore(tmp_path / "relay.db")
    with pytest.raises(RelayError) as caught:
        make.create(tmp_path / "worktrees", store, "abc123", str(repo))
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT and "already exists" in caught.value.message
    assert not (tmp_path / "worktrees" / "abc123").exists() and store.get("abc123") is None
