"""Ownership: every job row, queued ones too, belongs to a live relay; another relay on the same home adopts
a job only when that owner is provably dead, atomically, once. A job never runs twice."""

from __future__ import annotations

import os
import signal
import subprocess
from collections import Counter
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from relay.jobs.engine import Engine
from relay.runtime import procinfo
from relay.store import Store
from tests.reliability.conftest import RELAY, AdvSettings, record, relay_env

pytestmark = pytest.mark.anyio

BURST = 40


def counting_agent(folder: Path, runlog: Path) -> Path:
    """A /bin/sh agent that appends its prompt (`job-N`) to `runlog`, works briefly, then answers."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "counting-claude"
    stream = (
        '{"type":"system","subtype":"init","session_id":"c0c0c0c0-0000-4000-8000-000000000001","model":"m"}',
        '{"type":"result","subtype":"success","is_error":false,"result":"done","num_turns":1,'
        '"session_id":"c0c0c0c0-0000-4000-8000-000000000001","total_cost_usd":0,"usage":{"input_tokens":1,"output_tokens":1}}',
    )
    lines = " ".join(f"'{line}'" for line in stream)
    path.write_text(
        "#!/bin/sh\n"
        f'for a; do case "$a" in job-*) echo "$a" >> {runlog};; esac; done\n'
        "sleep 0.2\n"
        f"printf '%s\\n' {lines}\n"
    )
    path.chmod(0o755)
    return path


def runs(runlog: Path) -> Counter[str]:
    return Counter(runlog.read_text().split()) if runlog.exists() else Counter()


async def test_two_relays_and_a_relay_run_on_one_home_during_a_burst_run_every_job_exactly_once(
    adv_settings: AdvSettings, relay_home: Path, workdir: Path, tmp_path: Path
) -> None:
    runlog = tmp_path / "runs.log"
    agent = counting_agent(tmp_path / "bin", runlog)
    settings = adv_settings("[jobs]\nmax_concurrent = 1\nmax_concurrent_per_agent = 1\n", command=agent)
    env = relay_env(relay_home)
    first = StdioServerParameters(command=RELAY, args=["serve"], env=env, cwd=str(workdir))
    second = StdioServerParameters(command=RELAY, args=["serve"], env=env, cwd=str(workdir))
    with anyio.fail_after(120):
        async with Client(first) as a:
            ids: list[str] = []

            async def submit(i: int) -> None:
                result = await a.call_tool("delegate", {"prompt": f"job-{i}", "cwd": str(workdir), "mode": "async"})
                assert result.structured_content is not None, result
                ids.append(result.structured_content["job_id"])

            async with anyio.create_task_group() as tg:
                for i in range(BURST):
                    tg.start_soon(submit, i)
            store = Store(settings.db_path)
            queued = sum(1 for j in store.list_jobs(statuses=("queued",), limit=1000))
            assert queued >= BURST // 4  # the burst really is waiting in the first relay's queue
            # A second relay starts (it recovers at start) and a `relay run` runs its own job meanwhile.
            run = subprocess.Popen(
                [RELAY, "run", "claude", "job-run", "--cwd", str(workdir)],
                env=env,
                cwd=str(workdir),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            async with Client(second) as b:
                status = await b.call_tool("status", {})
                assert not status.is_error
                waited = await a.call_tool("job_wait", {"job_ids": ids, "mode": "all", "timeout_s": 90})
                assert waited.structured_content is not None and waited.structured_content["done"] is True
            _out, err = await anyio.to_thread.run_sync(run.communicate)
            assert run.returncode == 0, err.decode()
    counts = runs(runlog)
    expected = Counter({f"job-{i}": 1 for i in range(BURST)} | {"job-run": 1})
    record("ownership", "burst_runs", {"jobs": BURST + 1, "ran_twice": sum(1 for c in counts.values() if c > 1)})
    assert counts == expected
    statuses = Counter(j.status for j in store.list_jobs(limit=1000))
    assert statuses == Counter({"completed": BURST + 1})


async def test_a_queued_job_records_its_owner_and_is_adopted_only_once_its_owner_is_dead(
    adv_settings: AdvSettings, relay_home: Path, workdir: Path, tmp_path: Path
) -> None:
    runlog = tmp_path / "runs.log"
    settings = adv_settings(command=counting_agent(tmp_path / "bin", runlog))
    # A relay in another process records a queued job, then dies before starting it.
    owner = subprocess.Popen(["sleep", "60"])
    try:
        store = Store(settings.db_path)
        ticks = procinfo.start_ticks(owner.pid)
        store.insert_job(
            "00000000000000aa",
            "claude",
            "cli",
            {"agent": "claude", "prompt": "job-a", "cwd": str(workdir)},
            None,
            str(workdir),
            owner=(owner.pid, ticks),
        )
        rec = store.get_job("00000000000000aa")
        assert rec is not None and (rec.owner_pid, rec.owner_start_ticks) == (owner.pid, ticks)
        async with Engine(settings).running():
            pass  # its owner lives: not ours to run
        kept = store.get_job("00000000000000aa")
        assert kept is not None and (kept.status, kept.owner_pid) == ("queued", owner.pid)
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        # Two relays find the owner dead: exactly one claim wins.
        dead = store.get_job("00000000000000aa")
        assert dead is not None
        claims = [store.claim_job(dead, os.getpid(), 1), store.claim_job(dead, os.getpid() + 1, 2)]
        assert claims == [True, False]
    finally:
        owner.kill()
        owner.wait()
    # The winner (this process, start ticks 1: not a live relay) is dead in turn; the next engine adopts and runs it once.
    async with Engine(settings).running() as engine:
        rec = await engine.wait_one("00000000000000aa", 30)
    assert rec.status == "completed"
    assert runs(runlog) == Counter({"job-a": 1})
