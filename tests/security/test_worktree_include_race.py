"""The .worktreeinclude copy reads the file it checked: a file swapped for a symlink out of the checkout between the
check and the copy (an agent running in the checkout itself) is never copied as that link, nor followed."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from relay.workspaces import ready


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_a_file_swapped_for_a_symlink_out_after_its_check_is_not_copied_as_the_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout, worktree, secret = tmp_path / "checkout", tmp_path / "wt", tmp_path / "secret.txt"
    checkout.mkdir()
    worktree.mkdir()
    secret.write_text("the person's key\n")
    _git(checkout, "init", "-q", "-b", "main")
    (checkout / ".gitignore").write_text(".env\n")
    (checkout / ".worktreeinclude").write_text(".env\n")
    (checkout / ".env").write_text("API_KEY=x\n")
    real_lstat = os.lstat

    def lstat_then_swap(path: str | os.PathLike[str], *args: object, **kwargs: object) -> os.stat_result:
        found = real_lstat(path)
        if str(path) == str(checkout / ".env") and not stat.S_ISLNK(found.st_mode):
            os.unlink(path)
            os.symlink(secret, path)  # the swap, just after relay looked
        return found

    monkeypatch.setattr(ready.os, "lstat", lstat_then_swap)
    copied = ready.copy_included(checkout, worktree)
    monkeypatch.undo()
    dst = worktree / ".env"
    assert not dst.is_symlink()
    assert not dst.exists() or dst.read_text() != "the person's key\n"
    assert copied.files == 0 and [rel for rel, _ in copied.skipped] == [".env"]
