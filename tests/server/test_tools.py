"""relay's MCP tools through the SDK's in-memory client, against the fake claude."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.server.app import build_server
from tests.conftest import SettingsFactory

pytestmark = pytest.mark.anyio

SESSION = "b3af0212-3a6d-4156-a35c-cfab742dc56e"


def client(settings_factory: SettingsFactory, **env: str) -> Client:
    return Client(build_server(settings_factory(**env)))


async def call(c: Client, tool: str, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    with anyio.fail_after(30):
        result = await c.call_tool(tool, args)
    assert result.structured_content is not None
    return bool(result.is_error), result.structured_content


async def test_sync_delegate_returns_the_envelope_of_the_recorded_run(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    async with client(make_settings) as c:
        failed, env = await call(c, "delegate", {"prompt": "hi", "cwd": str(workdir), "mode": "sync"})
    assert not failed
    assert {
        k: env[k] for k in ("status", "agent", "output", "session_id", "usage", "cost_usd", "exit_code", "error")
    } == {
        "status": "completed",
        "agent": "claude",
        "output": "hi from mock",
        "session_id": SESSION,
        "usage": {"input": 10, "output": 5, "cached": 0},
        "cost_usd": 0.000175,
        "exit_code": 0,
        "error": None,
    }
    assert env["truncated"] is False and env["next"] is None


async def test_async_delegate_returns_at_once_and_job_wait_brings_the_result(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    async with client(make_settings) as c:
        _, handle = await call(c, "delegate", {"prompt": "hi [[fake:sleep=0.5]]", "cwd": str(workdir), "mode": "async"})
        assert handle["status"] in ("queued", "running")
        _, waited = await call(c, "job_wait", {"job_ids": [handle["job_id"]], "timeout_s": 20})
    assert waited["done"] is True
    assert waited["jobs"][0]["status"] == "completed" and waited["jobs"][0]["output"] == "hi from mock"


async def test_auto_delegate_hands_back_a_job_past_the_threshold_then_it_completes(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    async with client(make_settings, RELAY_AUTO_THRESHOLD_S="0.3") as c:
        _, handle = await call(c, "delegate", {"prompt": "hi [[fake:sleep=1.5]]", "cwd": str(workdir)})
        assert handle["status"] == "running"
        assert handle["next"] is not None and "job_wait" in handle["next"]
        _, waited = await call(c, "job_wait", {"job_ids": [handle["job_id"]], "timeout_s": 20})
        _, status = await call(c, "job_status", {"job_id": handle["job_id"]})
    assert waited["jobs"][0]["status"] == "completed"
    assert status["output"] == "hi from mock"


async def test_auto_delegate_of_a_quick_job_returns_the_result_inline(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    async with client(make_settings) as c:
        _, env = await call(c, "delegate", {"prompt": "hi", "cwd": str(workdir)})
    assert env["status"] == "completed"


async def test_job_events_become_progress_notifications(make_settings: SettingsFactory, workdir: Path) -> None:
    messages: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    async with client(make_settings) as c:
        with anyio.fail_after(30):
            await c.call_tool(
                "delegate",
                {
                    "prompt": "hi [[fake:replay=claude_stream_tool_write]]",
                    "cwd": str(workdir),
                    "mode": "sync",
                },
                progress_callback=on_progress,
            )
    kinds = [m.split(":")[0] for m in messages]
    assert "session.started" in kinds and "tool.started" in kinds and "turn.completed" in kinds


async def test_a_failed_job_is_an_error_result_that_still_carries_the_envelope(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    async with client(make_settings) as c:
        failed, env = await call(
            c,
            "delegate",
            {"prompt": "x [[fake:replay=claude_stream_error_500]]", "cwd": str(workdir), "mode": "sync"},
        )
    assert failed
    assert env["status"] == "failed" and env["exit_code"] == 1
    assert env["error"]["code"] == "UPSTREAM_ERROR" and env["error"]["hint"]


async def test_long_output_is_bounded_and_job_result_pages_the_rest(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    async with client(make_settings, RELAY_OUTPUT_LIMIT="5") as c:
        _, env = await call(c, "delegate", {"prompt": "hi", "cwd": str(workdir), "mode": "sync"})
        assert env["output"] == "hi fr" and env["truncated"] is True and env["output_chars"] == 12
        assert env["next"] == f"job_result(job_id='{env['job_id']}', offset=5) for the rest of the output"
        _, page = await call(c, "job_result", {"job_id": env["job_id"], "offset": 5})
        _, transcript = await call(c, "job_result", {"job_id": env["job_id"], "view": "transcript"})
        _, raw = await call(c, "job_result", {"job_id": env["job_id"], "view": "events", "limit": 10})
    assert page["text"] == "om mock" and page["next_offset"] is None and page["complete"] is True
    assert "[assistant] hi from mock" in transcript["text"]
    assert raw["text"].startswith('{"type"') and raw["next_offset"] == 10


async def test_cancelling_a_sync_call_cancels_its_job(make_settings: SettingsFactory, workdir: Path) -> None:
    async with client(make_settings, RELAY_KILL_GRACE_S="0.2") as c:
        with anyio.move_on_after(1.0):
            await c.call_tool("delegate", {"prompt": "x [[fake:hang]]", "cwd": str(workdir), "mode": "sync"})
        with anyio.fail_after(15):
            while True:
                _, listing = await call(c, "job_list", {})
                if listing["jobs"] and listing["jobs"][0]["status"] not in ("queued", "running"):
                    break
                await anyio.sleep(0.05)
    assert listing["jobs"][0]["status"] == "cancelled"


async def test_an_async_job_survives_its_caller_going_away(make_settings: SettingsFactory, workdir: Path) -> None:
    settings = make_settings()
    server = build_server(settings)
    async with Client(server) as c:
        _, handle = await call(c, "delegate", {"prompt": "x [[fake:sleep=0.3]]", "cwd": str(workdir), "mode": "async"})
    # The first server process is gone; a new one adopts and finishes the job.
    async with Client(build_server(settings)) as c:
        _, waited = await call(c, "job_wait", {"job_ids": [handle["job_id"]], "timeout_s": 20})
    assert waited["jobs"][0]["status"] == "completed"


async def test_job_cancel_stops_a_running_job(make_settings: SettingsFactory, workdir: Path) -> None:
    async with client(make_settings, RELAY_KILL_GRACE_S="0.2") as c:
        _, handle = await call(c, "delegate", {"prompt": "x [[fake:hang]]", "cwd": str(workdir), "mode": "async"})
        failed, env = await call(c, "job_cancel", {"job_id": handle["job_id"]})
        status_failed, status_env = await call(c, "job_status", {"job_id": handle["job_id"]})
    assert env["status"] == "cancelled" and env["error"]["code"] == "CANCELLED"
    # job_cancel and job_status report one cancelled job the same way: an isError result with the envelope.
    assert failed and status_failed and status_env["status"] == "cancelled"


async def test_job_list_and_session_list_show_what_ran(make_settings: SettingsFactory, workdir: Path) -> None:
    async with client(make_settings) as c:
        await call(c, "delegate", {"prompt": "first task", "cwd": str(workdir), "mode": "sync"})
        _, jobs = await call(c, "job_list", {"status": ["completed"], "agent": "claude"})
        _, sessions = await call(c, "session_list", {})
        _, by_session = await call(c, "job_list", {"session_id": SESSION})
    assert [j["title"] for j in jobs["jobs"]] == ["first task"]
    assert sessions["sessions"][0]["session_id"] == SESSION
    assert sessions["sessions"][0]["cwd"] == str(workdir) and sessions["sessions"][0]["turns"] == 1
    assert sessions["sessions"][0]["title"] == "first task"
    assert len(by_session["jobs"]) == 1


async def test_status_reports_version_agents_and_jobs(make_settings: SettingsFactory) -> None:
    async with client(make_settings) as c:
        _, status = await call(c, "status", {})
    claude = next(a for a in status["agents"] if a["name"] == "claude")
    assert claude["found"] is True and claude["path"].endswith("fakes/claude")
    assert status["running_jobs"] == 0 and status["version"]


@pytest.mark.parametrize(
    ("tool", "args", "code"),
    [
        ("delegate", {"prompt": 5}, "INVALID_ARGUMENT"),
        ("delegate", {}, "INVALID_ARGUMENT"),
        ("delegate", {"prompt": "x", "mode": "later"}, "INVALID_ARGUMENT"),
        ("delegate", {"prompt": "x", "agent": "nobody"}, "AGENT_UNKNOWN"),
        ("delegate", {"prompt": "x", "cwd": "/"}, "CWD_NOT_ALLOWED"),
        ("job_status", {"job_id": "nope"}, "JOB_NOT_FOUND"),
        ("job_result", {"job_id": "nope"}, "JOB_NOT_FOUND"),
        ("job_result", {"job_id": "x", "offset": -1}, "INVALID_ARGUMENT"),
        ("job_wait", {"job_ids": []}, "INVALID_ARGUMENT"),
        ("job_cancel", {"job_id": "nope"}, "JOB_NOT_FOUND"),
    ],
)
async def test_bad_calls_are_error_results_with_code_and_hint(
    make_settings: SettingsFactory, tool: str, args: dict[str, Any], code: str
) -> None:
    async with client(make_settings) as c:
        failed, content = await call(c, tool, args)
    assert failed
    assert content["error"]["code"] == code and content["error"]["hint"]


async def test_the_tool_schemas_match_the_snapshot(make_settings: SettingsFactory) -> None:
    """A change to the MCP surface must show up as a diff of tests/server/tools.snapshot.json."""
    async with client(make_settings) as c:
        tools = await c.list_tools()
    current = {
        t.name: {"description": t.description, "input": t.input_schema, "output": t.output_schema} for t in tools.tools
    }
    snapshot = Path(__file__).with_name("tools.snapshot.json")
    if os.environ.get("RELAY_UPDATE_SNAPSHOT") == "1":
        snapshot.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
    expected = json.loads(snapshot.read_text())
    assert current == expected, "if the change is intended: RELAY_UPDATE_SNAPSHOT=1 pytest tests/server/test_tools.py"


async def test_a_claude_that_exits_non_zero_after_its_answer_completes_with_a_warning(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    async with client(make_settings) as c:
        failed, env = await call(c, "delegate", {"prompt": "x [[fake:exit=3]]", "cwd": str(workdir), "mode": "sync"})
    assert not failed
    assert env["status"] == "completed" and env["exit_code"] == 3 and env["error"] is None
    assert len(env["warnings"]) == 1 and "exited with code 3" in env["warnings"][0]
