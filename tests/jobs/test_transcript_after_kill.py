"""A job's transcript after relay is killed with SIGKILL: the next relay makes it agree line for line with the output.

relay stores a batch of events published on its own, then appends their lines to transcript.txt; the last batch
of a look at the job has its lines appended first and is stored with the rest of the look's writes (jobs/publish.py).
A relay killed between the two (or in the middle of the append) is simulated exactly: the dying relay below kills
itself at the Nth transcript write, before writing it or after half of it. The first write of a job still running is
its first look's (its lines ahead of the events, none stored yet); the second of a job that ended at once follows a
batch stored on its own (the events stored, their lines not). The next relay recovers the job (re-attached while its
agent still runs, or finalized from its files once it has ended) and its transcript must be the output's events,
each once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from relay.agents import get_adapter
from relay.config import Settings, load_settings
from relay.events import Event
from relay.jobs.engine import Engine
from relay.jobs.envelope import render_event
from relay.jobs.output import LineReader
from relay.store import Store
from tests.conftest import FAKES

pytestmark = pytest.mark.anyio

TIMEOUT_S = 60
# Directives of the adversarial fake: its init line, a pause, 64 KB of numbered lines (several publish batches).
AGENT = "[[fake:sleep={sleep},pattern=64]]"
# Where relay rewrites a transcript before renaming it over the old one (relay.jobs.publish.REBUILT_SUFFIX).
REBUILT = "transcript.txt.rebuilt"

DYING_RELAY = """
import os, signal, sys
import anyio
from relay.config import load_settings
from relay.jobs import publish
from relay.jobs.engine import Engine, JobRequest

when, how, prompt, cwd = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
write_bytes = publish.write_bytes
writes = 0

def dying_write(path, data, *, append):
    global writes
    if path.name == "transcript.txt":
        writes += 1
        if writes == when:  # this batch of events is stored already
            if how == "half_a_line":
                write_bytes(path, data[: len(data) // 2 + 1], append=append)
            os.kill(os.getpid(), signal.SIGKILL)
    write_bytes(path, data, append=append)

publish.write_bytes = dying_write

async def main():
    async with Engine(load_settings()).running() as engine:
        engine.submit(JobRequest(agent="claude", prompt=prompt, cwd=cwd))
        await anyio.sleep(60)

anyio.run(main)
"""


def settings_for(relay_home: Path, workdir: Path) -> Settings:
    (relay_home / "config.toml").write_text(f'[agents.claude]\ncommand = "{FAKES / "adversarial"}"\n')
    env = {"RELAY_HOME": str(relay_home), "PATH": os.environ.get("PATH", ""), "HOME": str(relay_home)}
    return load_settings(env, cwd=workdir)


def output_lines(settings: Settings, stdout: Path) -> list[str]:
    """The transcript lines of the events relay's parser reads from a job's whole output."""
    parser = get_adapter("claude", settings).parser()
    events = [event for line in LineReader(stdout).read(final=True) for event in parser.feed(line)]
    return [render_event(Event(e.type, e.data)) for e in events]


def kill_relay_at_transcript_write(relay_home: Path, workdir: Path, when: int, how: str, prompt: str) -> None:
    dying = subprocess.run(
        [sys.executable, "-c", DYING_RELAY, str(when), how, prompt, str(workdir)],
        env={**os.environ, "RELAY_HOME": str(relay_home)},
        cwd=str(workdir),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=TIMEOUT_S,
    )
    assert dying.returncode == -signal.SIGKILL, dying.stderr


@pytest.mark.parametrize(
    ("agent_at_restart", "when", "how"),
    [
        ("running", 1, "before_the_write"),
        ("running", 1, "half_a_line"),
        ("ended", 2, "before_the_write"),
        ("ended", 2, "half_a_line"),
    ],
)
async def test_a_job_recovered_after_relay_died_between_its_events_and_its_transcript_has_every_line_once(
    relay_home: Path, workdir: Path, reap_groups: list[int], agent_at_restart: str, when: int, how: str
) -> None:
    settings = settings_for(relay_home, workdir)
    prompt = "transcript " + AGENT.format(sleep=3 if agent_at_restart == "running" else 0)
    kill_relay_at_transcript_write(relay_home, workdir, when, how, prompt)
    store = Store(settings.db_path)
    (job,) = store.list_jobs()
    files = settings.jobs_dir / job.id
    assert job.status == "running"
    if agent_at_restart == "ended":
        assert store.max_event_seq(job.id) >= 0  # events stored, their lines not written
    else:
        assert store.max_event_seq(job.id) == -1  # the first look's lines written (or half), its events not stored
    if job.pid is not None:
        reap_groups.append(job.pid)
    if agent_at_restart == "ended":
        with anyio.fail_after(TIMEOUT_S):
            while not (files / "exit").exists():
                await anyio.sleep(0.02)
    async with Engine(settings).running() as engine:
        with anyio.fail_after(TIMEOUT_S):
            rec = await engine.wait_one(job.id, TIMEOUT_S)
    assert rec.status == "completed", rec.error
    expected = output_lines(settings, files / "stdout")
    transcript = (files / "transcript.txt").read_text(encoding="utf-8").split("\n")
    assert transcript.pop() == ""  # every line ends with its newline
    assert len(expected) == store.max_event_seq(job.id) + 1 > 500
    assert transcript == expected
    assert not (files / REBUILT).exists()


async def test_a_transcript_rewrite_cut_short_by_another_kill_is_done_again_whole(
    relay_home: Path, workdir: Path, reap_groups: list[int]
) -> None:
    """A relay killed while it rewrote the transcript leaves the next one the same work: the same bytes, once."""
    settings = settings_for(relay_home, workdir)
    kill_relay_at_transcript_write(relay_home, workdir, 2, "half_a_line", "twice " + AGENT.format(sleep=0))
    store = Store(settings.db_path)
    (job,) = store.list_jobs()
    files = settings.jobs_dir / job.id
    if job.pid is not None:
        reap_groups.append(job.pid)
    with anyio.fail_after(TIMEOUT_S):
        while not (files / "exit").exists():
            await anyio.sleep(0.02)
    # A rewrite cut short by the next kill: a rebuilt file half written beside the transcript.
    (files / REBUILT).write_text("[session] half of a rewri")
    async with Engine(settings).running() as engine:
        with anyio.fail_after(TIMEOUT_S):
            rec = await engine.wait_one(job.id, TIMEOUT_S)
    assert rec.status == "completed", rec.error
    expected = output_lines(settings, files / "stdout")
    assert (files / "transcript.txt").read_text(encoding="utf-8") == "".join(line + "\n" for line in expected)
    assert not (files / REBUILT).exists()
