"""What a sync `delegate` costs the store: its job's row read for what changed, not to find the job again."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import Client

from relay.config import Settings
from relay.jobs.engine import Engine
from relay.server.app import build_server
from relay.store import JobRecord
from tests.conftest import SettingsFactory

pytestmark = pytest.mark.anyio

# Its start, its end, and the end its wait returns (the envelope the call answers with is made from that one).
MAX_READS = 3


async def test_a_sync_delegate_reads_its_jobs_row_at_most_three_times(
    make_settings: SettingsFactory, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engines: list[Engine] = []

    def engine_factory(settings: Settings) -> Engine:
        engines.append(Engine(settings))
        return engines[-1]

    reads: list[str] = []
    async with Client(build_server(make_settings(), engine_factory)) as client:
        await client.call_tool("job_list", {})  # the engine runs
        get_job = engines[0].store.get_job

        def counted(job_id: str, *, principal: str | None = None) -> JobRecord | None:
            reads.append(job_id)
            return get_job(job_id, principal=principal)

        monkeypatch.setattr(engines[0].store, "get_job", counted)
        with anyio.fail_after(30):
            result = await client.call_tool("delegate", {"prompt": "hi", "cwd": str(workdir), "mode": "sync"})
    env = result.structured_content or {}
    assert not result.is_error and env["status"] == "completed", env
    assert len(reads) == reads.count(env["job_id"]) <= MAX_READS, reads
