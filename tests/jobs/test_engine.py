"""The job engine through the spawn seam: lifecycle, limits, timeouts, cancel, waiting, progress."""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine, JobRequest
from tests.conftest import RECORDINGS, SettingsFactory
from tests.jobs.fakeproc import Spawner

pytestmark = pytest.mark.anyio

TEXT_RUN = (RECORDINGS / "claude_stream_text.ndjson").read_text()


def engine_with(settings_factory: SettingsFactory, spawner: Spawner, config: str = "", **env: str) -> Engine:
    return Engine(settings_factory(config, **env), spawn=spawner)


async def test_a_job_runs_to_completion_with_the_parsed_result(make_settings: SettingsFactory, workdir: Path) -> None:
    spawner = Spawner()
    async with engine_with(make_settings, spawner).running() as engine:
        job_id = engine.submit(JobRequest(agent="claude", prompt="hi", cwd=str(workdir)))
        (proc,) = await spawner.wait_for(1)
        assert proc.invocation.argv[1:3] == ("-p", "hi")
        proc.write(TEXT_RUN)
        proc.exit(0)
        with anyio.fail_after(5):
            rec = await engine.wait_one(job_id, 5)
        env = engine.envelope(job_id)
    assert rec.status == "completed"
    assert env["output"] == "hi from mock"
    assert env["session_id"] == "b3af0212-3a6d-4156-a35c-cfab742dc56e"
    assert env["usage"] == {"input": 10, "output": 5, "cached": 0}
    assert env["cost_usd"] == 0.000175
    assert env["exit_code"] == 0 and env["error"] is None


async def test_jobs_past_the_concurrency_limit_queue_until_a_slot_frees(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    spawner = Spawner()
    async with engine_with(make_settings, spawner, RELAY_MAX_CONCURRENT="2").running() as engine:
        ids = [engine.submit(JobRequest(agent="claude", prompt=f"p{i}", cwd=str(workdir))) for i in range(3)]
        procs = await spawner.wait_for(2)
        assert len(spawner.procs) == 2
        assert engine.get(ids[2]).status == "queued"
        procs[0].write(TEXT_RUN)
        procs[0].exit(0)
        procs = await spawner.wait_for(3)
        for p in procs[1:]:
            p.write(TEXT_RUN)
            p.exit(0)
        records = await engine.wait(ids, "all", 5)
    assert [r.status for r in records] == ["completed"] * 3


async def test_the_per_agent_limit_queues_jobs_of_that_agent(make_settings: SettingsFactory, workdir: Path) -> None:
    spawner = Spawner()
    config = "max_concurrent = 1\n"
    async with engine_with(make_settings, spawner, config).running() as engine:
        a = engine.submit(JobRequest(agent="claude", prompt="a", cwd=str(workdir)))
        b = engine.submit(JobRequest(agent="claude", prompt="b", cwd=str(workdir)))
        await spawner.wait_for(1)
        assert engine.get(b).status == "queued"
        spawner.procs[0].exit(0)
        await spawner.wait_for(2)
        spawner.procs[1].exit(0)
        await engine.wait([a, b], "all", 5)


async def test_a_job_past_its_wall_clock_is_killed_and_timed_out(make_settings: SettingsFactory, workdir: Path) -> None:
    spawner = Spawner()
    async with engine_with(make_settings, spawner, RELAY_KILL_GRACE_S="0.25").running() as engine:
        job_id = engine.submit(JobRequest(agent="claude", prompt="p", cwd=str(workdir), timeout_s=0.3))
        (proc,) = await spawner.wait_for(1)
        with anyio.fail_after(5):
            rec = await engine.wait_one(job_id, 5)
    assert rec.status == "timed_out"
    assert proc.killed_with_grace == 0.25
    assert rec.error is not None and rec.error["code"] == "TIMEOUT"


async def test_a_job_silent_past_its_idle_timeout_is_timed_out(make_settings: SettingsFactory, workdir: Path) -> None:
    spawner = Spawner()
    async with engine_with(make_settings, spawner).running() as engine:
        job_id = engine.submit(JobRequest(agent="claude", prompt="p", cwd=str(workdir), idle_timeout_s=0.3))
        await spawner.wait_for(1)
        with anyio.fail_after(5):
            rec = await engine.wait_one(job_id, 5)
    assert rec.status == "timed_out"
    assert rec.stop_reason == "timed_out:idle"


async def test_cancel_kills_the_process_and_keeps_the_output(make_settings: SettingsFactory, workdir: Path) -> None:
    spawner = Spawner()
    async with engine_with(make_settings, spawner).running() as engine:
        job_id = engine.submit(JobRequest(agent="claude", prompt="p", cwd=str(workdir)))
        (proc,) = await spawner.wait_for(1)
        proc.write(TEXT_RUN.splitlines()[0] + "\n")
        with anyio.fail_after(5):
            rec = await engine.cancel(job_id)
        page = engine.read_output(job_id, "events", 0, 100_000)
    assert rec.status == "cancelled"
    assert proc.killed_with_grace is not None
    assert page["text"] == TEXT_RUN.splitlines()[0] + "\n"


async def test_cancelling_a_queued_job_never_starts_it(make_settings: SettingsFactory, workdir: Path) -> None:
    spawner = Spawner()
    async with engine_with(make_settings, spawner, RELAY_MAX_CONCURRENT="1").running() as engine:
        engine.submit(JobRequest(agent="claude", prompt="a", cwd=str(workdir)))
        queued = engine.submit(JobRequest(agent="claude", prompt="b", cwd=str(workdir)))
        await spawner.wait_for(1)
        rec = await engine.cancel(queued)
        spawner.procs[0].exit(0)
        await anyio.lowlevel.checkpoint()
    assert rec.status == "cancelled" and len(spawner.procs) == 1


async def test_wait_any_returns_when_the_first_job_ends(make_settings: SettingsFactory, workdir: Path) -> None:
    spawner = Spawner()
    async with engine_with(make_settings, spawner).running() as engine:
        a = engine.submit(JobRequest(agent="claude", prompt="a", cwd=str(workdir)))
        b = engine.submit(JobRequest(agent="claude", prompt="b", cwd=str(workdir)))
        await spawner.wait_for(2)
        with anyio.fail_after(5):  # spawned, then recorded running: the record may lag the spawn a moment
            while engine.get(a).status != "running":
                await anyio.sleep(0.01)
        spawner.running("b").write(TEXT_RUN)
        spawner.running("b").exit(0)
        with anyio.fail_after(5):
            records = await engine.wait([a, b], "any", 30)
        assert [r.status for r in records] == ["running", "completed"]
        timed = await engine.wait([a], "all", 0.05)
        assert timed[0].status == "running"
        spawner.running("a").exit(0)


async def test_subscribers_receive_events_while_the_job_runs(make_settings: SettingsFactory, workdir: Path) -> None:
    spawner = Spawner()
    async with engine_with(make_settings, spawner).running() as engine:
        job_id = engine.submit(JobRequest(agent="claude", prompt="a", cwd=str(workdir)))
        (proc,) = await spawner.wait_for(1)
        events = engine.subscribe(job_id)
        proc.write(TEXT_RUN)
        proc.exit(0)
        seen: list[str] = []
        with anyio.fail_after(5):
            async with events:
                async for _, event in events:
                    seen.append(event.type)
    assert seen == ["session.started", "message", "turn.completed"]


@pytest.mark.parametrize(
    ("request_kwargs", "code"),
    [
        ({"agent": "nope"}, ErrorCode.AGENT_UNKNOWN),
        ({"cwd": "relative/path"}, ErrorCode.INVALID_ARGUMENT),
        ({"cwd": "/definitely/not/here"}, ErrorCode.INVALID_ARGUMENT),
        ({"cwd": "/"}, ErrorCode.CWD_NOT_ALLOWED),
        ({"prompt": "   "}, ErrorCode.INVALID_ARGUMENT),
        ({"permission": "root"}, ErrorCode.INVALID_ARGUMENT),
        ({"max_turns": 0}, ErrorCode.INVALID_ARGUMENT),
        ({"timeout_s": -1.0}, ErrorCode.INVALID_ARGUMENT),
        ({"session_id": "s", "continue_latest": True}, ErrorCode.INVALID_ARGUMENT),
    ],
)
async def test_bad_requests_are_refused_before_a_job_exists(
    make_settings: SettingsFactory, workdir: Path, request_kwargs: dict[str, object], code: ErrorCode
) -> None:
    spawner = Spawner()
    async with engine_with(make_settings, spawner).running() as engine:
        base: dict[str, object] = {"agent": "claude", "prompt": "p", "cwd": str(workdir)}
        with pytest.raises(RelayError) as info:
            engine.submit(JobRequest(**(base | request_kwargs)))  # type: ignore[arg-type]
        assert engine.list() == []
    assert info.value.code == code and info.value.hint


async def test_a_missing_agent_binary_is_agent_not_installed_with_a_hint(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    settings = make_settings("[agents.other]\n")
    async with Engine(settings, spawn=Spawner(), which=lambda _: None).running() as engine:
        with pytest.raises(RelayError) as info:
            engine.submit(JobRequest(agent="claude", prompt="p", cwd=str(workdir)))
    assert info.value.code == ErrorCode.AGENT_NOT_INSTALLED
    assert "npm" in info.value.hint


async def test_depth_past_the_limit_is_refused(make_settings: SettingsFactory, workdir: Path) -> None:
    async with Engine(make_settings(RELAY_DEPTH="2"), spawn=Spawner()).running() as engine:
        with pytest.raises(RelayError) as info:
            engine.submit(JobRequest(agent="claude", prompt="p", cwd=str(workdir)))
    assert info.value.code == ErrorCode.LIMIT_REACHED


async def test_resuming_a_session_reapplies_its_cwd_model_and_permission(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    spawner = Spawner()
    async with engine_with(make_settings, spawner).running() as engine:
        first = engine.submit(JobRequest(agent="claude", prompt="a", cwd=str(workdir), model="opus", permission="edit"))
        (proc,) = await spawner.wait_for(1)
        proc.write(TEXT_RUN)
        proc.exit(0)
        await engine.wait_one(first, 5)
        session = engine.get(first).session_id
        assert session
        engine.submit(JobRequest(agent="claude", prompt="b", session_id=session))
        procs = await spawner.wait_for(2)
        argv = procs[1].invocation.argv
        assert procs[1].invocation.cwd == str(workdir)
        assert "--model=opus" in argv and f"--resume={session}" in argv
        assert argv[argv.index("--permission-mode") + 1] == "acceptEdits"
        other = workdir / "sub"
        other.mkdir()
        with pytest.raises(RelayError) as info:
            engine.submit(JobRequest(agent="claude", prompt="c", session_id=session, cwd=str(other)))
        assert info.value.code == ErrorCode.INVALID_ARGUMENT
        procs[1].exit(0)


async def test_a_session_at_its_spend_cap_is_refused(make_settings: SettingsFactory, workdir: Path) -> None:
    spawner = Spawner()
    settings = make_settings(RELAY_MAX_SESSION_COST_USD="0.0001")
    async with Engine(settings, spawn=spawner).running() as engine:
        first = engine.submit(JobRequest(agent="claude", prompt="a", cwd=str(workdir)))
        (proc,) = await spawner.wait_for(1)
        proc.write(TEXT_RUN)  # reports total_cost_usd 0.000175
        proc.exit(0)
        await engine.wait_one(first, 5)
        with pytest.raises(RelayError) as info:
            engine.submit(JobRequest(agent="claude", prompt="b", session_id=engine.get(first).session_id))
    assert info.value.code == ErrorCode.LIMIT_REACHED and info.value.hint


async def test_a_job_reporting_cost_past_its_cap_is_stopped(make_settings: SettingsFactory, workdir: Path) -> None:
    spawner = Spawner()
    async with Engine(make_settings(RELAY_MAX_COST_USD="0.0001"), spawn=spawner).running() as engine:
        job_id = engine.submit(JobRequest(agent="claude", prompt="a", cwd=str(workdir)))
        (proc,) = await spawner.wait_for(1)
        argv = proc.invocation.argv
        assert argv[argv.index("--max-budget-usd") + 1] == "0.0001"
        proc.write(TEXT_RUN.splitlines()[-1] + "\n")  # a result line with total_cost_usd 0.000175
        with anyio.fail_after(5):
            rec = await engine.wait_one(job_id, 5)
    assert rec.status == "failed"
    assert rec.error is not None and rec.error["code"] == "LIMIT_REACHED"
    assert proc.killed_with_grace is not None


async def test_known_secrets_never_reach_the_store_or_job_files(
    make_settings: SettingsFactory, workdir: Path, relay_home: Path
) -> None:
    key = "sk-ant-PLANTED-0123456789abcdef"
    spawner = Spawner()
    async with Engine(make_settings(ANTHROPIC_API_KEY=key), spawn=spawner).running() as engine:
        job_id = engine.submit(JobRequest(agent="claude", prompt=f"use {key} please", cwd=str(workdir)))
        (proc,) = await spawner.wait_for(1)
        assert proc.invocation.env["ANTHROPIC_API_KEY"] == key  # the agent itself gets its key
        leaked = TEXT_RUN.replace("hi from mock", f"the key is {key}")
        proc.write(leaked)
        proc.exit(0)
        rec = await engine.wait_one(job_id, 5)
        env = engine.envelope(job_id)
    assert rec.status == "completed"
    assert key not in env["output"] and "[redacted]" in env["output"]
    assert key not in str(rec.request)
    stored = [p for p in relay_home.rglob("*") if p.is_file() and p.name != "stdout"]
    assert stored
    for path in stored:
        try:
            content = path.read_bytes()
        except FileNotFoundError:  # a temporary file renamed into place meanwhile (the audit views)
            continue
        assert key.encode() not in content, path


async def test_files_changed_comes_from_git_when_cwd_is_a_repository(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    import subprocess

    subprocess.run(["git", "init", "-q", str(workdir)], check=True)
    (workdir / "kept.txt").write_text("untouched")
    (workdir / "edited.txt").write_text("before")
    spawner = Spawner()
    async with engine_with(make_settings, spawner).running() as engine:
        job_id = engine.submit(JobRequest(agent="claude", prompt="edit", cwd=str(workdir)))
        (proc,) = await spawner.wait_for(1)
        (workdir / "edited.txt").write_text("after")  # the agent's work, unreported in its stream
        (workdir / "new.txt").write_text("new")
        proc.write(TEXT_RUN)
        proc.exit(0)
        await engine.wait_one(job_id, 5)
        env = engine.envelope(job_id)
    assert env["files_changed"] == ["edited.txt", "new.txt"]
