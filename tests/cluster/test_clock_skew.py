"""One clock (issue 40): leases and heartbeats are the store's time, whatever the clocks of the hosts say.

A front (`relay serve --http --no-worker`) whose clock runs 20 s ahead, a worker host whose clock runs 20 s behind
and one whose clock runs 20 s ahead (tests/cluster/skewed.py moves a process's time.time), all on PostgreSQL, the
workers each in a network and a pid namespace of their own, with a 3 s lease: every job completes, run once, and
each worker's last heartbeat is the store's time (not 20 s off it).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from relay.config import load_settings
from relay.jobs.engine import Engine
from relay.jobs.request import JobRequest
from relay.store import open_store
from tests.cluster.faults import Hosts, base_env, fleet, home_for, ticking_agent, ticks

pytestmark = pytest.mark.anyio

__all__ = ["fleet"]  # the fixture, used by name

LEASE_S = 3.0
SKEW_S = 20.0


async def test_a_front_20_s_ahead_and_workers_20_s_behind_and_ahead_end_no_healthy_job_and_stamp_the_stores_time(
    fleet: Hosts, pg_url: str, tmp_path: Path
) -> None:
    work, log = tmp_path / "work", tmp_path / "ticks.log"
    work.mkdir()
    agent = ticking_agent(tmp_path / "bin", log, 4 * LEASE_S)
    env = base_env(work, pg_url, LEASE_S)
    for name, skew in (("host-behind", -SKEW_S), ("host-ahead", SKEW_S)):
        fleet.add(name)
        fleet.start(name, home_for(tmp_path, name, agent, env), work, "--slots", "2", clock_s=skew)
    ahead_env = home_for(tmp_path, "front-ahead", agent, env)
    front_ahead = subprocess.Popen(
        [sys.executable, "-m", "tests.cluster.skewed", str(SKEW_S), "serve", "--http", "--no-worker", "--port", "0"],
        env=ahead_env,
        cwd=work,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    settings = load_settings(home_for(tmp_path, "front", agent, env) | {"RELAY_RUN_JOBS": "0"}, cwd=work)
    markers = [f"job-{n}" for n in range(4)]
    try:
        async with Engine(settings).running() as front:
            jobs = {m: front.submit(JobRequest(agent="claude", prompt=m, cwd=str(work))) for m in markers}
            ended = {m: await front.wait_one(job, 60) for m, job in jobs.items()}
            store = open_store(pg_url, home=tmp_path)
            try:
                now = store.clock()
                beats = {w.name: w.heartbeat_at - now for w in store.list_workers()}
            finally:
                store.close()
        assert {m: rec.status for m, rec in ended.items()} == dict.fromkeys(markers, "completed"), {
            m: rec.error for m, rec in ended.items()
        }
        assert {m: len(runs) for m, runs in ticks(log).items()} == dict.fromkeys(markers, 1)
        assert {(rec.worker or "").split("/")[0] for rec in ended.values()} <= {"host-behind", "host-ahead"}
        assert all(-LEASE_S - 1 <= age <= 1 for age in beats.values()), beats  # the store's time, not 20 s off
        assert front_ahead.poll() is None  # the front ahead ran all along (and judged no lease early)
    finally:
        front_ahead.terminate()
        front_ahead.wait(30)
