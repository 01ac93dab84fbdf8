"""Where a model job came from (`via`): a zen workflow, core's ask, and a zen tool called as an MCP Task."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import Client

from relay.server.app import build_server
from relay.store import Store
from tests.api.mock_servers import Reply
from tests.server.test_mcp_tasks import Tasks, poll_until_final, start_task
from tests.workflows.conftest import SettingsFactory, SlowMock, call, zen_client

pytestmark = pytest.mark.anyio


def stored(relay_home: Path) -> list[tuple[str, str | None]]:
    """(agent, via) of every stored job, oldest first."""
    store = Store(relay_home / "relay.db")
    try:
        return [(r.agent, r.request.get("via")) for r in reversed(store.list_jobs(limit=100))]
    finally:
        store.close()


async def test_a_zen_workflow_and_ask_record_their_tools_and_job_list_filters_on_them(
    zen_settings: SettingsFactory, anthropic_mock: SlowMock, workdir: Path, relay_home: Path
) -> None:
    anthropic_mock.script(Reply(text="Use a generator."), Reply(text="Yes."))
    settings = zen_settings(RELAY_PROFILE="", RELAY_TOOLSETS="core,zen")
    async with zen_client(settings) as client:
        failed, out = await call(
            client,
            "chat",
            {"prompt": "stream a file?", "working_directory_absolute_path": str(workdir), "model": "sonnet"},
        )
        assert not failed, out
        failed, asked = await call(client, "ask", {"prompt": "sure?", "model": "sonnet", "mode": "sync"})
        assert not failed, asked
        _, from_zen = await call(client, "job_list", {"via": "zen/"})
        _, from_core = await call(client, "job_list", {"via": "core/ask"})
    assert asked["via"] == "core/ask"
    assert [j["via"] for j in from_zen["jobs"]] == ["zen/chat"]
    assert [j["job_id"] for j in from_core["jobs"]] == [asked["job_id"]]
    assert [via for _, via in stored(relay_home)] == ["zen/chat", "core/ask"]


async def test_a_zen_tool_called_as_an_mcp_task_records_the_task_on_its_job_and_its_model_calls(
    zen_settings: SettingsFactory, anthropic_mock: SlowMock, workdir: Path, relay_home: Path
) -> None:
    anthropic_mock.script(Reply(text="Use a generator."))
    settings = zen_settings(RELAY_PROFILE="", RELAY_TOOLSETS="core,zen")
    async with Client(build_server(settings), extensions=[Tasks()]) as c:
        args = {"prompt": "stream a file?", "working_directory_absolute_path": str(workdir), "model": "sonnet"}
        created = await start_task(c, "chat", args)
        with anyio.fail_after(60):
            done = await poll_until_final(c, created.task_id)
    assert done["status"] == "completed", done
    jobs = stored(relay_home)
    assert ("mcp:chat", "zen/chat+task") in jobs  # the task's own job
    assert len(jobs) == 2 and all(via == "zen/chat+task" for _, via in jobs)  # and the model call it made
