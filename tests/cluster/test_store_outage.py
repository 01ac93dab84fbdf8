"""A store outage under the default lease (15 s), PostgreSQL stopped (connections cut at once) while jobs run on two worker hosts
(each a network and a pid namespace reaching the store over its link); the front runs in this process (issue 40).

- 8 s, shorter than the lease: no job ends; a job whose agent finishes while the store is away waits for it and
  completes (it is not failed `STORE_UNAVAILABLE`);
- 20 s, longer than the lease: what docs/scaling.md says. The store was down for every process, so no one could
  judge a lease meanwhile: the workers that renew once it is back keep their jobs, which run on; a third worker
  host cut off at the same moment (it really could not renew) stopped its agent within its lease, and the front
  ends its job `interrupted` once the store is back.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from relay.config import DEFAULT_LEASE_S, load_settings
from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine
from relay.jobs.request import JobRequest
from relay.store import JobRecord, open_store
from tests.cluster.faults import Hosts, OwnPg, base_env, home_for, own_pg, ticking_agent, ticks
from tests.cluster.netns import Cluster

pytestmark = pytest.mark.anyio

__all__ = ["own_pg"]  # the fixture, used by name


async def ended_once_back(front: Engine, job: str, timeout: float) -> JobRecord:
    """The job's end, asked for while the front may still find the store away (it looks again every 0.5 s)."""
    with anyio.fail_after(timeout):
        while True:
            try:
                return await front.wait_one(job, timeout)
            except RelayError as err:
                if err.code is not ErrorCode.STORE_UNAVAILABLE:
                    raise
            await anyio.sleep(0.2)


# How soon after the store is back every worker has renewed its lease (it looks for the store every 0.5 s).
RENEWED_WITHIN_S = 3.0


async def renewed_after(url: str, home: Path, since: float, within: float) -> dict[str, bool]:
    """Whether each worker's heartbeat (the store's time) is later than `since`, looked at for `within` seconds."""
    store = open_store(url, home=home)
    try:
        deadline = time.monotonic() + within
        while True:
            beats = {w.name: w.heartbeat_at > since for w in store.list_workers()}
            if all(beats.values()) or time.monotonic() > deadline:
                return beats
            await anyio.sleep(0.1)
    finally:
        store.close()


async def all_ticking(log: Path, markers: list[str]) -> None:
    with anyio.fail_after(90):
        while not all(ticks(log).get(m) for m in markers):
            await anyio.sleep(0.05)


def fleet_of_two(cluster: Cluster, pg: OwnPg, url: str, tmp_path: Path, agent: Path, work: Path) -> Hosts:
    fleet = Hosts(cluster, pg.port)
    env = base_env(work, url, None)  # the default lease
    for name in ("host-a", "host-b"):
        fleet.add(name)
        fleet.start(name, home_for(tmp_path, name, agent, env), work, "--slots", "2")
    return fleet


async def test_an_8_s_store_outage_under_the_default_lease_ends_no_job_and_a_job_ending_meanwhile_completes(
    cluster: Cluster, own_pg: OwnPg, tmp_path: Path
) -> None:
    url = own_pg.new_database()
    work, log = tmp_path / "work", tmp_path / "ticks.log"
    work.mkdir()
    agent = ticking_agent(tmp_path / "bin", log, 22, short_s=5)
    fleet = fleet_of_two(cluster, own_pg, url, tmp_path, agent, work)
    front_env = home_for(tmp_path, "front", agent, base_env(work, url, None))
    settings = load_settings(front_env | {"RELAY_RUN_JOBS": "0"}, cwd=work)
    assert settings.lease_s == DEFAULT_LEASE_S == 15
    markers = ["job-0", "job-1", "job-2", "job-3-short"]
    try:
        async with Engine(settings).running() as front:
            jobs = {m: front.submit(JobRequest(agent="claude", prompt=m, cwd=str(work))) for m in markers[:3]}
            await all_ticking(log, markers[:3])
            jobs[markers[3]] = front.submit(JobRequest(agent="claude", prompt=markers[3], cwd=str(work)))
            await all_ticking(log, markers)
            with anyio.fail_after(30):  # its start recorded (a start the outage cuts short is another matter)
                while front.get(jobs[markers[3]]).status != "running":
                    await anyio.sleep(0.02)
            own_pg.away()
            await anyio.sleep(8)
            restarting = time.time()  # the store is down until here at least
            own_pg.back()
            back = time.time()  # pg_ctl returns once it answers: a worker may have written a moment before
            renewed = await renewed_after(url, tmp_path, back, RENEWED_WITHIN_S)
            ended = {m: await ended_once_back(front, job, 60) for m, job in jobs.items()}
        assert {m: rec.status for m, rec in ended.items()} == dict.fromkeys(markers, "completed"), {
            m: rec.error for m, rec in ended.items()
        }
        # Every worker renewed within a few seconds of the store's return, not after a backoff grown past a beat.
        assert renewed == {"host-a": True, "host-b": True}
        short = ended[markers[3]]
        assert short.finished_at is not None and short.finished_at >= restarting  # it waited for the store
        said = {n: (tmp_path / f"home-{n}" / "worker.log").read_text() for n in fleet.workers}
        assert {m: len(runs) for m, runs in ticks(log).items()} == dict.fromkeys(markers, 1), said  # each ran once
        assert {n: p.poll() for n, p in fleet.workers.items()} == {"host-a": None, "host-b": None}
    finally:
        fleet.close()


async def test_a_20_s_store_outage_under_the_default_lease_ends_only_the_job_of_the_worker_that_could_not_renew(
    cluster: Cluster, own_pg: OwnPg, tmp_path: Path
) -> None:
    url = own_pg.new_database()
    work, log = tmp_path / "work", tmp_path / "ticks.log"
    work.mkdir()
    agent = ticking_agent(tmp_path / "bin", log, 32)
    env = base_env(work, url, None)
    fleet = Hosts(cluster, own_pg.port)
    for name in ("host-a", "host-b", "host-c"):
        fleet.add(name)
        fleet.start(name, home_for(tmp_path, name, agent, env), work, "--labels", name)
    settings = load_settings(home_for(tmp_path, "front", agent, env) | {"RELAY_RUN_JOBS": "0"}, cwd=work)
    markers = {"job-a": "host-a", "job-b": "host-b", "job-c": "host-c"}
    try:
        async with Engine(settings).running() as front:
            jobs = {
                m: front.submit(JobRequest(agent="claude", prompt=m, cwd=str(work), labels=(host,)))
                for m, host in markers.items()
            }
            await all_ticking(log, list(markers))
            cluster.cut(fleet.hosts["host-c"])  # host-c loses its link as the store goes down, and stays cut
            away = time.time()
            own_pg.away()
            await anyio.sleep(20)
            own_pg.back()
            back = time.time()
            ended = {m: await ended_once_back(front, job, 90) for m, job in jobs.items()}
        runs = ticks(log)
        # The store was down for everyone: the workers that renew once it is back keep their jobs, which run on.
        for m in ("job-a", "job-b"):
            assert ended[m].status == "completed", ended[m].error
            [(_, last)] = runs[m].values()
            assert last / 1e9 > back
        # host-c could not renew (cut off): its agent stopped within its lease, before the front ended the job.
        lost = ended["job-c"]
        assert lost.status == "interrupted" and lost.error is not None and "host-c" in lost.error["message"]
        [(_, last)] = runs["job-c"].values()
        assert last / 1e9 < away + DEFAULT_LEASE_S and lost.finished_at is not None and last / 1e9 < lost.finished_at
        assert {n: p.poll() for n, p in fleet.workers.items()} == dict.fromkeys(markers.values())
    finally:
        fleet.close()
