"""`relay run --worktree`, `relay jobs`, `relay diff`, `relay land`, `relay discard` as a person runs them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_cli import relay
from tests.conftest import SettingsFactory
from tests.workspaces.conftest import git, one_commit_repo


@pytest.fixture
def repo(make_settings: SettingsFactory, workdir: Path) -> Path:
    make_settings()
    one_commit_repo(workdir)
    return workdir


def job_id_of(home: Path, cwd: Path) -> str:
    return relay("jobs", home=home, cwd=cwd).stdout.splitlines()[1].split()[0]


def test_a_worktree_run_shows_its_branch_diffs_fails_a_test_gate_and_lands(relay_home: Path, repo: Path) -> None:
    ran = relay("run", "claude", "edit [[fake:write=app.txt~two\\n]]", "--worktree", home=relay_home, cwd=repo)
    assert ran.returncode == 0, ran.stderr
    job = job_id_of(relay_home, repo)
    assert f"[relay/{job}: 1 files, +1 -1; relay diff {job} / relay land {job}]" in ran.stderr
    row = relay("jobs", home=relay_home, cwd=repo).stdout.splitlines()[1]
    assert f"relay/{job}" in row.split()
    diff = relay("diff", job, home=relay_home, cwd=repo)
    assert diff.returncode == 0 and "-one\n+two\n" in diff.stdout
    gated = relay("land", job, "--test", "echo the suite fails; exit 1", home=relay_home, cwd=repo)
    assert gated.returncode == 1
    assert "the suite fails" in gated.stderr and "relay: LAND_TEST_FAILED:" in gated.stderr
    assert (repo / "app.txt").read_text() == "one\n"
    landed = relay("land", job, "--test", "grep -q two app.txt", home=relay_home, cwd=repo)
    assert landed.returncode == 0, landed.stderr
    assert landed.stdout.startswith(f"relay/{job} landed into main (rebase, 1 commits)")
    assert (repo / "app.txt").read_text() == "two\n"


def test_discard_removes_the_branch_and_a_plain_job_gets_a_hint_not_a_traceback(relay_home: Path, repo: Path) -> None:
    assert relay("run", "claude", "x [[fake:write=b~1]]", "--worktree", home=relay_home, cwd=repo).returncode == 0
    job = job_id_of(relay_home, repo)
    gone = relay("discard", job, home=relay_home, cwd=repo)
    assert gone.returncode == 0 and f"relay/{job} and its worktree" in gone.stdout
    assert git(repo, "branch", "--list", f"relay/{job}") == ""
    assert relay("run", "claude", "plain", home=relay_home, cwd=repo).returncode == 0
    plain = job_id_of(relay_home, repo)
    refused = relay("land", plain, home=relay_home, cwd=repo)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert refused.stderr.startswith("relay: INVALID_ARGUMENT: job") and "hint:" in refused.stderr
    outside = relay("run", "claude", "x", "--worktree", "--cwd", "/", home=relay_home, cwd=repo)
    assert outside.returncode != 0 and "relay: CWD_NOT_ALLOWED" in outside.stderr


def test_doctor_reports_the_worktrees_with_their_branch_state_and_disk_use(relay_home: Path, repo: Path) -> None:
    import json

    assert (
        relay(
            "run", "claude", "x [[fake:write=big.txt~" + "y" * 5000 + "]]", "--worktree", home=relay_home, cwd=repo
        ).returncode
        == 0
    )
    job = job_id_of(relay_home, repo)
    report = json.loads(relay("doctor", "--json", home=relay_home, cwd=repo).stdout)["worktrees"]
    assert report["count"] == 1 and report["bytes"] >= 5000
    assert [(w["job_id"], w["branch"], w["state"]) for w in report["worktrees"]] == [(job, f"relay/{job}", "active")]
    text = relay("doctor", home=relay_home, cwd=repo).stdout
    assert f"worktrees: 1 in {relay_home / 'worktrees'}" in text and f"relay/{job} (active)" in text
