"""A job by repository URL across hosts: a `relay worker` in a network namespace claims it from the store, fetches
the repository from a git daemon over its veth, runs the agent, pushes the branch back; the front lands it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from relay.jobs.engine import Engine, JobRequest
from tests.cluster.netns import Cluster
from tests.conftest import SettingsFactory
from tests.git_daemon import bare_repo, git_daemon
from tests.workspaces.conftest import git, one_commit_repo

pytestmark = [pytest.mark.cluster, pytest.mark.anyio]

RELAY = str(Path(sys.executable).with_name("relay"))


async def test_a_worker_host_runs_a_job_by_url_from_the_git_daemon_over_its_link_and_the_front_lands_it(
    cluster: Cluster, make_settings: SettingsFactory, tmp_path: Path, workdir: Path
) -> None:
    host = cluster.add_host()
    source = tmp_path / "src"
    source.mkdir()
    one_commit_repo(source)
    served = tmp_path / "served"
    served.mkdir()
    bare_repo(served, "app.git", source)
    settings = make_settings()
    env = {**os.environ, "RELAY_HOME": str(settings.home)}
    with git_daemon(served, host.root_addr) as daemon:
        url = daemon.url("app.git")  # an address of the root side of the host's link
        clone = tmp_path / "clone"
        git(tmp_path, "clone", "--quiet", url, str(clone))
        worker = cluster.popen(
            host, [RELAY, "worker", "--name", "host-a"], env=env, cwd=workdir, stderr=subprocess.PIPE
        )
        async with Engine(settings.with_(runs_jobs=False)).running() as front:
            prompt = "add a file [[fake:write=made-on-host-a.txt~over the veth\\n]]"
            job_id = front.submit(JobRequest(agent="claude", prompt=prompt, repo=url, cwd=str(clone)))
            with anyio.fail_after(60):
                rec = await front.wait_one(job_id, 60)
            env_ = front.envelope(job_id)
            landed = await front.land(job_id)
        worker.send_signal(signal.SIGTERM)
        _, err = await anyio.to_thread.run_sync(lambda: worker.communicate(timeout=30))
    assert worker.returncode == 0, err
    assert rec.status == "completed" and (rec.worker or "").startswith("host-a/")
    assert env_["workspace"]["remote"]["pushed"] is True  # type: ignore[index]
    assert any(f"Connection from {host.addr}:" in line for line in daemon.log)  # the worker host fetched and pushed
    assert landed["into"] == "main" and (clone / "made-on-host-a.txt").read_text() == "over the veth\n"
