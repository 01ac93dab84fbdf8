"""The job engine as it is, handed the PostgreSQL store: a job runs, is waited on and is read back."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from relay.jobs.engine import Engine, JobRequest
from relay.store import open_store
from relay.store.pg import PgStore
from tests.conftest import RECORDINGS, SettingsFactory
from tests.jobs.fakeproc import Spawner

pytestmark = pytest.mark.anyio

TEXT_RUN = (RECORDINGS / "claude_stream_text.ndjson").read_text()


async def test_a_job_runs_to_completion_on_the_postgresql_store_and_another_store_reads_it_back(
    make_settings: SettingsFactory, workdir: Path, pg_url: str, relay_home: Path
) -> None:
    settings = make_settings(RELAY_STORE=pg_url)
    store = open_store(settings.store_target, home=settings.home)
    assert isinstance(store, PgStore)
    spawner = Spawner()
    async with Engine(settings, spawn=spawner, store=store).running() as engine:  # type: ignore[arg-type]
        job_id = engine.submit(JobRequest(agent="claude", prompt="hi", cwd=str(workdir)))
        (proc,) = await spawner.wait_for(1)
        proc.write(TEXT_RUN)
        proc.exit(0)
        with anyio.fail_after(5):
            rec = await engine.wait_one(job_id, 5)
        env = engine.envelope(job_id)
    assert rec.status == "completed" and env["output"] == "hi from mock"
    # another process's view of the same database: the job, its events and its session
    other = open_store(pg_url, home=relay_home)
    job = other.get_job(job_id)
    assert job is not None and job.status == "completed" and job.session_id == env["session_id"]
    assert [e.type for _, _, e in other.events(job_id)] == [e.type for _, _, e in store.events(job_id)] != []
    assert other.get_session(env["session_id"], "claude") is not None
    other.close()
    store.close()
