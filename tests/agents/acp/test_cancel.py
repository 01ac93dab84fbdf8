"""job_cancel of an ACP job posts cancel to its inbox (the driver sends session/cancel) before the process group's SIGTERM."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from relay.agents.acp import inbox
from relay.jobs.engine import Engine, JobRequest
from tests.conftest import SettingsFactory
from tests.jobs.fakeproc import Spawner

pytestmark = pytest.mark.anyio


async def test_cancel_posts_cancel_to_a_jobs_inbox_before_its_process_is_stopped(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    spawner = Spawner()
    settings = make_settings()
    seen_at_kill: list[str] = []
    async with Engine(settings, spawn=spawner).running() as engine:
        acp_job = engine.submit(JobRequest(agent="claude", prompt="p", cwd=str(workdir)))
        (proc,) = await spawner.wait_for(1)
        folder = settings.jobs_dir / acp_job
        inbox.open_inbox(folder)  # what the ACP driver does when it starts
        kill_group = proc.kill_group

        async def look_then_kill(grace: float) -> None:
            seen_at_kill.append(inbox.inbox_path(folder).read_text(encoding="utf-8"))
            await kill_group(grace)

        proc.kill_group = look_then_kill  # type: ignore[method-assign]
        with anyio.fail_after(5):
            rec = await engine.cancel(acp_job)
        print_job = engine.submit(JobRequest(agent="claude", prompt="q", cwd=str(workdir)))
        (_, other) = await spawner.wait_for(2)
        with anyio.fail_after(5):
            await engine.cancel(print_job)
    assert rec.status == "cancelled"
    lines = inbox.inbox_path(folder).read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [{"type": "cancel"}]
    assert seen_at_kill == [lines[0] + "\n"]  # when the process group is stopped, the cancel is already there
    assert other.killed_with_grace is not None
    assert not inbox.inbox_path(settings.jobs_dir / print_job).exists(), "a print-mode job gets no inbox"
