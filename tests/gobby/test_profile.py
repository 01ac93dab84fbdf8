"""`--profile gobby`: exactly seed 003's direct tools, and seed 003's "Example: Task Workflow" run verbatim."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from relay.config import Settings
from relay.server.app import build_server
from relay.tracker.model import BRIEF_FIELDS
from tests.conftest import SettingsFactory

from .conftest import CALL_TIMEOUT_S, FAKE_CODEX, tool

pytestmark = pytest.mark.anyio
RELAY = str(Path(sys.executable).with_name("relay"))
# Seed 003's "Direct Tools", every one of them (the codex three because a codex CLI is found).
SEED_DIRECT_TOOLS = sorted(
    [
        "status",
        "list_mcp_servers",
        "call_tool",
        "list_tools",
        "get_tool_schema",
        "read_mcp_resource",
        "add_mcp_server",
        "remove_mcp_server",
        "import_mcp_server",
        "execute_code",
        "process_large_dataset",
        "recommend_tools",
        "call_hook",
        "codex",
        "codex_list_threads",
        "codex_archive_thread",
    ]
)
SEED_TASK_TOOLS = {
    "create_task", "get_task", "update_task", "close_task", "delete_task", "list_tasks",
    "add_dependency", "remove_dependency", "get_dependency_tree", "check_dependency_cycles",
    "list_ready_tasks", "list_blocked_tasks", "link_task_to_session", "get_session_tasks",
    "get_task_sessions", "sync_tasks", "get_sync_status",
}  # fmt: skip


async def test_profile_gobby_lists_exactly_seed_003s_direct_tools(gobby_settings: Settings) -> None:
    async with Client(build_server(gobby_settings)) as c:
        tools = (await c.list_tools()).tools
    assert sorted(t.name for t in tools) == SEED_DIRECT_TOOLS
    schemas = {t.name: t.input_schema for t in tools}
    assert schemas["execute_code"]["required"] == ["code"]
    assert set(schemas["execute_code"]["properties"]) == {"code", "language", "context", "timeout"}
    assert schemas["execute_code"]["properties"]["language"]["default"] == "python"
    assert set(schemas["process_large_dataset"]["properties"]) == {"data", "operation", "parameters", "timeout"}
    assert sorted(schemas["process_large_dataset"]["required"]) == ["data", "operation"]
    assert set(schemas["call_hook"]["properties"]) == {"hook_type", "params", "source"}
    assert schemas["call_hook"]["required"] == ["hook_type"]
    assert set(schemas["codex"]["properties"]) == {"prompt", "thread_id", "cwd", "model", "sandbox", "approval_policy"}
    assert schemas["codex"]["required"] == ["prompt"]
    assert set(schemas["codex_list_threads"]["properties"]) == {"limit", "cursor"}
    assert schemas["codex_archive_thread"]["required"] == ["thread_id"]


async def test_without_a_codex_cli_the_codex_tools_are_not_offered(
    make_settings: SettingsFactory, project_dir: Path
) -> None:
    settings = make_settings('[agents.codex]\ncommand = "/nonexistent/codex"\n').with_(profile="gobby")
    async with Client(build_server(settings)) as c:
        names = sorted(t.name for t in (await c.list_tools()).tools)
    assert names == [n for n in SEED_DIRECT_TOOLS if not n.startswith("codex")]


async def test_seed_003_example_task_workflow_runs_verbatim_on_profile_gobby(
    gobby_settings: Settings, project_dir: Path
) -> None:
    async with Client(build_server(gobby_settings)) as c:
        # 1. List available task tools
        listed = await tool(c, "list_tools", server="gobby-tasks")
        assert listed["success"] is True and listed["server"] == "gobby-tasks"
        assert {t["name"] for t in listed["tools"]} >= SEED_TASK_TOOLS
        assert all(set(t) == {"name", "brief"} and t["brief"] for t in listed["tools"])

        # 2. Get schema for create_task
        schema = await tool(c, "get_tool_schema", server_name="gobby-tasks", tool_name="create_task")
        assert (schema["success"], schema["server"], schema["tool"]["name"]) == (True, "gobby-tasks", "create_task")
        assert set(schema["tool"]) == {"name", "description", "inputSchema"}
        input_schema = schema["tool"]["inputSchema"]
        assert input_schema["type"] == "object"
        assert input_schema["properties"]["title"] == {"type": "string", "description": "Task title"}
        assert input_schema["properties"]["priority"]["default"] == 2
        assert "title" in input_schema["required"]

        # 3. Create a task
        created = await tool(
            c,
            "call_tool",
            server_name="gobby-tasks",
            tool_name="create_task",
            arguments={
                "title": "Implement authentication",
                "priority": 1,
                "task_type": "feature",
                "session_id": "<your_session_id>",  # Required
            },
        )
        assert created["success"] is True
        task = created["result"]
        assert re.fullmatch(r"gt-[0-9a-f]{6}", task["id"])
        assert (task["title"], task["priority"], task["type"], task["status"]) == (
            "Implement authentication",
            1,
            "feature",
            "open",
        )

        # 4. Find ready work
        ready = await tool(
            c, "call_tool", server_name="gobby-tasks", tool_name="list_ready_tasks", arguments={"limit": 5}
        )
        assert ready == {"success": True, "result": {"tasks": [{k: task[k] for k in BRIEF_FIELDS}], "count": 1}}

        # 5. Claim a task: the seed's id is a placeholder (no such task here), so it fails clearly; then the real one.
        claim = {"task_id": "gt-abc123", "status": "in_progress"}
        missing = await tool(c, "call_tool", server_name="gobby-tasks", tool_name="update_task", arguments=claim)
        assert (missing["success"], missing["error"]) == (False, "Task gt-abc123 not found")
        claim["task_id"] = task["id"]
        claimed = await tool(c, "call_tool", server_name="gobby-tasks", tool_name="update_task", arguments=claim)
        assert (claimed["success"], claimed["result"]["status"]) == (True, "in_progress")

        # 6. Close when done
        closing = {"task_id": task["id"], "reason": "completed"}
        closed = await tool(c, "call_tool", server_name="gobby-tasks", tool_name="close_task", arguments=closing)
        assert closed["success"] is True
        assert (closed["result"]["status"], closed["result"]["closed_reason"]) == ("closed", "completed")


async def test_relay_serve_profile_gobby_over_stdio_lists_the_direct_tools_and_runs_code(
    gobby_settings: Settings, relay_home: Path, project_dir: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RELAY_PROFILE", "RELAY_TOOLSETS")}
    env |= {"RELAY_HOME": str(relay_home), "PATH": f"{FAKE_CODEX.parent}:{env.get('PATH', '')}"}
    params = StdioServerParameters(command=RELAY, args=["serve", "--profile", "gobby"], env=env, cwd=str(project_dir))
    with anyio.fail_after(CALL_TIMEOUT_S):
        async with Client(params) as c:
            names = sorted(t.name for t in (await c.list_tools()).tools)
            ran = await tool(c, "execute_code", code="print(sum(range(10)))")
    assert names == SEED_DIRECT_TOOLS
    assert (ran["success"], ran["result"], ran["language"]) == (True, "45", "python")


async def test_status_and_list_mcp_servers_answer_in_seed_003s_shape(gobby_settings: Settings) -> None:
    async with Client(build_server(gobby_settings)) as c:
        status = (await c.call_tool("status", {})).structured_content
        servers = await tool(c, "list_mcp_servers")
    assert status is not None
    seed_fields = {"status", "uptime", "uptime_seconds", "pid", "port", "mcp_servers", "mcp_server_count"}
    assert seed_fields | {"formatted_message"} <= set(status)
    assert (status["status"], status["pid"], status["mcp_servers"], status["mcp_server_count"]) == (
        "running",
        os.getpid(),
        [],
        0,
    )
    assert servers == {"servers": []}


@pytest.mark.parametrize(
    ("name", "args", "error_type"),
    [
        ("execute_code", {"code": "print(1)", "langauge": "python"}, "ValueError"),  # an unknown argument
        ("execute_code", {}, "ValueError"),  # a missing one
        ("process_large_dataset", {"data": [1], "operation": "sort", "timeout": "soon"}, "ValueError"),
        ("call_hook", {"hook_type": 7}, "ValueError"),
        ("status", {"verbose": True}, "ValueError"),
        ("list_tools", {"server": "nowhere"}, "SERVER_NOT_FOUND"),
        ("no_such_tool", {}, "TOOL_NOT_FOUND"),
    ],
)
async def test_every_error_under_profile_gobby_has_the_seeds_envelope(
    gobby_settings: Settings, name: str, args: dict[str, Any], error_type: str
) -> None:
    async with Client(build_server(gobby_settings)) as c:
        reply = await tool(c, name, **args)
    assert reply["success"] is False and reply["error_type"] == error_type
    assert isinstance(reply["error"], str) and reply["error"] and reply["hint"]


async def test_call_tool_to_an_unknown_internal_server_says_internal_server_not_found_first(
    gobby_settings: Settings,
) -> None:
    async with Client(build_server(gobby_settings)) as c:
        reply = await tool(c, "call_tool", server_name="gobby-taks", tool_name="list_tasks")
    assert reply["error"] == "Internal server 'gobby-taks' not found"
    assert reply["hint"].startswith("did you mean 'gobby-tasks'?") or "gobby-tasks" in reply["hint"]
    assert "gobby-tasks" in reply["available_internal_servers"] and reply["error_type"] == "SERVER_NOT_FOUND"
