"""Checks at the point of use: a queued job's cwd is checked again when it starts, and the delegation depth
of a relay started inside a job comes from relay's own record of that job, not from the child's environment."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from relay.config import load_settings
from relay.jobs.engine import Engine, JobRequest
from tests.reliability.conftest import QUICK_STREAM, RELAY

pytestmark = pytest.mark.anyio


def shell_agent(path: Path, body: str) -> Path:
    """A /bin/sh agent: runs `body` (the prompt is in "$@"), then prints a complete Claude stream."""
    lines = " ".join(f"'{line}'" for line in QUICK_STREAM)
    path.write_text(f"#!/bin/sh\n{body}\nprintf '%s\\n' {lines}\n")
    path.chmod(0o755)
    return path


async def test_a_queued_jobs_cwd_swapped_for_a_symlink_out_of_the_roots_is_refused_when_it_starts(
    relay_home: Path, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    (root / "project").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    log = tmp_path / "cwds.log"
    agent = shell_agent(tmp_path / "agent", f'pwd -P >> {log}\ncase "$*" in *slow*) sleep 1;; esac')
    (relay_home / "config.toml").write_text(
        f'[agents.claude]\ncommand = "{agent}"\n[jobs]\nmax_concurrent = 1\n[security]\nallowed_roots = ["{root}"]\n'
    )
    env = {"RELAY_HOME": str(relay_home), "PATH": os.environ.get("PATH", ""), "HOME": str(relay_home)}
    settings = load_settings(env, cwd=root)
    project = root / "project"
    async with Engine(settings).running() as engine:
        first = engine.submit(JobRequest(agent="claude", prompt="slow", cwd=str(root)))
        queued = engine.submit(JobRequest(agent="claude", prompt="swapped", cwd=str(project)))
        assert engine.get(queued).status == "queued"
        project.rmdir()
        project.symlink_to(outside)  # the swap, while the job waits for its slot
        with anyio.fail_after(30):
            done = await engine.wait([first, queued], "all", 30)
    by_id = {r.id: r for r in done}
    assert by_id[first].status == "completed"
    assert by_id[queued].status == "failed"
    assert by_id[queued].error is not None and by_id[queued].error["code"] == "CWD_NOT_ALLOWED"
    assert log.read_text().split() == [str(root)]  # the agent never ran outside the roots


async def test_a_child_that_resets_relay_depth_cannot_delegate_past_the_limit(
    relay_home: Path, tmp_path: Path, workdir: Path
) -> None:
    out = tmp_path / "child.out"
    # The job's agent starts a nested relay with RELAY_DEPTH=0 and without the RELAY_JOB_ID token.
    agent = shell_agent(
        tmp_path / "agent",
        'case "$*" in *outer*)\n'
        f"  env -u RELAY_JOB_ID RELAY_DEPTH=0 RELAY_HOME={relay_home} {RELAY} run claude inner --cwd {workdir}"
        f" > {out} 2>&1\n"
        f'  echo "exit $?" >> {out};;\n'
        "esac",
    )
    (relay_home / "config.toml").write_text(f'[agents.claude]\ncommand = "{agent}"\n[jobs]\nmax_depth = 1\n')
    env = {"RELAY_HOME": str(relay_home), "PATH": os.environ.get("PATH", ""), "HOME": str(relay_home)}
    settings = load_settings(env, cwd=workdir)
    async with Engine(settings).running() as engine:
        job = engine.submit(JobRequest(agent="claude", prompt="outer", cwd=str(workdir)))
        rec = await engine.wait_one(job, 60)
        assert rec.status == "completed"
        inner = [r for r in engine.list(limit=10) if r.id != job]
    text = out.read_text()
    assert "LIMIT_REACHED" in text and "exit 0" not in text, text
    assert inner == []  # the nested relay recorded no job
