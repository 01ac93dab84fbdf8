"""A worker host that dies mid-job: its job ends `interrupted` within its lease (and a heartbeat), naming
the worker, and no other worker runs it. The host is a network namespace with its own pid namespace (its
pids mean nothing outside, as on another machine); the store is the home's SQLite file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import psutil
import pytest

from relay.config import load_settings
from relay.jobs.engine import Engine
from relay.jobs.request import JobRequest
from tests.cluster.netns import Cluster, Host
from tests.cluster.test_pg_hosts import setup
from tests.reliability.test_one_queue import most_at_once

pytestmark = pytest.mark.anyio

RELAY = str(Path(sys.executable).with_name("relay"))
LEASE_S = 2.0


def worker_on(cluster: Cluster, host: Host, env: dict[str, str], cwd: Path, *args: str) -> subprocess.Popen[str]:
    """`relay worker ARGS` as the first process of a pid namespace of its own, inside `host`."""
    argv = ["unshare", "--pid", "--fork", "--mount", "--mount-proc", RELAY, "worker", *args]
    return cluster.popen(host, argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


async def test_a_worker_host_killed_mid_job_ends_its_job_interrupted_within_its_lease_and_no_one_runs_it_again(
    cluster: Cluster, tmp_path: Path
) -> None:
    env, work, log = setup(tmp_path, None, 60)
    far = worker_on(cluster, cluster.add_host(), env, work, "--name", "host-a", "--labels", "a")
    # A worker of this host, free the whole time: it must not pick up host-a's job.
    near = subprocess.Popen([RELAY, "worker", "--name", "near"], env=env, cwd=work, stderr=subprocess.DEVNULL)
    try:
        settings = load_settings(env | {"RELAY_RUN_JOBS": "0"}, cwd=work)
        async with Engine(settings).running() as front:
            job = front.submit(JobRequest(agent="claude", prompt="job-far", cwd=str(work), labels=("a",)))
            with anyio.fail_after(30):
                while front.get(job).status != "running" or not log.exists():
                    await anyio.sleep(0.05)
            assert (front.get(job).worker or "").startswith("host-a/")
            # The host dies: the first process of its pid namespace, and with it every process there.
            [init] = psutil.Process(far.pid).children()
            os.kill(init.pid, signal.SIGKILL)
            killed = time.monotonic()
            rec = await front.wait_one(job, LEASE_S + 10)
            noticed = time.monotonic() - killed
        assert rec.status == "interrupted", rec
        assert noticed <= LEASE_S + 5
        assert rec.error is not None and "worker host-a" in rec.error["message"]
        assert "was lost" in rec.error["message"]
        await anyio.sleep(LEASE_S)  # time enough for `near` to run it, were it to
        assert most_at_once(log)[1] == {"job-far": 1}
    finally:
        near.terminate()
        near.wait(30)
