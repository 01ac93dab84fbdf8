"""Every job records where it came from (`via`): the tool, the MCP Task or the command that started it.

Through the SDK's in-memory client against the fake claude; the stored request is read back from relay.db.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.server.app import build_server
from relay.store import Store
from tests.conftest import SettingsFactory
from tests.server.test_mcp_tasks import Tasks, poll_until_final, start_task

pytestmark = pytest.mark.anyio


async def call(c: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    with anyio.fail_after(60):
        result = await c.call_tool(tool, args)
    assert result.structured_content is not None
    assert not result.is_error, result.structured_content
    return result.structured_content


def stored_via(relay_home: Path) -> dict[str, str | None]:
    """Job id -> the `via` kept in its stored request."""
    store = Store(relay_home / "relay.db")
    try:
        return {r.id: r.request.get("via") for r in store.list_jobs(limit=100)}
    finally:
        store.close()


async def test_a_delegate_records_core_delegate_and_job_status_and_job_list_show_it(
    make_settings: SettingsFactory, workdir: Path, relay_home: Path
) -> None:
    async with Client(build_server(make_settings())) as c:
        env = await call(c, "delegate", {"prompt": "hi", "cwd": str(workdir), "mode": "sync"})
        status = await call(c, "job_status", {"job_id": env["job_id"]})
        listed = await call(c, "job_list", {})
    assert env["status"] == "completed" and env["via"] == "core/delegate"
    assert status["via"] == "core/delegate"
    assert [(j["job_id"], j["via"]) for j in listed["jobs"]] == [(env["job_id"], "core/delegate")]
    assert stored_via(relay_home) == {env["job_id"]: "core/delegate"}


async def test_a_profile_tool_and_a_tool_reached_through_call_tool_record_their_own_tool(
    make_settings: SettingsFactory, workdir: Path, relay_home: Path
) -> None:
    # spawn_claude runs claude with full access; reached through call_tool it needs a full grant.
    settings = make_settings('[security]\ngrant = "full"\n', RELAY_TOOLSETS="core,call-cc,gateway")
    async with Client(build_server(settings)) as c:
        direct = await call(c, "call_cc", {"prompt": "say hello", "working_directory": str(workdir)})
        routed = await call(
            c,
            "call_tool",
            {"server_name": "powerspawn", "tool_name": "spawn_claude", "arguments": {"prompt": "say hi"}},
        )
        assert routed["success"] is True, routed
        spawned = await call(c, "job_list", {"via": "powerspawn/"})
        (job,) = spawned["jobs"]
        await call(c, "job_wait", {"job_ids": [job["job_id"]], "timeout_s": 30})
        everything = await call(c, "job_list", {})
        only_call_cc = await call(c, "job_list", {"via": "call-cc/call_cc"})
        only_core = await call(c, "job_list", {"via": "core/"})
    assert "via" not in direct  # call_cc's result keeps the seed's exact shape
    assert job["via"] == "powerspawn/spawn_claude" and job["agent"] == "claude"
    assert {j["job_id"]: j["via"] for j in everything["jobs"]} == {
        direct["job_id"]: "call-cc/call_cc",
        job["job_id"]: "powerspawn/spawn_claude",  # the inner tool, not gateway/call_tool
    }
    assert [j["job_id"] for j in only_call_cc["jobs"]] == [direct["job_id"]]
    assert only_core["jobs"] == []
    assert stored_via(relay_home) == {direct["job_id"]: "call-cc/call_cc", job["job_id"]: "powerspawn/spawn_claude"}


async def test_a_delegate_started_as_an_mcp_task_records_the_task(
    make_settings: SettingsFactory, workdir: Path, relay_home: Path
) -> None:
    async with Client(build_server(make_settings()), extensions=[Tasks()]) as c:
        created = await start_task(c, "delegate", {"prompt": "hi", "cwd": str(workdir)})
        done = await poll_until_final(c, created.task_id)
    env = done["result"]["structuredContent"]
    assert env["status"] == "completed" and env["via"] == "core/delegate+task"
    assert stored_via(relay_home) == {env["job_id"]: "core/delegate+task"}


async def test_jobs_submitted_outside_any_tool_record_nothing(
    make_settings: SettingsFactory, workdir: Path, relay_home: Path
) -> None:
    from relay.jobs.engine import Engine, JobRequest
    from relay.jobs.request import submitted_via

    async with Engine(make_settings()).running() as engine:
        bare = engine.submit(JobRequest(agent="claude", prompt="hi", cwd=str(workdir)))
        with submitted_via("cli/run"):
            inside = engine.submit(JobRequest(agent="claude", prompt="hi", cwd=str(workdir)))
        after = engine.submit(JobRequest(agent="claude", prompt="hi", cwd=str(workdir)))
        explicit = engine.submit(JobRequest(agent="claude", prompt="hi", cwd=str(workdir), via="cli/doctor"))
        await engine.wait([bare, inside, after, explicit], "all", 30)
        envs = {job_id: engine.envelope(job_id)["via"] for job_id in (bare, inside, after, explicit)}
    assert envs == {bare: None, inside: "cli/run", after: None, explicit: "cli/doctor"}
    assert stored_via(relay_home) == envs
