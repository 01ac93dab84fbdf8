"""The person's setup command runs on the person's content only, never on what an agent wrote that nobody landed.

The command is the person's (config.toml), but what it runs is the repository's: `npm ci` runs package.json's
scripts, `make setup` the Makefile, outside any agent's sandbox. An agent at `edit` may write those files, and
relay's seal commits them on its branch relay/<job>. A new worktree a caller starts from that branch (`base`), or
the worktree made again from it for a follow-up after a prune, would have the person's command run the agent's
script: `full` for an `edit` agent, nobody asked. Such a worktree is made ready without its setup command, and
its setup log says why."""

from __future__ import annotations

import subprocess
from pathlib import Path

from relay.workspaces import Workspaces
from relay.workspaces.ready import make_ready
from relay.workspaces.seal import commit_message
from tests.conftest import SettingsFactory


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "p@example.com")
    _git(repo, "config", "user.name", "person")
    (repo / "bootstrap.sh").write_text("echo the person's setup\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "the person's bootstrap")
    return repo


def _agent_rewrites_bootstrap(spaces: Workspaces, repo: Path, job_id: str, pwned: Path) -> None:
    """A job at `edit` in its worktree rewrites the script the setup runs; relay's seal commits it on its branch."""
    rec = spaces.create(job_id, str(repo), base=None, carry_changes=False)
    Path(rec.path, "bootstrap.sh").write_text(f"touch {pwned}\n")
    spaces.seal(rec, commit_message("tidy the bootstrap", job_id, "claude"))


def test_a_new_worktree_started_from_an_agents_unlanded_branch_runs_no_setup_command(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    repo, pwned, log = _repo(tmp_path), tmp_path / "pwned", tmp_path / "setup.log"
    settings = make_settings('[workspaces]\nsetup_command = "sh bootstrap.sh"\n')
    spaces = Workspaces(settings)
    try:
        _agent_rewrites_bootstrap(spaces, repo, "a1", pwned)
        later = spaces.create("b2", str(repo), base="relay/a1", carry_changes=False)
        ready = make_ready(settings, later, log)
    finally:
        spaces.close()
    assert not pwned.exists()
    assert ready is not None and ready["setup"] is None
    assert "the setup command was not run" in log.read_text()


def test_a_worktree_made_again_from_its_agents_branch_for_a_follow_up_runs_no_setup_command(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    repo, pwned, log = _repo(tmp_path), tmp_path / "pwned", tmp_path / "setup.log"
    settings = make_settings('[workspaces]\nsetup_command = "sh bootstrap.sh"\n')
    spaces = Workspaces(settings)
    try:
        _agent_rewrites_bootstrap(spaces, repo, "a1", pwned)
        rec = spaces.get("a1")
        assert rec is not None
        _git(repo, "worktree", "remove", "--force", rec.path)  # the prune took it
        again = spaces.reopen(rec)
        make_ready(settings, again, log)
    finally:
        spaces.close()
    assert not pwned.exists()
    assert "the setup command was not run" in log.read_text()


def test_the_setup_command_runs_on_the_persons_branch_and_on_their_carried_changes(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    repo, ran = _repo(tmp_path), tmp_path / "ran"
    settings = make_settings(f'[workspaces]\nsetup_command = "echo ran >> {ran}"\n')
    spaces = Workspaces(settings)
    try:
        make_ready(settings, spaces.create("c1", str(repo), base=None, carry_changes=False), tmp_path / "c1.log")
        make_ready(settings, spaces.create("c2", str(repo), base="main", carry_changes=False), tmp_path / "c2.log")
        (repo / "bootstrap.sh").write_text("echo an uncommitted change of the person's\n")
        make_ready(settings, spaces.create("c3", str(repo), base=None, carry_changes=True), tmp_path / "c3.log")
    finally:
        spaces.close()
    assert ran.read_text() == "ran\nran\nran\n"
