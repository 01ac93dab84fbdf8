"""A job folder outlives one driver run (a retry after a lost worker, a run started again in the same folder): each
run reads only the messages posted for it, so an earlier run's steering message, cancel or permission answer never
reaches a later one."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay.agents.acp import inbox
from tests.agents.acp.test_driver import WAIT_S, Run

pytestmark = pytest.mark.slow  # each test starts the driver and an ACP agent twice


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[Any]:
    """Starts driver runs one after the other in the same job folder."""
    started: list[Run] = []

    def start(prompt: str, *options: str) -> Run:
        started.append(Run(tmp_path, prompt, *options))
        return started[-1]

    yield start
    for r in started:
        if r.proc.poll() is None:
            os.killpg(r.proc.pid, signal.SIGKILL)
            r.proc.wait(WAIT_S)


def test_a_second_run_in_the_same_job_folder_gets_neither_the_first_runs_message_nor_its_cancel(runs: Any) -> None:
    first = runs("first SLOW")
    first.wait_for("session")
    inbox.post(first.job_dir, {"type": "send", "id": "m-1", "text": "the first run's steering"})
    inbox.post(first.job_dir, {"type": "cancel"})
    _, first_lines, _ = first.finish()
    assert first_lines[-1]["stopReason"] == "cancelled"

    second = runs("second run's turn")
    code, lines, stderr = second.finish()
    assert code == 0, stderr
    assert lines[-1]["stopReason"] == "end_turn"  # the old cancel did not stop its first turn
    assert not [ln for ln in lines if ln["type"] == "sent"]  # nor was the old message sent again
    assert second.answer(lines) == "echo 1: second run's turn"
    assert lines[0]["run"] and lines[0]["run"] != first_lines[0].get("run")


def test_a_second_runs_permission_request_is_not_answered_by_the_first_runs_answer(runs: Any) -> None:
    first = runs("please ASK")
    asked_first = first.wait_for("permission_request")
    allow = {"type": "permission_answer", "id": asked_first["id"], "outcome": "selected", "optionId": "allow"}
    inbox.post(first.job_dir, allow)
    _, first_lines, _ = first.finish()
    assert "permission=selected:allow" in first.answer(first_lines)

    second = runs("please ASK")
    asked = second.wait_for("permission_request")
    assert asked["id"] == asked_first["id"]  # numbered from 1 again
    inbox.post(second.job_dir, allow | {"run": asked_first.get("run")})  # an answer for the first run, posted late
    inbox.post(second.job_dir, allow | {"optionId": "deny"})  # for the run live now
    code, lines, stderr = second.finish()
    assert code == 0, stderr
    assert "permission=selected:deny" in second.answer(lines)
    [answered] = [ln for ln in lines if ln["type"] == "permission_answer"]
    assert answered["run"] == asked["run"] != asked_first.get("run")
