"""Zen tools share relay's threads with `ask` and `thread_list`, and their model/CLI calls are ordinary jobs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.api.mock_servers import Reply
from tests.workflows.conftest import SettingsFactory, SlowMock, call, request_text, zen_client

pytestmark = pytest.mark.anyio


async def test_a_planner_thread_is_listed_and_continued_by_ask_with_another_model(
    zen_settings: SettingsFactory, openai_mock: SlowMock
) -> None:
    openai_mock.script(Reply(text="Looks sound."))
    plan = {"step": "Plan the BLUEBIRD migration", "step_number": 1, "total_steps": 1, "next_step_required": False}
    async with zen_client(zen_settings(RELAY_PROFILE="", RELAY_TOOLSETS="core,zen")) as client:
        _, planned = await call(client, "planner", plan)
        thread = planned["continuation_id"]
        failed, asked = await call(
            client, "ask", {"prompt": "Any risks?", "model": "grok", "continuation_id": thread, "mode": "sync"}
        )
        _, listing = await call(client, "thread_list", {})
    assert not failed, asked
    assert asked["output"] == "Looks sound." and asked["continuation_id"] == thread
    assert "BLUEBIRD" in request_text(openai_mock.requests[0])
    assert [(t["continuation_id"], t["tool"], t["turn_count"]) for t in listing["threads"]] == [(thread, "planner", 4)]


async def test_a_clink_job_can_be_cancelled_and_clink_reports_it(zen_settings: SettingsFactory) -> None:
    async with zen_client(zen_settings(RELAY_PROFILE="", RELAY_TOOLSETS="core,zen")) as client:
        outcome: dict[str, Any] = {}

        async def run_clink() -> None:
            outcome["failed"], outcome["out"] = await call(
                client, "clink", {"prompt": "[[fake:hang]] think", "cli_name": "codex"}
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_clink)
            with anyio.fail_after(30):
                while True:
                    _, jobs = await call(client, "job_list", {"status": ["running"]})
                    if jobs["jobs"]:
                        break
                    await anyio.sleep(0.05)
            job_id = jobs["jobs"][0]["job_id"]
            _, cancelled = await call(client, "job_cancel", {"job_id": job_id})
    assert cancelled["status"] == "cancelled"
    assert outcome["failed"] is True and outcome["out"]["status"] == "error"
    assert outcome["out"]["metadata"]["job_id"] == job_id


async def test_a_long_clink_answer_is_excerpted_and_paged_with_job_result(
    zen_settings: SettingsFactory, workdir: Path
) -> None:
    prompt = "[[fake:echo]] " + "lorem ipsum " * 3000
    async with zen_client(zen_settings(RELAY_PROFILE="", RELAY_TOOLSETS="core,zen")) as client:
        failed, out = await call(client, "clink", {"prompt": prompt, "cli_name": "codex"})
        _, page = await call(
            client, "job_result", {"job_id": out["metadata"]["job_id"], "offset": 4000, "limit": 100_000}
        )
    assert not failed, out
    assert out["metadata"]["output_truncated"] is True and out["metadata"]["output_total_chars"] > 20_000
    assert "Read the rest with job_result" in out["content"]
    assert page["total_chars"] == out["metadata"]["output_total_chars"] and page["complete"] is True
