"""best_of tests its candidates side by side, within the engine's slots, each result kept with its candidate."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from relay.jobs.engine import Engine
from relay.jobs.grants import chosen_by_the_person
from relay.workflows.best_of import BestOf, run_best_of
from tests.conftest import SettingsFactory
from tests.workspaces.conftest import one_commit_repo

pytestmark = pytest.mark.anyio


def barrier(log: Path, n: int) -> str:
    """A test command that marks its start in `log`, waits (bounded, 5 s) until `n` runs have started, marks its
    end: run one after another, each start is followed by its own end; side by side, all starts come first."""
    return (
        f"echo start >> {log}; i=0; while [ $(grep -c start {log}) -lt {n} ] && [ $i -lt 50 ];"
        f" do sleep 0.1; i=$((i+1)); done; echo end >> {log}; test -f answer.txt"
    )


async def test_best_of_runs_its_candidates_tests_at_the_same_time(
    make_settings: SettingsFactory, workdir: Path, tmp_path: Path
) -> None:
    repo = one_commit_repo(workdir)
    log = tmp_path / "marks.log"
    command = barrier(log, 3)
    req = BestOf(
        prompt="Write it [[fake:write=answer.txt~42\\n]]", agents=("claude",) * 3, cwd=str(repo), test_command=command
    )
    async with Engine(make_settings()).running() as engine:
        with chosen_by_the_person("full"):
            permitted = await engine.permit_command(command, what="best_of's test command", cwd=str(repo))
        with anyio.fail_after(60):
            found = await run_best_of(engine, req, None, permitted)
    assert log.read_text().split() == ["start"] * 3 + ["end"] * 3  # every test had started before any ended
    assert [c["test"]["passed"] for c in found["candidates"]] == [True] * 3
    assert len({c["job_id"] for c in found["candidates"]}) == 3


def most_at_once(marks: list[str]) -> int:
    running = most = 0
    for mark in marks:
        running += 1 if mark == "start" else -1
        most = max(most, running)
    return most


async def test_best_of_runs_no_more_tests_at_once_than_the_engine_runs_jobs(
    make_settings: SettingsFactory, workdir: Path, tmp_path: Path
) -> None:
    repo = one_commit_repo(workdir)
    log = tmp_path / "marks.log"
    command = barrier(log, 2)
    req = BestOf(
        prompt="Write it [[fake:write=answer.txt~42\\n]]", agents=("claude",) * 3, cwd=str(repo), test_command=command
    )
    async with Engine(make_settings(RELAY_MAX_CONCURRENT="2")).running() as engine:
        with chosen_by_the_person("full"):
            permitted = await engine.permit_command(command, what="best_of's test command", cwd=str(repo))
        with anyio.fail_after(60):
            found = await run_best_of(engine, req, None, permitted)
    marks = log.read_text().split()
    assert marks[:2] == ["start", "start"] and most_at_once(marks) == 2  # two slots: two tests at a time, never three
    assert len(marks) == 6 and all(c["test"]["passed"] for c in found["candidates"])
