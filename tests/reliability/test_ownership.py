"""Ownership: a job runs only under a claim of a live worker; another relay on the same home takes a claim
over only when its worker is provably dead, atomically, once. A job never runs twice."""

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
from relay.store import Store, WorkerInfo
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


async def test_a_claimed_job_is_taken_over_only_once_its_worker_is_dead_and_runs_once(
    adv_settings: AdvSettings, relay_home: Path, workdir: Path, tmp_path: Path
) -> None:
    runlog = tmp_path / "runs.log"
    settings = adv_settings(command=counting_agent(tmp_path / "bin", runlog))
    # A worker in another process of this host claims a queued job, then dies before starting it.
    owner = subprocess.Popen(["sleep", "60"])
    try:
        store = Store(settings.db_path)
        store.insert_job(
            "00000000000000aa",
            "claude",
            "cli",
            {"agent": "claude", "prompt": "job-a", "cwd": str(workdir)},
            None,
            str(workdir),
        )
        other = WorkerInfo(
            "other/1",
            "other",
            "here",
            owner.pid,
            procinfo.start_ticks(owner.pid),
            procinfo.host_id(),
            None,
            (),
            1,
            60.0,
        )
        store.register_worker(other)
        won = store.claim(other, free=1, max_total=8, per_agent=lambda _: 4)
        assert [(job_id, epoch) for job_id, _, epoch in won] == [("00000000000000aa", 1)]
        async with Engine(settings).running():
            pass  # its worker lives: not ours to run
        kept = store.get_job("00000000000000aa")
        assert kept is not None and (kept.status, kept.worker, kept.owner_pid) == ("queued", "other/1", owner.pid)
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        # Two relays find the worker dead: exactly one take-over wins, and the loser's epoch is stale.
        gone = [
            WorkerInfo(f"gone/{n}", "gone", "here", os.getpid(), n, procinfo.host_id(), None, (), 1, 60.0)
            for n in (1, 2)
        ]
        assert [store.take_over("00000000000000aa", 1, w) for w in gone] == [2, None]
    finally:
        owner.kill()
        owner.wait()
    # The winner (this process, start ticks 1: not a live relay) is dead in turn; the next engine hands the
    # job back to the queue, claims it and runs it once.
    async with Engine(settings).running() as engine:
        rec = await engine.wait_one("00000000000000aa", 30)
    assert rec.status == "completed"
    assert rec.epoch == 5  # claimed (1), taken over twice (2, 3), handed back (4), claimed again (5)
    assert runs(runlog) == Counter({"job-a": 1})
