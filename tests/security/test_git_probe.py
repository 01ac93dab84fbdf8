"""relay's own `git status` of a job's folder does not run a program the folder's git config names.

An agent allowed to edit a repository can write its `.git/config`; `core.fsmonitor` there names a command
`git status` runs. relay probes every job's folder before and after the job (files_changed), outside the
agent's sandbox, so obeying it would turn `edit` into running anything.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from relay.jobs.gitprobe import changed_files, git_status


def git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=cwd, check=True, capture_output=True
    )


def test_a_command_named_by_the_repositorys_fsmonitor_is_not_run_by_the_probe(tmp_path: Path) -> None:
    repo, mark = tmp_path / "repo", tmp_path / "ran"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.txt").write_text("one\n")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-qm", "one")
    git(repo, "config", "core.fsmonitor", f"touch {mark}; false #")
    before = git_status(str(repo))
    (repo / "b.txt").write_text("two\n")
    assert changed_files(before or {}, str(repo)) == {"b.txt"}
    assert not mark.exists()
