"""A worktree is made only of a repository an agent could not have written: never of a git folder lying as plain
files in a work tree (a nested repository an agent at `edit` wrote, a `.git` file it pointed into its folder).

Such a git folder is text an agent can write (HEAD, refs, `objects/info/alternates` borrowing the real objects, a
`config` naming a smudge filter, `info/attributes` applying it); `git worktree add` in it would run the filter,
outside any sandbox, when a caller names that folder as cwd with workspace='worktree'."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from relay.errors import ErrorCode, RelayError
from relay.workspaces import Workspaces
from tests.conftest import SettingsFactory


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "checkout"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "p@example.com")
    _git(repo, "config", "user.name", "person")
    (repo / "f.txt").write_text("x\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    return repo


def _plain_text_git_folder(git_dir: Path, objects_of: Path, pwned: Path) -> None:
    """What an agent at `edit` can write with file edits alone: a git folder whose filter runs a command."""
    (git_dir / "objects" / "info").mkdir(parents=True)
    (git_dir / "refs" / "heads").mkdir(parents=True)
    (git_dir / "info").mkdir()
    (git_dir / "objects" / "info" / "alternates").write_text(f"{objects_of / '.git' / 'objects'}\n")
    (git_dir / "refs" / "heads" / "main").write_text(_git(objects_of, "rev-parse", "HEAD") + "\n")
    (git_dir / "HEAD").write_text("ref: refs/heads/main\n")
    (git_dir / "config").write_text(
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n"
        f'[filter "evil"]\n\tsmudge = "touch {pwned}; cat"\n\tclean = "touch {pwned}; cat"\n'
    )
    (git_dir / "info" / "attributes").write_text("* filter=evil\n")


def test_a_repository_an_agent_wrote_inside_a_checkout_gets_no_worktree_and_runs_nothing(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    repo, pwned = _checkout(tmp_path), tmp_path / "pwned"
    nested = repo / "vendor" / "tool"
    _plain_text_git_folder(nested / ".git", repo, pwned)
    spaces = Workspaces(make_settings())
    try:
        with pytest.raises(RelayError) as refused:
            spaces.create("n1", str(nested), base=None, carry_changes=False)
    finally:
        spaces.close()
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT and "inside the work tree" in refused.value.message
    assert not pwned.exists()


def test_a_worktree_whose_git_file_an_agent_pointed_into_it_gets_no_worktree_of_its_own(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    repo, pwned = _checkout(tmp_path), tmp_path / "pwned"
    settings = make_settings()
    spaces = Workspaces(settings)
    try:
        agent = spaces.create("a1", str(repo), base=None, carry_changes=False)
        _plain_text_git_folder(Path(agent.path, "evil"), repo, pwned)
        Path(agent.path, ".git").write_text("gitdir: ./evil\n")
        with pytest.raises(RelayError) as refused:
            spaces.create("b2", agent.path, base=None, carry_changes=False)
    finally:
        spaces.close()
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT
    assert not pwned.exists()


def test_a_linked_worktree_the_person_keeps_inside_their_checkout_still_gets_worktrees(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    repo = _checkout(tmp_path)
    inside = repo / ".claude" / "worktrees" / "x"
    _git(repo, "worktree", "add", "-q", "-b", "x", str(inside), "HEAD")
    spaces = Workspaces(make_settings())
    try:
        rec = spaces.create("w1", str(inside), base=None, carry_changes=False)
    finally:
        spaces.close()
    assert Path(rec.path, "f.txt").read_text() == "x\n"


def test_a_worktree_whose_git_file_an_agent_replaced_with_a_git_folder_gets_no_worktree_of_its_own(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    repo, pwned = _checkout(tmp_path), tmp_path / "pwned"
    spaces = Workspaces(make_settings())
    try:
        agent = spaces.create("a1", str(repo), base=None, carry_changes=False)
        Path(agent.path, ".git").unlink()
        _plain_text_git_folder(Path(agent.path, ".git"), repo, pwned)
        with pytest.raises(RelayError) as refused:
            spaces.create("b2", agent.path, base=None, carry_changes=False)
    finally:
        spaces.close()
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT and "job's worktree" in refused.value.message
    assert not pwned.exists()
