"""`relay worker`: a process that runs what it claims from the store's queue, listed by `relay workers`,
that finishes the jobs it runs when stopped with SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import anyio
import pytest

from relay.jobs.engine import Engine
from relay.jobs.request import JobRequest
from relay.store import Store, WorkerInfo
from tests.reliability.conftest import RELAY, AdvSettings, relay_env, wait_for
from tests.reliability.test_one_queue import interval_agent, most_at_once

pytestmark = pytest.mark.anyio


def workers(relay_home: Path, *flags: str) -> list[dict[str, object]]:
    out = subprocess.run(
        [RELAY, "workers", "--json", *flags], env=relay_env(relay_home), capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


async def test_a_front_that_runs_no_jobs_queues_them_for_a_relay_worker_which_finishes_its_jobs_on_sigterm(
    adv_settings: AdvSettings, relay_home: Path, workdir: Path, tmp_path: Path
) -> None:
    log = tmp_path / "intervals.log"
    settings = adv_settings(command=interval_agent(tmp_path / "bin", log, work_s=1.0), RELAY_RUN_JOBS="0")
    assert not settings.runs_jobs
    worker = subprocess.Popen(
        [RELAY, "worker", "--name", "w1", "--slots", "2", "--labels", "gpu", "--agents", "claude"],
        env=relay_env(relay_home),
        cwd=str(workdir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        async with Engine(settings).running() as front:
            ids = [front.submit(JobRequest(agent="claude", prompt=f"job-{i}", cwd=str(workdir))) for i in range(3)]
            ids.append(front.submit(JobRequest(agent="claude", prompt="job-gpu", cwd=str(workdir), labels=("gpu",))))
            # The front runs none of them; the worker claims two at a time.
            first = await wait_for(lambda: [r for r in map(front.get, ids) if r.status == "running"], 30)
            assert {r.worker.split("/")[0] for r in first if r.worker} == {"w1"}
            [listed] = workers(relay_home)
            assert (listed["name"], listed["slots"], listed["labels"], listed["agents"]) == (
                "w1",
                2,
                ["gpu"],
                ["claude"],
            )
            assert listed["state"] == "running" and listed["running"] >= 1
            done = await front.wait(ids, "all", 60)
        assert [r.status for r in done] == ["completed"] * 4
        peak, starts = most_at_once(log)
        assert peak == 2 and sum(starts.values()) == 4
        # Stopped while it runs a job: it claims nothing more, finishes that job, and leaves.
        async with Engine(settings).running() as front:
            running = front.submit(JobRequest(agent="claude", prompt="job-last", cwd=str(workdir)))
            await wait_for(lambda: front.get(running).status == "running", 30)
            worker.send_signal(signal.SIGTERM)
            queued_after = await wait_for(
                lambda: (
                    workers(relay_home)[0]["state"] == "stopping"
                    and front.submit(JobRequest(agent="claude", prompt="job-after", cwd=str(workdir)))
                ),
                10,
            )
            rec = await front.wait_one(running, 30)
            assert rec.status == "completed"
        _, err = await anyio.to_thread.run_sync(lambda: worker.communicate(timeout=30))
        assert worker.returncode == 0, err
        assert "finishing 1 running jobs" in err
        after = Engine(settings).get(queued_after)
        assert (after.status, after.worker) == ("queued", None)  # handed to no one: it waits for the next worker
        assert workers(relay_home) == [] and workers(relay_home, "--all")[0]["state"] == "stopped"
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_relay_run_asks_for_labels_and_a_worker_with_them_runs_it_while_a_bad_label_is_refused(
    adv_settings: AdvSettings, relay_home: Path, workdir: Path, tmp_path: Path
) -> None:
    adv_settings(command=interval_agent(tmp_path / "bin", tmp_path / "log"))
    env = relay_env(relay_home, RELAY_RUN_JOBS="0")
    bad = subprocess.run(
        [RELAY, "run", "claude", "job-x", "--labels", "g p u"], env=env, cwd=workdir, capture_output=True, text=True
    )
    assert bad.returncode == 2 and "INVALID_ARGUMENT" in bad.stderr and "hint:" in bad.stderr
    worker = subprocess.Popen([RELAY, "worker", "--labels", "gpu"], env=relay_env(relay_home), cwd=workdir)
    try:
        ran = subprocess.run(
            [RELAY, "run", "claude", "job-y", "--labels", "gpu", "--retry", "on_lost_worker", "--json"],
            env=env,
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        worker.terminate()
        worker.wait(30)
    assert ran.returncode == 0, ran.stderr
    job = Engine(adv_settings()).get(json.loads(ran.stdout)["job_id"])
    assert job.request["labels"] == ["gpu"] and job.request["retry"] == "on_lost_worker"
    [ran_on] = [w for w in Store(relay_home / "relay.db").list_workers() if w.id == job.worker]
    assert ran_on.labels == ["gpu"]  # the `relay run` (RELAY_RUN_JOBS=0) queued it; the gpu worker ran it


def test_relay_workers_flags_a_worker_whose_heartbeat_is_older_than_its_lease(relay_home: Path) -> None:
    store = Store(relay_home / "relay.db")
    store.register_worker(WorkerInfo("gone/1", "gone", "h", 1, 1, "b", None, (), 1, 0.01))
    store.register_worker(WorkerInfo("fresh/1", "fresh", "h", 2, 1, "b", ("codex",), ("gpu",), 3, 600.0))
    time.sleep(0.05)
    listed = {w["name"]: w for w in workers(relay_home)}
    assert (listed["gone"]["stale"], listed["fresh"]["stale"]) == (True, False)
    assert store.get_worker("fresh/1") is not None and store.get_worker("nobody") is None
    table = subprocess.run([RELAY, "workers"], env=relay_env(relay_home), capture_output=True, text=True, check=True)
    [gone_line] = [line for line in table.stdout.splitlines() if line.startswith("gone")]
    assert "STALE" in gone_line and "codex / gpu" in table.stdout


def test_a_worker_on_postgresql_names_its_store_without_the_password_in_its_first_line(
    relay_home: Path, workdir: Path, pg_url: str
) -> None:
    url = pg_url.replace("postgres@", "postgres:not-to-be-shown@")  # the test server trusts: any password works
    worker = subprocess.Popen(
        [RELAY, "worker", "--name", "w-pg"],
        env=relay_env(relay_home) | {"RELAY_STORE": url},
        cwd=str(workdir),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stderr is not None
        first = worker.stderr.readline()
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
    assert first.startswith("relay worker w-pg:"), first
    assert f"store {pg_url} (" in first and "not-to-be-shown" not in first and "relay.db" not in first
