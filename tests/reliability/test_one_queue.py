"""One queue for every relay on a home: a job starts only under a claim won in the store, the limits hold
across processes, and a job whose worker is lost ends once (or runs again when it asked to)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from relay.errors import ErrorCode
from relay.events import Event
from relay.jobs.engine import Engine
from relay.jobs.request import JobRequest
from relay.store import Store, WorkerInfo
from tests.reliability.conftest import RELAY, AdvSettings, record, relay_env, wait_for

pytestmark = pytest.mark.anyio

JOBS = 100
LIMIT = 2


def interval_agent(folder: Path, log: Path, work_s: float = 0.2) -> Path:
    """A /bin/sh claude that logs `start job-N <ns>` and `end job-N <ns>` around `work_s` of work, then answers."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "interval-claude"
    sid = "c0c0c0c0-0000-4000-8000-000000000002"
    stream = (
        f'{{"type":"system","subtype":"init","session_id":"{sid}","model":"m"}}',
        '{"type":"result","subtype":"success","is_error":false,"result":"done","num_turns":1,'
        f'"session_id":"{sid}","total_cost_usd":0,"usage":{{"input_tokens":1,"output_tokens":1}}}}',
    )
    lines = " ".join(f"'{line}'" for line in stream)
    path.write_text(
        "#!/bin/sh\n"
        'for a; do case "$a" in job-*) J="$a";; esac; done\n'
        f'echo "start $J $(date +%s%N)" >> {log}\n'
        f"sleep {work_s}\n"
        f'echo "end $J $(date +%s%N)" >> {log}\n'
        f"printf '%s\\n' {lines}\n"
    )
    path.chmod(0o755)
    return path


def most_at_once(log: Path) -> tuple[int, Counter[str]]:
    """The most jobs between their start and end at one instant, and how often each job started."""
    marks: list[tuple[int, int]] = []
    starts: Counter[str] = Counter()
    for line in log.read_text().splitlines():
        kind, job, ns = line.split()
        marks.append((int(ns), 1 if kind == "start" else -1))
        if kind == "start":
            starts[job] += 1
    now = peak = 0
    for _, step in sorted(marks, key=lambda m: (m[0], m[1])):  # an end before a start at the same instant
        now += step
        peak = max(peak, now)
    return peak, starts


@pytest.mark.parametrize("relays", [2, 4])
async def test_relays_on_one_home_never_run_more_jobs_at_once_than_the_limit(
    relays: int, adv_settings: AdvSettings, relay_home: Path, workdir: Path, tmp_path: Path
) -> None:
    log = tmp_path / "intervals.log"
    agent = interval_agent(tmp_path / "bin", log)
    settings = adv_settings(f"[jobs]\nmax_concurrent = {LIMIT}\nmax_concurrent_per_agent = {LIMIT}\n", command=agent)
    server = StdioServerParameters(command=RELAY, args=["serve"], env=relay_env(relay_home), cwd=str(workdir))
    ids: dict[int, list[str]] = {r: [] for r in range(relays)}

    async def one_relay(r: int) -> None:
        async with Client(server) as client:
            for i in range(r, JOBS, relays):
                result = await client.call_tool(
                    "delegate", {"prompt": f"job-{i}", "cwd": str(workdir), "mode": "async"}
                )
                assert result.structured_content is not None, result
                ids[r].append(result.structured_content["job_id"])
            waited = await client.call_tool("job_wait", {"job_ids": ids[r], "mode": "all", "timeout_s": 170})
            assert waited.structured_content is not None and waited.structured_content["done"] is True, waited

    started = time.monotonic()
    with anyio.fail_after(200):
        async with anyio.create_task_group() as tg:
            for r in range(relays):
                tg.start_soon(one_relay, r)
    wall = time.monotonic() - started
    peak, starts = most_at_once(log)
    record(
        "one_queue", f"{relays}_relays", {"jobs": JOBS, "limit": LIMIT, "most_at_once": peak, "wall_s": round(wall, 1)}
    )
    assert peak == LIMIT  # never more than the limit, and the limit was used
    store = Store(settings.db_path)
    failed = [(j.id, j.error) for j in store.list_jobs(limit=1000) if j.status != "completed"]
    assert failed == []
    odd = {job: n for job, n in (Counter({f"job-{i}": 1 for i in range(JOBS)}) | starts).items() if starts[job] != 1}
    assert odd == {}  # every job ran, once


async def test_a_job_queued_by_a_relay_that_died_is_run_by_another_at_once(
    adv_settings: AdvSettings, workdir: Path, tmp_path: Path
) -> None:
    log = tmp_path / "intervals.log"
    settings = adv_settings(command=interval_agent(tmp_path / "bin", log))
    # Queued, as a relay leaves it that dies before any worker claimed it.
    Store(settings.db_path).insert_job(
        "00000000000000bb",
        "claude",
        "cli",
        {"agent": "claude", "prompt": "job-q", "cwd": str(workdir)},
        None,
        str(workdir),
    )
    async with Engine(settings).running() as engine:
        rec = await engine.wait_one("00000000000000bb", 30)
    assert rec.status == "completed" and rec.epoch == 1


def far_worker(pid: int, lease_s: float) -> WorkerInfo:
    """A worker of another host (another boot id): only its lease tells whether it lives."""
    return WorkerInfo("far/1", "host-b", "host-b.example", pid, 1, "another-boot", None, (), 1, lease_s)


async def far_job(store: Store, workdir: Path, *, retry: str | None = None) -> int:
    """A job claimed and started by the far worker; returns the epoch of its claim."""
    store.insert_job(
        "00000000000000cc",
        "claude",
        "cli",
        {"agent": "claude", "prompt": "job-far", "cwd": str(workdir)},
        None,
        str(workdir),
        retry=retry,
    )
    far = far_worker(4242, 0.5)
    store.register_worker(far)
    [(_, _, epoch)] = store.claim(far, free=1, max_total=8, per_agent=lambda _: 4)
    assert store.mark_running(
        "00000000000000cc",
        pid=4242,
        pid_start_ticks=1,
        boot_id="another-boot",
        owner_pid=4242,
        owner_start_ticks=1,
        deadline_at=None,
        idle_timeout_s=None,
        epoch=epoch,
    )
    return epoch


async def test_a_job_whose_worker_of_another_host_is_lost_ends_interrupted_naming_it_and_its_late_writes_are_refused(
    adv_settings: AdvSettings, workdir: Path, tmp_path: Path
) -> None:
    settings = adv_settings(command=interval_agent(tmp_path / "bin", tmp_path / "log"), RELAY_LEASE_S="0.6")
    store = Store(settings.db_path)
    epoch = await far_job(store, workdir)
    async with Engine(settings).running():
        rec = await wait_for(lambda: (r := store.get_job("00000000000000cc")) is not None and r.is_final and r, 10)
    assert rec.status == "interrupted"
    assert rec.error is not None and rec.error["code"] == ErrorCode.INTERRUPTED.value
    assert "host-b" in rec.error["message"] and "lease of 0.5 s ran out" in rec.error["message"]
    assert "retry='on_lost_worker'" in rec.error["hint"]
    # The far worker comes back: nothing it writes under its old claim is taken.
    assert not store.add_events("00000000000000cc", 0, [Event("text", {"text": "late"})], epoch=epoch)
    late = store.finish_job(
        "00000000000000cc", "completed", exit_code=0, result={}, error=None, session_id=None, model=None, epoch=epoch
    )
    assert late is False
    again = store.get_job("00000000000000cc")
    assert again is not None and again.status == "interrupted" and store.events("00000000000000cc") == []
    [worker] = [w for w in store.list_workers() if w.id == "far/1"]
    assert worker.state == "lost"


async def test_a_job_that_asked_to_be_retried_runs_again_on_another_worker_when_its_worker_is_lost(
    adv_settings: AdvSettings, workdir: Path, tmp_path: Path
) -> None:
    log = tmp_path / "intervals.log"
    settings = adv_settings(command=interval_agent(tmp_path / "bin", log), RELAY_LEASE_S="0.6")
    store = Store(settings.db_path)
    await far_job(store, workdir, retry="on_lost_worker")
    async with Engine(settings).running() as engine:
        rec = await engine.wait_one("00000000000000cc", 30)
    assert rec.status == "completed"
    assert rec.worker is not None and rec.worker != "far/1"
    assert most_at_once(log)[1] == Counter({"job-far": 1})


async def test_a_request_asks_for_retry_and_labels_and_only_a_worker_with_those_labels_claims_it(
    adv_settings: AdvSettings, workdir: Path, tmp_path: Path
) -> None:
    settings = adv_settings(command=interval_agent(tmp_path / "bin", tmp_path / "log"))
    async with Engine(settings).running() as engine:
        job = engine.submit(
            JobRequest(agent="claude", prompt="job-l", cwd=str(workdir), labels=("gpu",), retry="on_lost_worker")
        )
        await anyio.sleep(0.5)
        rec = engine.get(job)
        assert (rec.status, rec.worker) == ("queued", None)  # this relay has no `gpu` label
    store = Store(settings.db_path)
    plain = WorkerInfo("plain/1", "plain", "h", 1, 1, "b", None, (), 2, 10.0)
    gpu = WorkerInfo("gpu/1", "gpu", "h", 2, 1, "b", None, ("big-repo", "gpu"), 2, 10.0)
    assert store.claim(plain, free=2, max_total=8, per_agent=lambda _: 4) == []
    assert [j for j, _, _ in store.claim(gpu, free=2, max_total=8, per_agent=lambda _: 4)] == [job]


async def test_the_heartbeat_prunes_workers_gone_longer_than_the_retention_at_most_once_an_hour(
    adv_settings: AdvSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = adv_settings("[queue]\nworker_retention_days = 2\n", RELAY_LEASE_S="0.3")
    assert settings.worker_retention_s == 2 * 86400
    store = Store(settings.db_path)
    three_days_ago = time.time() - 3 * 86400

    def gone(name: str) -> None:  # a worker last heard from three days ago, stopped
        with monkeypatch.context() as clock:
            clock.setattr(time, "time", lambda: three_days_ago)
            store.register_worker(WorkerInfo(f"{name}/1", name, "host-b", 7, 1, "another-boot", None, (), 1, 15.0))
        store.stop_worker(f"{name}/1", "stopped")

    def known() -> set[str]:
        return {w.id for w in store.list_workers()}

    gone("old")
    store.register_worker(far_worker(4242, 600))  # heard from now
    async with Engine(settings).running() as engine:
        await wait_for(lambda: "old/1" not in known(), 5)
        gone("older")
        me = store.get_worker(engine.worker.id)
        assert me is not None
        # Beats go on (the engine's own heartbeat moves) and the new one stays: one prune per hour per process.
        beaten = me.heartbeat_at + 0.3
        await wait_for(lambda: (w := store.get_worker(engine.worker.id)) is not None and w.heartbeat_at > beaten, 5)
        assert known() == {"older/1", "far/1", engine.worker.id}


async def test_a_worker_of_this_host_killed_without_a_word_is_marked_lost_and_a_live_late_one_is_not(
    adv_settings: AdvSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import subprocess

    from relay.runtime import procinfo

    settings = adv_settings(RELAY_LEASE_S="0.3")
    store = Store(settings.db_path)
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that no longer runs, as a worker killed with kill -9 leaves it
    here = procinfo.host_id()
    a_minute_ago = time.time() - 60
    with monkeypatch.context() as clock:  # both last heard from a minute ago, both still `running`
        clock.setattr(time, "time", lambda: a_minute_ago)
        store.register_worker(WorkerInfo("killed/1", "killed", "this-host", gone.pid, 1, here, None, (), 1, 0.3))
        me = os.getpid()
        store.register_worker(
            WorkerInfo("late/1", "late", "this-host", me, procinfo.start_ticks(me), here, None, (), 1, 0.3)
        )
    async with Engine(settings).running():
        await wait_for(lambda: (w := store.get_worker("killed/1")) is not None and w.state == "lost", 10)
    late = store.get_worker("late/1")
    assert late is not None and late.state == "running"  # its process lives: only late, not lost
