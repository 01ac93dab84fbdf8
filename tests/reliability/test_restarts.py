"""Restarts: relay killed with SIGKILL at any moment of a job's life; the next relay on the same RELAY_HOME
brings every job to its right final status with its complete output, and leaves nothing running."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from relay.jobs.engine import Engine
from relay.runtime import procinfo
from relay.store import Store
from tests.reliability.conftest import (
    RELAY,
    AdvSettings,
    read_pids,
    record,
    relay_env,
    settle,
    still_running,
    wait_for,
)

pytestmark = pytest.mark.anyio


def prompt(name: str, tmp: Path, directives: str) -> str:
    return f"job {name} [[fake:{directives},tee={tmp / (name + '.tee')},pidfile={tmp / (name + '.pids')}]]"


def leaders(pidfile: Path) -> int:
    return pidfile.read_text().count("leader ") if pidfile.exists() else 0


def job_by_name(store: Store, name: str) -> Any:
    matches = [j for j in store.list_jobs(limit=1000) if str(j.request.get("prompt", "")).startswith(f"job {name} ")]
    assert len(matches) == 1, f"{len(matches)} jobs named {name}"
    return matches[0]


async def test_a_stdio_server_killed_mid_flight_loses_no_job_and_no_byte(
    adv_settings: AdvSettings, relay_home: Path, workdir: Path, tmp_path: Path, reap_groups: list[int]
) -> None:
    settings = adv_settings()
    jobs = {
        "async_flood": "sleep=1.5,flood=4",
        "ends_while_relay_is_down": "sleep=1.2,pattern=64,exit=3",
        "sync_in_flight": "sleep=1.5,pattern=32",
        "being_waited_on": "sleep=2,pattern=16",
        "first_second": "sleep=0.5,pattern=16",
        "reads_stdin": "stdin,sleep=1,pattern=4",
    }
    params = StdioServerParameters(command=RELAY, args=["serve"], env=relay_env(relay_home), cwd=str(workdir))
    server_pid = 0
    with anyio.fail_after(60):
        try:
            async with Client(params) as client:
                status = await client.call_tool("status", {})
                assert status.structured_content is not None
                server_pid = int(status.structured_content["pid"])
                ids: dict[str, str] = {}
                for name in ("async_flood", "ends_while_relay_is_down", "being_waited_on", "reads_stdin"):
                    result = await client.call_tool(
                        "delegate", {"prompt": prompt(name, tmp_path, jobs[name]), "cwd": str(workdir), "mode": "async"}
                    )
                    assert result.structured_content is not None
                    ids[name] = result.structured_content["job_id"]

                async def quietly(tool: str, args: dict[str, Any]) -> None:
                    with contextlib.suppress(Exception):  # the server dies under this call: that is the point
                        await client.call_tool(tool, args)

                async with anyio.create_task_group() as tg:
                    sync_args = {"prompt": prompt("sync_in_flight", tmp_path, jobs["sync_in_flight"]), "mode": "sync"}
                    tg.start_soon(quietly, "delegate", {**sync_args, "cwd": str(workdir)})
                    tg.start_soon(quietly, "job_wait", {"job_ids": [ids["being_waited_on"]], "timeout_s": 60})
                    for name in ("async_flood", "ends_while_relay_is_down", "sync_in_flight", "being_waited_on"):
                        await wait_for(lambda n=name: leaders(tmp_path / f"{n}.pids"), 20)
                    await client.call_tool(
                        "delegate",
                        {"prompt": prompt("first_second", tmp_path, jobs["first_second"]), "cwd": str(workdir)}
                        | {"mode": "async"},
                    )
                    os.kill(server_pid, signal.SIGKILL)
                    with anyio.move_on_after(5):
                        await wait_for(lambda: not procinfo.is_alive(server_pid, None), 5)
                    tg.cancel_scope.cancel()
        except Exception:
            pass  # the client notices its server vanished; what matters is what the next relay finds
    assert server_pid and not procinfo.is_alive(server_pid, None)

    store = Store(settings.db_path)
    before = {name: job_by_name(store, name).status for name in jobs}
    assert "running" in before.values()  # the kill really caught jobs mid-flight

    params = StdioServerParameters(command=RELAY, args=["serve"], env=relay_env(relay_home), cwd=str(workdir))
    with anyio.fail_after(60):
        async with Client(params) as client:
            all_ids = [job_by_name(store, name).id for name in jobs]
            waited = await client.call_tool("job_wait", {"job_ids": all_ids, "mode": "all", "timeout_s": 45})
    assert waited.structured_content is not None and waited.structured_content["done"] is True

    figures: dict[str, Any] = {}
    for name in jobs:
        rec = job_by_name(store, name)
        assert rec.pid is not None
        reap_groups.append(rec.pid)
        tee = (tmp_path / f"{name}.tee").read_bytes()
        stored = (settings.jobs_dir / rec.id / "stdout").read_bytes()
        group_left, pids_left = await settle(rec.pid, read_pids(tmp_path / f"{name}.pids"))
        figures[name] = {
            "status_at_kill": before[name],
            "final": rec.status,
            "bytes_written": len(tee),
            "bytes_lost": len(tee) - len(stored),
            "runs": leaders(tmp_path / f"{name}.pids"),
            "processes_left": len(group_left) + len(pids_left),
        }
    record("restarts", "stdio_server_sigkill", figures)
    for name, fig in figures.items():
        rec = job_by_name(store, name)
        assert rec.status == "completed", (name, rec.error)
        assert rec.exit_code == (3 if name == "ends_while_relay_is_down" else 0)
        assert (settings.jobs_dir / rec.id / "stdout").read_bytes() == (tmp_path / f"{name}.tee").read_bytes()
        assert fig["runs"] == 1 and fig["processes_left"] == 0
    assert store.list_jobs(statuses=("queued", "running")) == []


DYING_RELAY = """
import os, signal, sys
import anyio
from relay.config import load_settings
from relay.jobs.engine import Engine, JobRequest
from relay.runtime import supervisor

point, prompt, cwd = sys.argv[1:4]

def spawn(invocation, files):
    if point == "before_spawn":
        os.kill(os.getpid(), signal.SIGKILL)
    proc = supervisor.spawn(invocation, files)
    os.kill(os.getpid(), signal.SIGKILL)  # after_spawn: the process runs, relay never recorded its pid
    return proc

async def main():
    async with Engine(load_settings(), spawn=spawn).running() as engine:
        engine.submit(JobRequest(agent="claude", prompt=prompt, cwd=cwd))
        await anyio.sleep(60)

anyio.run(main)
"""


@pytest.mark.parametrize("point", ["before_spawn", "after_spawn"])
async def test_a_relay_killed_in_the_first_instant_of_a_job_runs_it_exactly_once_after_restart(
    adv_settings: AdvSettings, relay_home: Path, workdir: Path, tmp_path: Path, reap_groups: list[int], point: str
) -> None:
    settings = adv_settings()
    text = prompt("first_instant", tmp_path, "sleep=0.5,pattern=32")
    dying = subprocess.run(
        [sys.executable, "-c", DYING_RELAY, point, text, str(workdir)],
        env=relay_env(relay_home),
        cwd=str(workdir),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    assert dying.returncode == -signal.SIGKILL, dying.stderr
    pidfile = tmp_path / "first_instant.pids"
    if point == "after_spawn":
        await wait_for(lambda: leaders(pidfile), 20)  # the orphaned first run is under way
    async with Engine(settings).running() as engine:
        (job,) = engine.list()
        with anyio.fail_after(30):
            rec = await engine.wait_one(job.id, 30)
            while leaders(pidfile) and still_running(read_pids(pidfile)):
                await anyio.sleep(0.05)  # let any stray earlier run finish, to count runs fairly
    if rec.pid is not None:
        reap_groups.append(rec.pid)
    tee = (tmp_path / "first_instant.tee").read_bytes()
    stored = (settings.jobs_dir / job.id / "stdout").read_bytes()
    record("restarts", f"killed_{point}", {"final": rec.status, "runs": leaders(pidfile), "stdout_bytes": len(stored)})
    assert rec.status == "completed"
    assert leaders(pidfile) == 1, "the agent ran more than once: relay lost track of the first run"
    assert stored == tee
    assert still_running(read_pids(pidfile)) == []


async def test_a_relay_run_killed_as_soon_as_its_job_is_recorded_finishes_the_job_after_restart(
    adv_settings: AdvSettings, relay_home: Path, workdir: Path, tmp_path: Path, reap_groups: list[int]
) -> None:
    settings = adv_settings()
    text = prompt("recorded", tmp_path, "sleep=0.5,pattern=32")
    runner = subprocess.Popen(
        [RELAY, "run", "claude", text, "--cwd", str(workdir)],
        env=relay_env(relay_home),
        cwd=str(workdir),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        store = Store(settings.db_path)
        await wait_for(lambda: store.list_jobs(), 30, step=0.002)
        runner.send_signal(signal.SIGKILL)
        runner.wait(10)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait(10)
    (job,) = store.list_jobs()
    at_kill = job.status
    async with Engine(settings).running() as engine:
        with anyio.fail_after(30):
            rec = await engine.wait_one(job.id, 30)
    pidfile = tmp_path / "recorded.pids"
    if rec.pid is not None:
        reap_groups.append(rec.pid)
    record("restarts", "relay_run_killed_at_insert", {"status_at_kill": at_kill, "final": rec.status})
    assert rec.status == "completed"
    assert leaders(pidfile) == 1
    assert (settings.jobs_dir / job.id / "stdout").read_bytes() == (tmp_path / "recorded.tee").read_bytes()
