"""Where a job is admitted: on the event loop when it runs in its folder as it is, in a worker thread when its
admission may run git (a worktree made or made again), so the loop answers other calls meanwhile; and a job
submitted here is followed and waited on without reading its row to find it visible."""

from __future__ import annotations

import inspect
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine, JobRequest
from relay.principal import Principal, acting_as
from relay.store import JobRecord
from tests.conftest import RECORDINGS, SettingsFactory
from tests.jobs.fakeproc import Spawner

pytestmark = pytest.mark.anyio

TEXT_RUN = (RECORDINGS / "claude_stream_text.ndjson").read_text()
# Admitting a job in its own folder takes milliseconds; a bound far above that, far below a test's patience.
ADMIT_S = 5.0
# How long a worktree request is watched not to be admitted while no worker thread is free.
HELD_S = 0.5


@asynccontextmanager
async def every_worker_thread_busy() -> AsyncIterator[None]:
    """Every token of anyio's default thread limiter held: a hop to a worker thread waits until they are given back."""
    limiter = anyio.to_thread.current_default_thread_limiter()
    holders = [object() for _ in range(int(limiter.total_tokens))]
    for holder in holders:
        await limiter.acquire_on_behalf_of(holder)
    try:
        yield
    finally:
        for holder in holders:
            limiter.release_on_behalf_of(holder)


async def test_a_job_in_its_own_folder_is_admitted_while_every_worker_thread_is_busy(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    spawner = Spawner()
    async with Engine(make_settings(), spawn=spawner).running() as engine:
        async with every_worker_thread_busy():
            with anyio.fail_after(ADMIT_S):
                job_id = await engine.submit_off_loop(JobRequest(agent="claude", prompt="hi", cwd=str(workdir)))
        (proc,) = await spawner.wait_for(1)
        proc.write(TEXT_RUN)
        proc.exit(0)
        with anyio.fail_after(ADMIT_S):
            rec = await engine.wait_one(job_id, ADMIT_S)
    assert rec.status == "completed"


async def test_a_worktree_job_is_admitted_in_a_worker_thread(make_settings: SettingsFactory, workdir: Path) -> None:
    repo = workdir / "repo"
    repo.mkdir()
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "start"]):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=repo, check=True, timeout=30
        )
    spawner = Spawner()
    admitted: list[str] = []
    async with Engine(make_settings(), spawn=spawner).running() as engine:
        req = JobRequest(agent="claude", prompt="hi", cwd=str(repo), workspace="worktree")
        async with anyio.create_task_group() as tg:

            async def submit() -> None:
                admitted.append(await engine.submit_off_loop(req))

            async with every_worker_thread_busy():
                tg.start_soon(submit)
                await anyio.sleep(HELD_S)  # the time it is watched: no thread, so no admission
                assert admitted == []
        (proc,) = await spawner.wait_for(1)
        proc.exit(0)
        with anyio.fail_after(ADMIT_S):
            rec = await engine.wait_one(admitted[0], ADMIT_S)
    assert rec.request.get("worktree") is not None


async def test_following_and_waiting_on_a_job_submitted_here_reads_its_row_only_for_its_end(
    make_settings: SettingsFactory, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spawner = Spawner()
    async with Engine(make_settings(), spawn=spawner).running() as engine:
        with acting_as(Principal("alice", "user")):
            job_id = await engine.submit_off_loop(JobRequest(agent="claude", prompt="hi", cwd=str(workdir)))
            (proc,) = await spawner.wait_for(1)
            reads: list[str] = []
            get_job = engine.store.get_job

            def counted(job_id: str, *, principal: str | None = None) -> JobRecord | None:
                reads.append(job_id)
                return get_job(job_id, principal=principal)

            monkeypatch.setattr(engine.store, "get_job", counted)
            events = engine.subscribe(job_id)
            assert reads == []  # its principal is known here: no read to find it visible
            proc.write(TEXT_RUN)
            proc.exit(0)
            with anyio.fail_after(ADMIT_S):
                rec = await engine.wait_one(job_id, ADMIT_S)
            events.close()
    assert rec.status == "completed"
    assert reads.count(job_id) <= 2  # its end (finish.py) and the record wait_one returns, at most


async def test_another_principal_still_finds_no_job_by_an_id_submitted_here(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    spawner = Spawner()
    async with Engine(make_settings(), spawn=spawner).running() as engine:
        with acting_as(Principal("alice", "user")):
            job_id = await engine.submit_off_loop(JobRequest(agent="claude", prompt="hi", cwd=str(workdir)))
        (proc,) = await spawner.wait_for(1)
        with acting_as(Principal("bob", "user")):
            for follow in (engine.subscribe, lambda j: engine.wait_one(j, 0), lambda j: engine.wait([j], "any", 0)):
                with pytest.raises(RelayError) as refused:
                    result = follow(job_id)
                    if inspect.isawaitable(result):
                        await result
                assert refused.value.code is ErrorCode.JOB_NOT_FOUND
        proc.exit(0)
        with anyio.fail_after(ADMIT_S):
            await engine.wait_one(job_id, ADMIT_S)
