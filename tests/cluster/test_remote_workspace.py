"""A worker host in a network namespace takes its job's repository over the veth and pushes the branch back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.netns import Cluster, Host
from tests.conftest import REPO
from tests.git_daemon import bare_repo, git_daemon

pytestmark = pytest.mark.cluster

# What a cut-off host waits for the repository before it calls it unreachable.
FETCH_TIMEOUT_S = 2.0


def place_on(cluster: Cluster, host: Host, url: str, home: Path, job_id: str) -> dict[str, Any]:
    """Place, write, seal and push one job inside `host` (tests/cluster/place_job.py); its JSON answer."""
    argv = [sys.executable, "-m", "tests.cluster.place_job", url, str(home), job_id, str(FETCH_TIMEOUT_S)]
    done = cluster.run(host, argv, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def served(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "README").write_text("the job's repository\n")
    ident = ["-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q", "-b", "main"], ["add", "."], [*ident, "commit", "-q", "-m", "first"]):
        subprocess.run(["git", *args], cwd=src, check=True, capture_output=True)
    base = tmp_path / "served"
    base.mkdir()
    bare_repo(base, "app.git", src)
    return base


def test_two_worker_hosts_place_jobs_from_the_root_sides_git_daemon_and_push_their_branches_back(
    cluster: Cluster, hosts: list[Host], served: Path, tmp_path: Path
) -> None:
    with git_daemon(served, hosts[0].root_addr) as daemon:
        url = daemon.url("app.git")
        answers = [place_on(cluster, host, url, tmp_path / f"home-{i}", f"job{i}") for i, host in enumerate(hosts)]
    for i, answer in enumerate(answers):
        assert answer["remote"] == {"url": url, "branch": f"relay/job{i}", "head": answer["head"], "pushed": True}
        shown = subprocess.run(
            ["git", "show", f"relay/job{i}:job{i}.txt"], cwd=served / "app.git", capture_output=True, text=True
        )
        assert shown.stdout == f"written on the host by job{i}\n"


def test_a_worker_host_whose_link_is_cut_gets_an_upstream_error_and_places_again_once_it_is_back(
    cluster: Cluster, hosts: list[Host], served: Path, tmp_path: Path
) -> None:
    host = hosts[0]
    with git_daemon(served, host.root_addr) as daemon:
        url = daemon.url("app.git")
        cluster.cut(host)
        lost = place_on(cluster, host, url, tmp_path / "home", "job1")
        cluster.restore(host)
        back = place_on(cluster, host, url, tmp_path / "home", "job1")
    assert lost["error"]["code"] == "UPSTREAM_ERROR" and "did not answer" in lost["error"]["message"]
    assert back["remote"]["pushed"] is True
