"""A job whose end fails before its write (its last look's events ride with that write) keeps every event."""

from __future__ import annotations

import errno
from pathlib import Path

import anyio
import pytest

from relay.jobs import finish
from relay.jobs.engine import Engine, JobRequest
from tests.conftest import RECORDINGS, SettingsFactory
from tests.jobs.fakeproc import Spawner

pytestmark = pytest.mark.anyio

TEXT_RUN = (RECORDINGS / "claude_stream_text.ndjson").read_text()


async def test_a_job_whose_result_file_meets_a_full_disk_once_ends_failed_with_every_event_of_its_run_stored(
    make_settings: SettingsFactory, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = finish.write_bytes
    refused: list[Path] = []

    def full_once(path: Path, data: bytes, *, append: bool) -> None:
        if path.name.startswith("result") and not refused:
            refused.append(path)
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, data, append=append)

    monkeypatch.setattr(finish, "write_bytes", full_once)
    spawner = Spawner()
    async with Engine(make_settings(), spawn=spawner).running() as engine:
        job_id = engine.submit(JobRequest(agent="claude", prompt="hi", cwd=str(workdir)))
        (proc,) = await spawner.wait_for(1)
        proc.write(TEXT_RUN)
        proc.exit(0)
        with anyio.fail_after(10):
            rec = await engine.wait_one(job_id, 10)
        stored = engine.store.events(job_id)
        transcript = engine.settings.home / "jobs" / job_id / "transcript.txt"
        lines = transcript.read_text().splitlines()
    assert refused and rec.status == "failed"
    assert stored and len(stored) == len(lines)  # what the transcript shows, the store holds
    assert [seq for seq, _, _ in stored] == list(range(len(stored)))
