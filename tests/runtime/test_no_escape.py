"""No process escapes a job's kill: helpers that left the job's process group with setsid() die with it.

The job's shim is a child subreaper, so what the agent orphans re-parents to the shim, which kills
everything under it before it exits; relay's cancel and timeouts signal the shim's whole tree.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from relay.agents.base import Invocation
from relay.config import Settings, load_settings
from relay.jobs.engine import Engine, JobRequest
from relay.runtime import procinfo, supervisor
from relay.runtime.supervisor import JobFiles

pytestmark = pytest.mark.anyio

SETSID_AGENT = Path(__file__).resolve().parent / "setsid_agent"
# SIGTERM grace for these jobs: short, the sleepers ignore SIGTERM anyway.
GRACE_S = 0.3
# Bound on any one job here (generous: the test machine is shared).
JOB_BOUND_S = 30


@pytest.fixture
def settings(relay_home: Path, workdir: Path) -> Settings:
    (relay_home / "config.toml").write_text(f'[agents.claude]\ncommand = "{SETSID_AGENT}"\n')
    env = {
        "RELAY_HOME": str(relay_home),
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(relay_home),
        "RELAY_KILL_GRACE_S": str(GRACE_S),
    }
    return load_settings(env, cwd=workdir)


def sleepers(pidfile: Path) -> dict[int, int]:
    """pid -> start ticks of the sleepers the fake recorded."""
    found: dict[int, int] = {}
    for line in pidfile.read_text().splitlines():
        pid, _, ticks = line.partition(" ")
        if ticks:
            found[int(pid)] = int(ticks)
    return found


def alive(pids: dict[int, int]) -> list[int]:
    return [pid for pid, ticks in pids.items() if procinfo.is_alive(pid, ticks)]


async def wait_ready(pidfile: Path, job_pgid: Callable[[], int | None]) -> dict[int, int]:
    with anyio.fail_after(JOB_BOUND_S):
        while not (pidfile.exists() and "ready" in pidfile.read_text()):
            await anyio.sleep(0.02)
    pids = sleepers(pidfile)
    assert len(pids) == 2 and len(alive(pids)) == 2
    pgid = job_pgid()
    assert pgid is not None
    for pid in pids:  # really outside the job's process group and session (the shim leads both)
        assert os.getpgid(pid) != pgid and os.getsid(pid) != pgid
    return pids


def kill_leftovers(pids: dict[int, int]) -> None:
    """So that a failing test leaks nothing."""
    for pid in alive(pids):
        os.kill(pid, 9)


async def test_setsid_helpers_die_when_the_job_is_cancelled(settings: Settings, workdir: Path, tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    pids: dict[int, int] = {}
    try:
        async with Engine(settings).running() as engine:
            job_id = engine.submit(
                JobRequest(agent="claude", prompt=f"x [[setsid:hang,pidfile={pidfile}]]", cwd=str(workdir))
            )
            pids = await wait_ready(pidfile, lambda: engine.get(job_id).pid)
            with anyio.fail_after(JOB_BOUND_S):
                rec = await engine.cancel(job_id)
            assert (rec.status, alive(pids)) == ("cancelled", [])
            assert rec.pid is not None and procinfo.job_processes(rec.pid) == []
    finally:
        kill_leftovers(pids)


async def test_setsid_helpers_die_when_the_job_times_out(settings: Settings, workdir: Path, tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    pids: dict[int, int] = {}
    try:
        async with Engine(settings).running() as engine:
            job_id = engine.submit(
                JobRequest(
                    agent="claude", prompt=f"x [[setsid:hang,pidfile={pidfile}]]", cwd=str(workdir), timeout_s=1.5
                )
            )
            pids = await wait_ready(pidfile, lambda: engine.get(job_id).pid)
            rec = await engine.wait_one(job_id, JOB_BOUND_S)
            assert (rec.status, alive(pids)) == ("timed_out", [])
    finally:
        kill_leftovers(pids)


async def test_setsid_helpers_left_after_the_agent_exits_die_before_the_job_ends(
    settings: Settings, workdir: Path, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pids"
    pids: dict[int, int] = {}
    try:
        async with Engine(settings).running() as engine:
            job_id = engine.submit(
                JobRequest(agent="claude", prompt=f"x [[setsid:exit,pidfile={pidfile}]]", cwd=str(workdir))
            )
            rec = await engine.wait_one(job_id, JOB_BOUND_S)
            pids = sleepers(pidfile)
            assert len(pids) == 2
            assert (rec.status, rec.exit_code, alive(pids)) == ("completed", 0, [])
            assert engine.envelope(job_id)["output"] == "left two sleepers behind"
    finally:
        kill_leftovers(pids)


async def test_a_reattached_job_still_kills_its_setsid_helpers(tmp_path: Path, workdir: Path) -> None:
    """After a relay restart the shim is no longer relay's child, and is still the subreaper."""
    pidfile = tmp_path / "pids"
    files = JobFiles(tmp_path / "job")
    inv_argv = (str(SETSID_AGENT), "-p", f"x [[setsid:hang,pidfile={pidfile}]]")
    spawned = supervisor.spawn(Invocation(argv=inv_argv, env=dict(os.environ), cwd=str(workdir)), files)
    pids: dict[int, int] = {}
    try:
        pids = await wait_ready(pidfile, lambda: spawned.pid)
        attached = supervisor.attach(spawned.pid, spawned.start_ticks, files)
        with anyio.fail_after(JOB_BOUND_S):
            await attached.kill_group(GRACE_S)
        assert alive(pids) == [] and procinfo.group_members(spawned.pid) == []
        attached.close()
    finally:
        spawned.close()
        kill_leftovers(pids)
