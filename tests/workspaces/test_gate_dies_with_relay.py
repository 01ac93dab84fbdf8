"""A land's test gate belongs to the runtime like a job: a relay killed mid-gate leaves it to the next relay, whose
start-up sweep kills its whole group; and a gate that ends takes what it started in the background with it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from relay.jobs.engine import Engine, JobRequest
from relay.workspaces.land import run_test
from tests.conftest import SettingsFactory
from tests.workspaces.slow import alive

pytestmark = pytest.mark.anyio

WAIT_S = 30

LANDING_RELAY = """
import sys
import anyio
from relay.config import load_settings
from relay.jobs.engine import Engine

async def main():
    async with Engine(load_settings()).running() as engine:
        await engine.land(sys.argv[1], test_command=sys.argv[2])

anyio.run(main)
"""


def read_pids(path: Path, relay: subprocess.Popen[bytes] | None = None) -> list[int]:
    """The pids the gate wrote (its shell, and a child it left in the background), once it has written both."""
    deadline = time.monotonic() + WAIT_S
    while True:
        words = path.read_text().split() if path.is_file() else []
        if len(words) == 2 and path.read_text().endswith("\n"):
            return [int(w) for w in words]
        assert relay is None or relay.poll() is None, "relay ended before its gate started"
        assert time.monotonic() < deadline, "the gate never started"
        time.sleep(0.01)


def wait_gone(pids: list[int]) -> list[int]:
    deadline = time.monotonic() + 5
    while [p for p in pids if alive(p)] and time.monotonic() < deadline:
        time.sleep(0.02)
    return [p for p in pids if alive(p)]


async def test_a_gate_whose_relay_was_killed_is_killed_by_the_next_relay(
    make_settings: SettingsFactory, relay_home: Path, workdir: Path, repo: Path
) -> None:
    pids_file = workdir.parent / "gate.pids"
    gate = f"sleep 600 & echo $$ $! > {pids_file}; wait"
    settings = make_settings(f'[workspaces]\ntest_command = "{gate}"\n')  # the person's own gate: runs unasked
    async with Engine(settings).running() as engine:
        job_id = engine.submit(JobRequest(agent="claude", prompt="look", cwd=str(repo), workspace="worktree"))
        with anyio.fail_after(WAIT_S):
            assert (await engine.wait_one(job_id, WAIT_S)).status == "completed"

    env = {"RELAY_HOME": str(relay_home), "HOME": str(relay_home), "PATH": os.environ.get("PATH", "")}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    relay = subprocess.Popen([sys.executable, "-c", LANDING_RELAY, job_id, gate], env=env, cwd=repo)
    pids: list[int] = []
    try:
        pids = read_pids(pids_file, relay)
        os.kill(relay.pid, 9)  # relay alone: its gate runs on
        relay.wait(WAIT_S)
        assert [p for p in pids if alive(p)] == pids

        async with Engine(settings).running() as engine:  # the next relay, and its start-up sweep
            with anyio.fail_after(WAIT_S):
                await anyio.to_thread.run_sync(engine.prune_worktrees)
        assert wait_gone(pids) == []
    finally:
        if relay.poll() is None:
            relay.kill()
            relay.wait()
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, 9)


def test_what_a_gate_leaves_running_in_the_background_ends_with_it(workdir: Path) -> None:
    pids_file = workdir / "gate.pids"
    result = run_test(f"sleep 600 & echo $$ $! > {pids_file}", workdir, workdir / "log", 30)
    pids = read_pids(pids_file)
    try:
        assert result["passed"]
        assert wait_gone(pids) == []
    finally:
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
