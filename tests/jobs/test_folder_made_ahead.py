"""A new job's folder, made ahead (runtime/folders.py), is used as it is: its first look at the output writes its
transcript's lines into the empty file made ahead, without rewriting the file first (a rewrite is a replay's, after a
restart: tests/jobs/test_transcript_after_kill.py)."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from relay.jobs import publish
from relay.jobs.engine import Engine, JobRequest
from tests.conftest import SettingsFactory

pytestmark = pytest.mark.anyio


async def test_a_new_jobs_transcript_is_the_file_made_ahead_never_rewritten(
    make_settings: SettingsFactory, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rebuilt: list[Path] = []
    finish = publish.Rebuild.finish

    def counted(self: publish.Rebuild) -> None:
        rebuilt.append(self.path)
        finish(self)

    monkeypatch.setattr(publish.Rebuild, "finish", counted)
    async with Engine(make_settings()).running() as engine:
        engine.make_ready()
        spares = engine._state.spares  # pyright: ignore[reportPrivateUsage]
        with anyio.fail_after(60):  # every spare made (one made after the look would be the one taken: last in)
            while len(spares._spares) < spares.size or spares._filling:  # pyright: ignore[reportPrivateUsage]
                await anyio.sleep(0.01)
        made_ahead = {os.stat(p / "transcript.txt").st_ino for p in engine._state.spares._spares}  # pyright: ignore[reportPrivateUsage]
        job_id = engine.submit(JobRequest(agent="claude", prompt="hi", cwd=str(workdir)))
        with anyio.fail_after(60):
            rec = await engine.wait_one(job_id, 60)
        transcript = engine.files(job_id).dir / "transcript.txt"
        assert rec.status == "completed"
        assert transcript.read_text(encoding="utf-8")  # its lines are there
        assert rebuilt == []
        assert os.stat(transcript).st_ino in made_ahead  # the very file made ahead
