"""The job engine as it is, handed the PostgreSQL store: a job runs, is waited on and is read back."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from relay.jobs.engine import Engine, JobRequest
from relay.store import open_store
from relay.store.pg import PgStore
from tests.conftest import RECORDINGS, SettingsFactory
from tests.jobs.fakeproc import Spawner
from tests.postgres import Cluster

pytestmark = pytest.mark.anyio

TEXT_RUN = (RECORDINGS / "claude_stream_text.ndjson").read_text()


async def test_a_job_runs_to_completion_on_the_postgresql_store_and_another_store_reads_it_back(
    make_settings: SettingsFactory, workdir: Path, pg_url: str, relay_home: Path
) -> None:
    settings = make_settings(RELAY_STORE=pg_url)
    store = open_store(settings.store_target, home=settings.home)
    assert isinstance(store, PgStore)
    spawner = Spawner()
    async with Engine(settings, spawn=spawner, store=store).running() as engine:  # type: ignore[arg-type]
        job_id = engine.submit(JobRequest(agent="claude", prompt="hi", cwd=str(workdir)))
        (proc,) = await spawner.wait_for(1)
        proc.write(TEXT_RUN)
        proc.exit(0)
        with anyio.fail_after(5):
            rec = await engine.wait_one(job_id, 5)
        env = engine.envelope(job_id)
    assert rec.status == "completed" and env["output"] == "hi from mock"
    # another process's view of the same database: the job, its events and its session
    other = open_store(pg_url, home=relay_home)
    job = other.get_job(job_id)
    assert job is not None and job.status == "completed" and job.session_id == env["session_id"]
    assert [e.type for _, _, e in other.events(job_id)] == [e.type for _, _, e in store.events(job_id)] != []
    assert other.get_session(env["session_id"], "claude") is not None
    other.close()
    store.close()


async def test_a_front_queues_and_two_workers_on_one_postgresql_store_run_within_the_limit(
    make_settings: SettingsFactory, workdir: Path, pg_url: str, relay_home: Path
) -> None:
    """A front that runs nothing submits; engines that run jobs claim them through the store (they learn of
    them from its notices), never more than the global limit at once."""
    front_settings = make_settings(RELAY_MAX_CONCURRENT="2", RELAY_RUN_JOBS="0")
    worker_settings = make_settings(RELAY_MAX_CONCURRENT="2")
    stores = [open_store(pg_url, home=relay_home) for _ in range(3)]
    spawner = Spawner()  # both workers spawn through it: it sees every process of either
    jobs = 6
    async with (
        Engine(front_settings, spawn=spawner, store=stores[0]).running() as front,  # type: ignore[arg-type]
        Engine(worker_settings, spawn=spawner, store=stores[1]).running(),  # type: ignore[arg-type]
        Engine(worker_settings, spawn=spawner, store=stores[2]).running(),  # type: ignore[arg-type]
    ):
        ids = [front.submit(JobRequest(agent="claude", prompt=f"p{i}", cwd=str(workdir))) for i in range(jobs)]
        for done in range(jobs):
            procs = await spawner.wait_for(min(done + 2, jobs))  # a freed slot is claimed by one of the two
            live = [p for p in procs if not p.exited.is_set()]
            assert 1 <= len(live) <= 2
            live[0].write(TEXT_RUN)
            live[0].exit(0)
        with anyio.fail_after(10):
            records = await front.wait(ids, "all", 10)
    assert [r.status for r in records] == ["completed"] * jobs and len(spawner.procs) == jobs
    registered = {w.id: w.ran for w in stores[0].list_workers()}
    assert len(registered) == 2  # the two workers; the front runs nothing, so it is none
    assert {r.worker for r in records} <= set(registered) and sum(registered.values()) == jobs
    for store in stores:
        store.close()


async def test_a_job_running_while_postgresql_restarts_lands_its_result_once_the_store_is_back(
    make_settings: SettingsFactory, workdir: Path, pg_url: str, pg_cluster: Cluster, relay_home: Path
) -> None:
    settings = make_settings()
    store = open_store(pg_url, home=relay_home)
    spawner = Spawner()
    async with Engine(settings, spawn=spawner, store=store).running() as engine:  # type: ignore[arg-type]
        job_id = engine.submit(JobRequest(agent="claude", prompt="hi", cwd=str(workdir)))
        (proc,) = await spawner.wait_for(1)
        await anyio.to_thread.run_sync(pg_cluster.restart)  # every connection of the pool is closed under it
        proc.write(TEXT_RUN)
        proc.exit(0)
        with anyio.fail_after(30):
            rec = await engine.wait_one(job_id, 30)
    assert rec.status == "completed"
    assert [e.type for _, _, e in store.events(job_id)] != []
    other = open_store(pg_url, home=relay_home)
    job = other.get_job(job_id)
    assert job is not None and job.status == "completed" and job.result is not None
    other.close()
    store.close()


async def test_a_front_on_another_host_pages_the_output_of_a_job_a_worker_ran_from_the_store(
    make_settings: SettingsFactory, workdir: Path, pg_url: str, tmp_path: Path
) -> None:
    """Front and worker share only the PostgreSQL store (each its own home, as on two machines): the worker copies
    the job's output into the store as it runs, and the front's envelope, transcript and raw events come from
    there, a page at a time, non-ASCII text included."""
    worker_settings = make_settings(RELAY_STORE=pg_url)
    front_home = tmp_path / "front-home"
    front_home.mkdir()
    front_settings = worker_settings.with_(home=front_home, runs_jobs=False)
    spawner = Spawner()
    async with (
        Engine(front_settings, store=open_store(pg_url, home=front_home)).running() as front,  # type: ignore[arg-type]
        Engine(worker_settings, spawn=spawner).running() as worker,
    ):
        job_id = front.submit(JobRequest(agent="claude", prompt="hi", cwd=str(workdir)))
        (proc,) = await spawner.wait_for(1)
        proc.write(TEXT_RUN.replace("hi from mock", "héllo wörld " * 50_000))
        proc.exit(0)
        with anyio.fail_after(20):
            rec = await front.wait_one(job_id, 20)
        assert rec.status == "completed"
        assert not front.files(job_id).result.exists() and worker.files(job_id).result.exists()
        env = front.envelope(job_id)
        assert env["output"] == ("héllo wörld " * 50_000)[: front_settings.output_limit_chars]
        assert env["output_chars"] == len("héllo wörld " * 50_000) and env["truncated"]
        page = front.read_output(job_id, "final", 600_000 - 24, 24)
        assert page["text"] == "héllo wörld " * 2 and page["total_chars"] == 600_000
        mine = worker.read_output(job_id, "transcript", 0, 10_000_000)
        theirs = front.read_output(job_id, "transcript", 0, 10_000_000)
        assert theirs["text"] == mine["text"] != ""
        raw = front.read_output(job_id, "events", 0, 10_000_000)
        assert raw["text"] == worker.read_output(job_id, "events", 0, 10_000_000)["text"]


async def test_a_reader_on_another_host_leaves_a_job_a_far_worker_runs_alone(
    pg_url: str, make_settings: SettingsFactory, tmp_path: Path
) -> None:
    """`relay jobs` / `relay show` on a laptop reconcile the jobs whose relay died on *this* host; a job that a
    worker of another host runs (its pids mean nothing here) is that host's to judge, by its lease."""
    from relay.store import WorkerInfo

    store = open_store(pg_url, home=tmp_path)
    far = WorkerInfo("far/1", "host-b", "host-b.example", 4242, 1, "another-host", None, (), 1, 600.0)
    store.register_worker(far)
    store.insert_job("00000000000000fa", "claude", "cli", {"agent": "claude", "prompt": "p", "cwd": "/w"}, None, "/w")
    [(_, _, epoch)] = store.claim(far, free=1, max_total=8, per_agent=lambda _: 4)
    running = dict(pid=4242, pid_start_ticks=1, boot_id="another-boot", owner_pid=4242, owner_start_ticks=1)
    assert store.mark_running("00000000000000fa", **running, deadline_at=None, idle_timeout_s=None, epoch=epoch)  # type: ignore[arg-type]
    reader = Engine(make_settings(RELAY_STORE=pg_url))
    assert reader.reconcile() == []
    rec = store.get_job("00000000000000fa")
    assert rec is not None and (rec.status, rec.worker, rec.epoch) == ("running", "far/1", epoch)
    reader.store.close()
    store.close()
