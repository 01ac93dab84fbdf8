"""relay's git in a job's worktree uses the git folder relay recorded, not the one the worktree's `.git` file names.

An agent at grant `edit` in a relay-made worktree can rewrite that worktree's `.git` file to name a git folder
of its own, whose config names programs git runs: core.fsmonitor, core.hooksPath (a pre-commit, a
post-checkout), a clean filter that the tree's .gitattributes applies. relay seals and lands the worktree
outside the agent's sandbox, as relay's user: obeying that folder would turn `edit` into running anything.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from relay.errors import ErrorCode, RelayError
from relay.jobs.gitprobe import changed_files, git_status
from relay.workspaces import land, make, seal
from relay.workspaces.records import WorkspaceRecord, WorkspaceStore
from tests.workspaces.conftest import git, one_commit_repo

HOOKS = ("pre-commit", "commit-msg", "post-commit", "post-checkout", "post-merge", "pre-rebase", "post-rewrite")


def marks(folder: Path) -> list[str]:
    """The names of the trap's markers written so far (each vector writes its own)."""
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def trap(rec: WorkspaceRecord, marks_dir: Path) -> None:
    """What the agent does: a change, a .gitattributes naming a filter, and `.git` pointed at its own git folder."""
    wt = Path(rec.path)
    (wt / "app.txt").write_text("agent\n")
    (wt / ".gitattributes").write_text("* filter=evil\n")
    evil = wt / ".evil"
    common = evil / "common"
    shutil.copytree(rec.common_dir, common, ignore=shutil.ignore_patterns("worktrees"))
    Path(common, "objects", "info", "alternates").write_text(f"{Path(rec.common_dir, 'objects')}\n")  # relay's commits
    hooks = evil / "hooks"
    hooks.mkdir()
    for hook in HOOKS:
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {marks_dir / hook}\n")
        (hooks / hook).chmod(0o755)
    with open(common / "config", "a") as config:
        config.write(
            f'[core]\n\tfsmonitor = "touch {marks_dir / "fsmonitor"}; false #"\n\thooksPath = {hooks}\n'
            f'[filter "evil"]\n\tclean = "touch {marks_dir / "filter"}; cat"\n\trequired = true\n'
        )
    admin = evil / "admin"
    shutil.copytree(Path(rec.common_dir, "worktrees", rec.job_id), admin)
    (admin / "commondir").write_text(f"{common}\n")
    (wt / ".git").write_text("gitdir: ./.evil/admin\n")


def armed(rec: WorkspaceRecord, marks_dir: Path) -> list[str]:
    """The trap works on a git that trusts the `.git` file: what plain `git add` and `git commit` there run."""
    git(Path(rec.path), "add", "--all")
    git(Path(rec.path), "commit", "-q", "--allow-empty", "-m", "armed")
    return marks(marks_dir)


def land_or_refusal(
    rec: WorkspaceRecord, into: str | None, strategy: str, tmp_path: Path
) -> dict[str, Any] | RelayError:
    """The land's answer, or the RelayError it refused with (the markers are looked at first either way)."""
    try:
        return land.land(
            rec,
            into=into,
            strategy=strategy,
            test_command=None,
            test_timeout_s=10,
            test_log=tmp_path / "test.log",
            message=f"land {rec.job_id}\n",
        )
    except RelayError as err:
        return err


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The caller's checkout: branch main, app.txt and src/lib.txt."""
    folder = tmp_path / "repo"
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "lib.txt").write_text("lib\n")
    return one_commit_repo(folder)


@pytest.fixture
def made(repo: Path, tmp_path: Path) -> tuple[WorkspaceStore, WorkspaceRecord, Path]:
    store = WorkspaceStore(tmp_path / "relay.db")
    rec = make.create(tmp_path / "worktrees", store, "job1", str(repo))
    marks_dir = tmp_path / "marks"
    marks_dir.mkdir()
    return store, rec, marks_dir


def test_sealing_a_worktree_whose_git_file_was_redirected_runs_nothing_it_names_and_commits_on_the_job_branch(
    made: tuple[WorkspaceStore, WorkspaceRecord, Path], repo: Path
) -> None:
    store, rec, marks_dir = made
    trap(rec, marks_dir)
    found = seal.seal(store, rec, "the agent's work\n")
    assert marks(marks_dir) == []
    assert git(repo, "show", f"{rec.branch}:app.txt") == "agent"  # committed through the real git folder
    assert "app.txt" in found["files_changed"]
    assert {"fsmonitor", "filter", "pre-commit"} <= set(armed(rec, marks_dir))  # the trap was real


@pytest.mark.parametrize("strategy", ["rebase", "merge", "squash"])
def test_landing_a_worktree_whose_git_file_was_redirected_runs_nothing_it_names_and_lands_through_the_real_one(
    made: tuple[WorkspaceStore, WorkspaceRecord, Path], repo: Path, tmp_path: Path, strategy: str
) -> None:
    _store, rec, marks_dir = made
    (repo / "src" / "lib.txt").write_text("moved\n")  # main moves on: the land rebases, merges or checks out
    git(repo, "commit", "-qam", "main moved")
    trap(rec, marks_dir)
    landed = land_or_refusal(rec, None, strategy, tmp_path)
    assert marks(marks_dir) == []
    assert not isinstance(landed, RelayError) and landed["landed"] and git(repo, "rev-parse", "main") == landed["new"]
    assert (repo / "app.txt").read_text() == "agent\n" and (repo / "src" / "lib.txt").read_text() == "moved\n"


def test_a_land_into_a_branch_checked_out_in_another_redirected_worktree_runs_nothing_that_worktree_names(
    made: tuple[WorkspaceStore, WorkspaceRecord, Path], repo: Path, tmp_path: Path
) -> None:
    store, other, marks_dir = made
    trap(other, marks_dir)
    git(Path(other.path), "--git-dir", str(Path(other.common_dir, "worktrees", other.job_id)), "reset", "-q", "--hard")
    rec = make.create(tmp_path / "worktrees", store, "job2", str(repo))
    Path(rec.path, "new.txt").write_text("two\n")
    landed = land_or_refusal(rec, other.branch, "rebase", tmp_path)
    assert marks(marks_dir) == []
    assert not isinstance(landed, RelayError)
    assert git(repo, "rev-parse", other.branch) == landed["new"]
    assert Path(other.path, "new.txt").read_text() == "two\n"  # the other worktree moved with its branch


def test_a_worktree_whose_recorded_git_folder_is_gone_is_refused_not_run_through_its_git_file(
    made: tuple[WorkspaceStore, WorkspaceRecord, Path],
) -> None:
    store, rec, marks_dir = made
    trap(rec, marks_dir)
    shutil.rmtree(Path(rec.common_dir, "worktrees", rec.job_id))
    with pytest.raises(RelayError) as caught:
        seal.seal(store, rec, "the agent's work\n")
    assert caught.value.code is ErrorCode.GIT_FAILED and caught.value.hint
    assert marks(marks_dir) == []


def test_the_repositorys_own_hooks_do_not_run_with_relays_seal_and_land(
    made: tuple[WorkspaceStore, WorkspaceRecord, Path], repo: Path, tmp_path: Path
) -> None:
    store, rec, marks_dir = made
    for hook in HOOKS:
        Path(repo, ".git", "hooks", hook).write_text(f"#!/bin/sh\ntouch {marks_dir / hook}\n")
        Path(repo, ".git", "hooks", hook).chmod(0o755)
    (repo / "src" / "lib.txt").write_text("moved\n")
    git(repo, "-c", "core.hooksPath=/dev/null", "commit", "-qam", "main moved")
    Path(rec.path, "app.txt").write_text("agent\n")
    seal.seal(store, rec, "the agent's work\n")
    landed = land_or_refusal(rec, None, "merge", tmp_path)
    assert marks(marks_dir) == []
    assert not isinstance(landed, RelayError) and git(repo, "rev-parse", "main") == landed["new"]


def test_the_probe_of_a_job_folder_runs_no_filter_its_git_config_names(tmp_path: Path) -> None:
    """files_changed's `git status` compares a file whose stat changed through the clean filter its config names."""
    (tmp_path / "repo").mkdir()
    repo, mark = one_commit_repo(tmp_path / "repo"), tmp_path / "filter-ran"
    git(repo, "config", "filter.a.b.clean", f"touch {mark}; cat")  # the agent's edit of .git/config
    (repo / ".gitattributes").write_text("* filter=a.b\n")
    before = git_status(str(repo))
    (repo / "app.txt").write_text("ONE\n")  # the same size: git reads it again to see whether it changed
    os.utime(repo / "app.txt", (1_000_000_000, 1_000_000_000))
    assert changed_files(before or {}, str(repo)) == {"app.txt"}
    assert not mark.exists()
