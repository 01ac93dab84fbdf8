"""The engine with real processes of the fake claude: kills leave nothing behind, restarts lose nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from relay.jobs.bounds import spare_folders
from relay.jobs.engine import Engine, JobRequest
from relay.runtime import procinfo
from relay.runtime.folders import MAKING_PREFIX, SPARE_PREFIX
from relay.store import Store
from tests.conftest import SettingsFactory

pytestmark = pytest.mark.anyio


async def wait_for_file(path: Path, timeout: float = 10) -> str:
    with anyio.fail_after(timeout):
        while not path.exists() or not path.read_text().strip():
            await anyio.sleep(0.02)
    return path.read_text()


async def test_a_sync_job_of_the_fake_cli_completes(make_settings: SettingsFactory, workdir: Path) -> None:
    async with Engine(make_settings()).running() as engine:
        job_id = engine.submit(JobRequest(agent="claude", prompt="hi", cwd=str(workdir)))
        with anyio.fail_after(20):
            rec = await engine.wait_one(job_id, 20)
    assert rec.status == "completed" and rec.exit_code == 0


@pytest.mark.parametrize("how", ["cancel", "timeout"])
async def test_cancel_and_timeout_leave_no_process_of_the_group(
    make_settings: SettingsFactory, workdir: Path, tmp_path: Path, reap_groups: list[int], how: str
) -> None:
    pidfile = tmp_path / "pids"
    prompt = f"work [[fake:hang,ignore_term,grandchild,pidfile={pidfile}]]"
    timeout = 1.5 if how == "timeout" else None
    async with Engine(make_settings(RELAY_KILL_GRACE_S="0.3")).running() as engine:
        job_id = engine.submit(JobRequest(agent="claude", prompt=prompt, cwd=str(workdir), timeout_s=timeout))
        pids = [int(p) for p in (await wait_for_file(pidfile)).split()]
        rec = engine.get(job_id)
        assert rec.pid is not None
        reap_groups.append(rec.pid)
        assert len(pids) == 2 and all(procinfo.is_alive(p, None) for p in pids)
        with anyio.fail_after(20):
            rec = await engine.cancel(job_id) if how == "cancel" else await engine.wait_one(job_id, 20)
    assert rec.status == ("cancelled" if how == "cancel" else "timed_out")
    assert rec.pid is not None and procinfo.group_members(rec.pid) == []
    assert not any(procinfo.is_alive(p, None) for p in pids)


async def test_a_grandchild_left_by_a_finished_job_is_reaped(
    make_settings: SettingsFactory, workdir: Path, tmp_path: Path, reap_groups: list[int]
) -> None:
    pidfile = tmp_path / "pids"
    async with Engine(make_settings()).running() as engine:
        job_id = engine.submit(
            JobRequest(agent="claude", prompt=f"x [[fake:grandchild,pidfile={pidfile}]]", cwd=str(workdir))
        )
        with anyio.fail_after(20):
            rec = await engine.wait_one(job_id, 20)
    assert rec.pid is not None
    reap_groups.append(rec.pid)
    pids = [int(p) for p in pidfile.read_text().split()]
    assert rec.status == "completed"
    with anyio.fail_after(5):
        while any(procinfo.is_alive(p, None) for p in pids):
            await anyio.sleep(0.02)


async def test_a_relay_killed_with_sigkill_mid_job_finishes_the_job_after_restart(
    make_settings: SettingsFactory, workdir: Path, relay_home: Path, tmp_path: Path
) -> None:
    settings = make_settings()
    tee = tmp_path / "tee"
    pidfile = tmp_path / "pids"
    prompt = f"survive [[fake:sleep=1.5,flood=2,tee={tee},pidfile={pidfile}]]"
    env = dict(os.environ, RELAY_HOME=str(relay_home))
    relay = subprocess.Popen(
        [str(Path(sys.executable).with_name("relay")), "run", "claude", prompt, "--cwd", str(workdir)],
        env=env,
        cwd=str(workdir),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await wait_for_file(pidfile, 20)
        store = Store(settings.db_path)
        with anyio.fail_after(10):
            while not store.list_jobs(statuses=("running",)):
                await anyio.sleep(0.02)
        relay.send_signal(signal.SIGKILL)
        relay.wait(10)
    finally:
        if relay.poll() is None:
            relay.kill()
    (job,) = store.list_jobs()
    assert job.status == "running" and job.pid is not None
    assert procinfo.is_alive(job.pid, job.pid_start_ticks)  # the job outlived its relay
    async with Engine(settings).running() as engine:
        with anyio.fail_after(30):
            rec = await engine.wait_one(job.id, 30)
        assert rec.status == "completed" and rec.exit_code == 0
        pages: list[str] = []
        offset = 0
        while True:
            page = engine.read_output(job.id, "events", offset, 300_000)
            pages.append(page["text"])
            if page["next_offset"] is None:
                break
            offset = page["next_offset"]
        final = engine.read_output(job.id, "final", 0, 100)
    written = tee.read_bytes()
    assert len(written) > 2 * 1024 * 1024
    assert (settings.jobs_dir / job.id / "stdout").read_bytes() == written
    assert "".join(pages).encode() == written
    assert final["text"] == "hi from mock"


async def test_a_job_that_ended_while_relay_was_down_is_finalized_with_its_exit_status(
    make_settings: SettingsFactory, workdir: Path, relay_home: Path, tmp_path: Path
) -> None:
    settings = make_settings()
    pidfile = tmp_path / "pids"
    prompt = f"x [[fake:sleep=1.5,exit=3,pidfile={pidfile}]]"
    env = dict(os.environ, RELAY_HOME=str(relay_home))
    relay = subprocess.Popen(
        [str(Path(sys.executable).with_name("relay")), "run", "claude", prompt, "--cwd", str(workdir)],
        env=env,
        cwd=str(workdir),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pid = int((await wait_for_file(pidfile, 20)).split()[0])
    store = Store(settings.db_path)
    with anyio.fail_after(10):
        while not store.list_jobs(statuses=("running",)):
            await anyio.sleep(0.02)
    relay.send_signal(signal.SIGKILL)
    relay.wait(10)
    with anyio.fail_after(10):
        while procinfo.is_alive(pid, None):
            await anyio.sleep(0.02)
    (job,) = store.list_jobs()
    async with Engine(settings).running() as engine:
        # The agent has exited; its shim may still be writing the exit status, so the restarted
        # engine either finalizes the job from its files at once or re-attaches for a moment.
        with anyio.fail_after(10):
            rec = await engine.wait_one(job.id, 10)
    assert rec.status == "completed"  # a valid result line followed by exit 3 is still the answer
    assert rec.exit_code == 3


def making_folders(jobs: Path) -> set[str]:
    """The spare job folders still being made."""
    return {p.name for p in jobs.iterdir() if p.name.startswith(MAKING_PREFIX)}


def ready_folders(jobs: Path) -> set[str]:
    """The spare job folders ready to be taken (not those still being made, which get renamed)."""
    return {p.name for p in jobs.iterdir() if p.name.startswith(SPARE_PREFIX) and not p.name.startswith(MAKING_PREFIX)}


async def test_a_job_in_a_folder_made_ahead_keeps_every_byte_and_its_exit_status(
    make_settings: SettingsFactory, workdir: Path, relay_home: Path
) -> None:
    jobs = relay_home / "jobs"
    settings = make_settings()
    async with Engine(settings).running() as engine:
        first = engine.submit(JobRequest(agent="claude", prompt="same", cwd=str(workdir)))
        with anyio.fail_after(20):
            await engine.wait_one(first, 20)
            # Made in a worker thread once the first job ended. Until the pool is full that thread makes more,
            # and a job takes the newest: the set of spares is read only once none is being made.
            while len(ready_folders(jobs)) < spare_folders(settings) or making_folders(jobs):
                await anyio.sleep(0.01)
        spares = ready_folders(jobs)
        second = engine.submit(JobRequest(agent="claude", prompt="same", cwd=str(workdir)))
        assert len(spares - {p.name for p in jobs.iterdir()}) == 1  # the second job took one
        with anyio.fail_after(20):
            rec = await engine.wait_one(second, 20)
        env = engine.envelope(second)
    assert rec.status == "completed" and rec.exit_code == 0 and rec.pid is not None
    made, ahead = engine.files(first), engine.files(second)
    assert ahead.stdout.read_bytes() == made.stdout.read_bytes() != b""
    assert ahead.read_pid() == rec.pid and ahead.read_exit_code() == 0
    assert (ahead.dir / "spawning").exists() and not (ahead.dir / ".spawning").exists()
    assert env["output"] == engine.envelope(first)["output"] != ""
    assert (ahead.dir / "transcript.txt").read_text() == (made.dir / "transcript.txt").read_text()
