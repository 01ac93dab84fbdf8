"""A worker that cannot renew its lease fences itself (issue 40): paused by SIGSTOP, or its link cut, past its lease.

The worker is `relay worker` on a host of its own (a network and a pid namespace) reaching PostgreSQL over its link;
the front runs in this process. Its agent ticks to a log and to its stdout every 0.1 s (tests/cluster/faults.py):

- stopped past its lease: the agent is dead before the front judges the lease (its last tick precedes both the
  lease's end in the store's view and the front's `interrupted`); once the worker runs again nothing more of the
  job reaches the store (its copy of the output does not grow), and the worker shows as running again;
- cut off past its lease, the job asking `retry="on_lost_worker"`: the job runs again on another host, the two
  runs never tick at the same time, the store's copy of its output is the second run's only, and once the link
  is back nothing the first worker writes is taken.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import anyio
import pytest

from relay.config import load_settings
from relay.jobs.engine import Engine
from relay.jobs.request import JobRequest
from relay.store import JobStore, open_store
from tests.cluster.faults import Hosts, base_env, fleet, home_for, last_tick, overlapping, ticking_agent, ticks
from tests.cluster.netns import Cluster
from tests.cluster.test_pg_hosts import agent_processes

pytestmark = pytest.mark.anyio

__all__ = ["fleet"]  # the fixture, used by name

LEASE_S = 3.0


def stdout_copy(store: JobStore, job: str) -> bytes:
    """The store's copy of a job's stdout (what a front of another host pages)."""
    data, total = store.read_output_page(job, "stdout", 0, 1 << 20)
    assert len(data) == total
    return data


async def ticking_on(front: Engine, log: Path, job: str, marker: str, worker: str, runs: int = 1) -> None:
    """Until the job (its agent named by `marker`, its prompt) runs on `worker`, the store says so (`running`: a
    claim the worker had not yet marked running would be queued again, not judged), and `runs` runs of it ticked."""
    with anyio.fail_after(60):
        while True:
            rec = front.get(job)
            on = (rec.worker or "").split("/")[0] == worker and rec.status == "running"
            if on and len(ticks(log).get(marker, {})) >= runs:
                return
            await anyio.sleep(0.05)


async def test_a_worker_stopped_past_its_lease_kills_its_agent_before_the_lease_is_judged_and_writes_nothing_after(
    fleet: Hosts, pg_url: str, tmp_path: Path
) -> None:
    work, log = tmp_path / "work", tmp_path / "ticks.log"
    work.mkdir()
    agent = ticking_agent(tmp_path / "bin", log, 60)
    env = base_env(work, pg_url, LEASE_S)
    fleet.add("host-a")
    fleet.start("host-a", home_for(tmp_path, "a", agent, env), work)
    settings = load_settings(home_for(tmp_path, "front", agent, env) | {"RELAY_RUN_JOBS": "0"}, cwd=work)
    store = open_store(pg_url, home=tmp_path)
    try:
        async with Engine(settings).running() as front:
            job = front.submit(JobRequest(agent="claude", prompt="job-paused", cwd=str(work)))
            await ticking_on(front, log, job, "job-paused", "host-a")
            worker_id = front.get(job).worker or ""
            paused = fleet.worker_pid("host-a")
            os.kill(paused, signal.SIGSTOP)
            try:
                rec = await front.wait_one(job, LEASE_S + 15)
                heard = store.get_worker(worker_id)
                assert heard is not None
                lease_end = heard.heartbeat_at + LEASE_S  # the lease's end in the store's view
                assert rec.status == "interrupted" and rec.finished_at is not None, rec
                marks = list((tmp_path / "home-a").rglob(f"{job}/fenced"))
                killed_at = marks[0].read_text().strip() if marks else "no mark"
                timeline = f"renewed {heard.heartbeat_at}, killed {killed_at}, judged {rec.finished_at}"
                assert last_tick(log) < lease_end <= rec.finished_at + 0.5, timeline
                assert agent_processes("job-paused") == []  # dead before it was judged, while its worker sleeps
                copied = stdout_copy(store, job)
            finally:
                os.kill(paused, signal.SIGCONT)
            await anyio.sleep(LEASE_S * 2)  # the worker runs again: it looks at its job, its heart beats
        assert stdout_copy(store, job) == copied  # no byte of the run after the fence
        final = store.get_job(job)
        assert final is not None and (final.status, final.finished_at) == ("interrupted", rec.finished_at)
        back = store.get_worker(worker_id)
        assert back is not None and back.state == "running"  # a worker that returns shows as live
        assert fleet.workers["host-a"].poll() is None
    finally:
        store.close()


async def test_a_worker_cut_off_past_its_lease_stops_its_agent_before_the_retry_runs_and_the_runs_never_overlap(
    cluster: Cluster, fleet: Hosts, pg_url: str, tmp_path: Path
) -> None:
    work, log = tmp_path / "work", tmp_path / "ticks.log"
    work.mkdir()
    agent = ticking_agent(tmp_path / "bin", log, 8)
    env = base_env(work, pg_url, LEASE_S)
    cut_off = fleet.add("host-a")
    fleet.add("host-b")
    fleet.start("host-a", home_for(tmp_path, "a", agent, env), work)
    settings = load_settings(home_for(tmp_path, "front", agent, env) | {"RELAY_RUN_JOBS": "0"}, cwd=work)
    store = open_store(pg_url, home=tmp_path)
    try:
        async with Engine(settings).running() as front:
            job = front.submit(JobRequest(agent="claude", prompt="job-retried", cwd=str(work), retry="on_lost_worker"))
            await ticking_on(front, log, job, "job-retried", "host-a")
            fleet.start("host-b", home_for(tmp_path, "b", agent, env), work)  # free: it takes the retry
            cluster.cut(cut_off)
            cut_at = time.time()
            await ticking_on(front, log, job, "job-retried", "host-b", runs=2)
            rec = await front.wait_one(job, 60)
            assert rec.status == "completed", rec
            cluster.restore(cut_off)
            await anyio.sleep(LEASE_S * 2)  # host-a hears from the store again and tries its writes
        runs = ticks(log)["job-retried"]
        assert len(runs) == 2 and overlapping(runs) == [], runs
        first, second = sorted(runs, key=lambda run: runs[run][0])
        assert runs[first][1] / 1e9 < cut_at + LEASE_S  # the first run ended within the lease it last had
        copy = stdout_copy(store, job).decode()
        assert f" {second} " in copy and f" {first} " not in copy  # the lost run's lines are not the re-run's
        final = store.get_job(job)
        assert final is not None and (final.status, final.finished_at) == ("completed", rec.finished_at)
    finally:
        store.close()
