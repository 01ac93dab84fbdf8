"""Toolset `tasks` / `gobby-tasks` over MCP: seed 003's task workflow verbatim through the discovery tools."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from relay.config import load_settings
from relay.server.app import build_server
from relay.tracker.model import BRIEF_FIELDS
from tests.conftest import SettingsFactory

from .conftest import git, init_repo, lines

pytestmark = pytest.mark.anyio
CALL_TIMEOUT_S = 60
SEED_TOOLS = {
    "create_task", "get_task", "update_task", "close_task", "delete_task", "list_tasks",
    "add_dependency", "remove_dependency", "get_dependency_tree", "check_dependency_cycles",
    "list_ready_tasks", "list_blocked_tasks", "link_task_to_session", "get_session_tasks",
    "get_task_sessions", "sync_tasks", "get_sync_status",
}  # fmt: skip
GOBBY_EXTRAS = {"expand_task", "validate_task", "add_label", "remove_label"}
FULL_FIELDS = {
    "id", "project_id", "title", "status", "priority", "type", "created_at", "updated_at", "description",
    "parent_task_id", "discovered_in_session_id", "assignee", "labels", "closed_reason", "platform_id",
    "validation_status", "validation_feedback", "original_instruction",
}  # fmt: skip


@pytest.fixture
def project_dir(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """relay runs in a git repository (the caller's project), as when a client starts it there."""
    repo = init_repo(workdir / "proj")
    monkeypatch.chdir(repo)
    return repo


async def tool(c: Client, name: str, **args: Any) -> dict[str, Any]:
    with anyio.fail_after(CALL_TIMEOUT_S):
        result = await c.call_tool(name, args)
    assert result.structured_content is not None
    assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]
    return result.structured_content


async def call_tool(c: Client, server_name: str, tool_name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Seed 003's `call_tool(server_name, tool_name, arguments)`."""
    return await tool(c, "call_tool", server_name=server_name, tool_name=tool_name, arguments=arguments)


async def test_seed_003_task_workflow_runs_verbatim_and_each_step_returns_the_documented_shape(
    make_settings: SettingsFactory, project_dir: Path
) -> None:
    async with Client(build_server(make_settings())) as c:
        # 1. List available task tools
        listed = await tool(c, "list_tools", server="gobby-tasks")
        assert listed["success"] is True
        names = {t["name"] for t in listed["tools"]}
        assert names == SEED_TOOLS | GOBBY_EXTRAS
        briefs = {t["name"]: t["brief"] for t in listed["tools"]}
        assert briefs["create_task"].startswith("Create a new task in the current project.")
        assert briefs["list_tasks"].startswith("List tasks with optional filters")

        # 2. Get schema for create_task
        schema = await tool(c, "get_tool_schema", server_name="gobby-tasks", tool_name="create_task")
        assert schema["success"] is True
        assert schema["tool"]["name"] == "create_task"
        assert schema["tool"]["description"].startswith("Create a new task in the current project.")
        props = schema["tool"]["inputSchema"]["properties"]
        assert props["title"]["type"] == "string"
        assert props["title"]["description"] == "Task title"
        assert props["priority"]["default"] == 2
        assert set(schema["tool"]["inputSchema"]["required"]) == {"title", "session_id"}

        # 3. Create a task
        created = await call_tool(
            c,
            "gobby-tasks",
            "create_task",
            {
                "title": "Implement authentication",
                "priority": 1,
                "task_type": "feature",
                "session_id": "<your_session_id>",  # Required
            },
        )
        assert created["success"] is True
        task = created["result"]
        assert set(task) >= FULL_FIELDS
        assert re.fullmatch(r"gt-[0-9a-f]{6}", task["id"])
        assert (task["title"], task["priority"], task["type"], task["status"]) == (
            "Implement authentication",
            1,
            "feature",
            "open",
        )
        task_id = task["id"]

        # 4. Find ready work
        ready = await call_tool(c, "gobby-tasks", "list_ready_tasks", {"limit": 5})
        assert ready == {"success": True, "result": {"tasks": [_brief(task)], "count": 1}}
        assert list(ready["result"]["tasks"][0]) == list(BRIEF_FIELDS)

        # 5. Claim a task (the seed's placeholder id names no task: a clear failure, then the real id)
        placeholder = await call_tool(
            c, "gobby-tasks", "update_task", {"task_id": "gt-abc123", "status": "in_progress"}
        )
        assert placeholder == {
            "success": False,
            "server": "gobby-tasks",
            "tool": "update_task",
            "error": "Task gt-abc123 not found",
            "error_type": "TASK_NOT_FOUND",
            "code": "TASK_NOT_FOUND",
            "hint": "list_tasks shows this project's tasks; tasks are scoped by project (pass project=<repository path>)",
        }
        claimed = await call_tool(c, "gobby-tasks", "update_task", {"task_id": task_id, "status": "in_progress"})
        assert claimed["success"] is True
        assert claimed["result"]["status"] == "in_progress"
        assert claimed["result"]["updated_at"] > task["updated_at"]

        # 6. Close when done
        closed = await call_tool(c, "gobby-tasks", "close_task", {"task_id": task_id, "reason": "completed"})
        assert closed["success"] is True
        assert (closed["result"]["status"], closed["result"]["closed_reason"]) == ("closed", "completed")

        sessions = await call_tool(c, "gobby-tasks", "get_task_sessions", {"task_id": task_id})
        assert [s["session_id"] for s in sessions["result"]["sessions"]] == ["<your_session_id>"]
    # Shutting down flushes the pending (debounced) export into the repository.
    exported = (project_dir / ".gobby" / "tasks.jsonl").read_text().splitlines()
    assert [json.loads(line)["status"] for line in exported] == ["closed"]


def _brief(task: dict[str, Any]) -> dict[str, Any]:
    return {k: task[k] for k in BRIEF_FIELDS}


async def test_create_task_without_session_id_is_refused(make_settings: SettingsFactory, project_dir: Path) -> None:
    async with Client(build_server(make_settings())) as c:
        out = await call_tool(c, "gobby-tasks", "create_task", {"title": "Fix bug", "priority": 1})
    assert out["success"] is False
    assert "session_id" in out["error"]


async def test_dependencies_cycles_blocked_lists_and_trees_over_mcp(
    make_settings: SettingsFactory, project_dir: Path
) -> None:
    async with Client(build_server(make_settings(), port=None)) as c:

        async def make(title: str) -> str:
            out = await call_tool(c, "tasks", "create_task", {"title": title, "session_id": "s1"})
            return out["result"]["id"]

        a, b, c_id = await make("a"), await make("b"), await make("c")
        added = await call_tool(c, "tasks", "add_dependency", {"task_id": a, "depends_on": b})
        assert added["result"]["message"] == f"Task {a} blocked by {b}"
        await call_tool(c, "tasks", "add_dependency", {"task_id": b, "depends_on": c_id})
        refused = await call_tool(c, "tasks", "add_dependency", {"task_id": c_id, "depends_on": a})
        assert refused["success"] is False
        assert (refused["error_type"], refused["code"]) == ("ValueError", "INVALID_ARGUMENT")  # seed 003: a ValueError
        assert f"would create a cycle: {c_id} → {a} → {b} → {c_id}" in refused["error"]
        assert (await call_tool(c, "tasks", "check_dependency_cycles", {}))["result"] == {"has_cycles": False}

        blocked = (await call_tool(c, "tasks", "list_blocked_tasks", {}))["result"]
        assert [(t["id"], [x["id"] for x in t["blocked_by"]]) for t in blocked["blocked_tasks"]] == [
            (a, [b]),
            (b, [c_id]),
        ]
        ready = (await call_tool(c, "tasks", "list_ready_tasks", {}))["result"]
        assert [t["id"] for t in ready["tasks"]] == [c_id]
        tree = (await call_tool(c, "tasks", "get_dependency_tree", {"task_id": a, "direction": "blockers"}))["result"]
        assert tree["blockers"][0]["id"] == b and tree["blockers"][0]["blockers"][0]["id"] == c_id

        full = (await call_tool(c, "tasks", "get_task", {"task_id": a}))["result"]
        assert [d["depends_on"] for d in full["dependencies"]["blocked_by"]] == [b]
        assert set(full) >= FULL_FIELDS | {"dependencies"}

        labelled = (await call_tool(c, "tasks", "add_label", {"task_id": a, "label": "backend"}))["result"]
        assert labelled["labels"] == ["backend"]
        listed = (await call_tool(c, "tasks", "list_tasks", {"label": "backend"}))["result"]
        assert [t["id"] for t in listed["tasks"]] == [a] and listed["count"] == 1
        assert (await call_tool(c, "tasks", "remove_label", {"task_id": a, "label": "backend"}))["result"][
            "labels"
        ] == []

        removed = await call_tool(c, "tasks", "remove_dependency", {"task_id": b, "depends_on": c_id})
        assert removed["result"]["message"] == "Dependency removed"
        assert [t["id"] for t in (await call_tool(c, "tasks", "list_ready_tasks", {}))["result"]["tasks"]] == [b, c_id]

        await call_tool(c, "tasks", "link_task_to_session", {"task_id": b, "session_id": "s2", "action": "worked_on"})
        session = (await call_tool(c, "tasks", "get_session_tasks", {"session_id": "s2"}))["result"]
        assert [(t["id"], t["action"]) for t in session["tasks"]] == [(b, "worked_on")]

        missing = await call_tool(c, "tasks", "get_task", {"task_id": "gt-000000"})
        assert (missing["success"], missing["error_type"]) == (False, "TASK_NOT_FOUND")
        deleted = await call_tool(c, "tasks", "delete_task", {"task_id": c_id})
        assert deleted["result"]["message"] == f"Task {c_id} deleted"


async def test_sync_tools_export_and_report_status(make_settings: SettingsFactory, project_dir: Path) -> None:
    async with Client(build_server(make_settings(RELAY_TASKS_AUTO_EXPORT="0"))) as c:
        assert (await call_tool(c, "gobby-tasks", "get_sync_status", {}))["result"]["status"] == "no_file"
        await call_tool(c, "gobby-tasks", "create_task", {"title": "t", "session_id": "s"})
        synced = (await call_tool(c, "gobby-tasks", "sync_tasks", {"direction": "both"}))["result"]
        assert (synced["import"], synced["export"]) == ("no_file", "completed")
        status = (await call_tool(c, "gobby-tasks", "get_sync_status", {}))["result"]
        assert (status["status"], status["synced"]) == ("available", True)
        assert status["last_exported"] and status["hash"]


async def test_a_task_deleted_over_mcp_is_deleted_on_another_clone_after_a_pull(
    make_settings: SettingsFactory, project_dir: Path, tmp_path: Path
) -> None:
    settings_a = make_settings(RELAY_TASKS_AUTO_EXPORT="0")
    async with Client(build_server(settings_a)) as a:

        async def make(title: str, parent: str | None = None) -> str:
            args = {"title": title, "session_id": "s", "parent_task_id": parent}
            return (await call_tool(a, "tasks", "create_task", args))["result"]["id"]

        epic = await make("epic")
        sub, kept = await make("subtask", epic), await make("kept")
        await call_tool(a, "tasks", "sync_tasks", {})
    git(project_dir, "add", ".gobby")
    git(project_dir, "commit", "-q", "-m", "tasks")
    clone = tmp_path / "clone-b"
    git(tmp_path, "clone", "-q", str(project_dir), str(clone))
    home_b = tmp_path / "home-b"
    env_b = {"RELAY_HOME": str(home_b), "HOME": str(home_b), "PATH": os.environ.get("PATH", "")}
    settings_b = load_settings({**env_b, "RELAY_TASKS_AUTO_EXPORT": "0"}, cwd=clone)
    async with Client(build_server(settings_b)) as b:
        listed = (await call_tool(b, "tasks", "list_tasks", {"project": str(clone)}))["result"]
        assert sorted(t["id"] for t in listed["tasks"]) == sorted([epic, sub, kept])  # imported on first use

        async with Client(build_server(settings_a)) as a:
            deleted = (await call_tool(a, "tasks", "delete_task", {"task_id": epic, "cascade": True}))["result"]
            assert sorted(deleted["deleted"]) == sorted([epic, sub])
            exported = (await call_tool(a, "tasks", "sync_tasks", {"direction": "export"}))["result"]
            assert (exported["export_details"]["tasks"], exported["export_details"]["tombstones"]) == (1, 2)
            status = (await call_tool(a, "tasks", "get_sync_status", {}))["result"]
            assert (status["status"], status["synced"]) == ("available", True)
        git(project_dir, "commit", "-q", "-am", "delete the epic")
        git(clone, "pull", "-q", "--no-edit", "origin", "HEAD")

        synced = (await call_tool(b, "tasks", "sync_tasks", {"project": str(clone)}))["result"]
        assert (synced["import_stats"]["deleted"], synced["export_details"]["written"]) == (2, False)
        listed = (await call_tool(b, "tasks", "list_tasks", {"project": str(clone)}))["result"]
        assert [t["id"] for t in listed["tasks"]] == [kept]
        status = (await call_tool(b, "tasks", "get_sync_status", {"project": str(clone)}))["result"]
        assert (status["status"], status["synced"]) == ("available", True)
    tombstones = {r["id"]: r["cascade"] for r in lines(clone / ".gobby" / "tasks.jsonl") if r.get("deleted")}
    assert tombstones == {epic: True, sub: True}


async def test_a_project_outside_the_allowed_roots_is_refused(
    make_settings: SettingsFactory, project_dir: Path, tmp_path: Path
) -> None:
    elsewhere = init_repo(tmp_path / "elsewhere")
    async with Client(build_server(make_settings())) as c:
        out = await call_tool(c, "gobby-tasks", "list_tasks", {"project": str(elsewhere)})
    assert (out["success"], out["error_type"]) == (False, "CWD_NOT_ALLOWED")


async def test_expand_and_validate_without_a_model_key_say_which_key_to_set(
    make_settings: SettingsFactory, project_dir: Path
) -> None:
    async with Client(build_server(make_settings())) as c:
        made = await call_tool(c, "gobby-tasks", "create_task", {"title": "big", "session_id": "s"})
        task_id = made["result"]["id"]
        expand = await call_tool(c, "gobby-tasks", "expand_task", {"task_id": task_id})
        validate = await call_tool(c, "gobby-tasks", "validate_task", {"task_id": task_id, "changes_summary": "did it"})
    for out, name in ((expand, "expand_task"), (validate, "validate_task")):
        assert (out["success"], out["error_type"]) == (False, "AUTH_MISSING")
        assert out["error"].startswith(f"{name} needs a model")
        assert "ANTHROPIC_API_KEY" in out["hint"]


async def test_relay_serve_toolsets_tasks_over_stdio_scopes_by_its_cwd_and_exports_at_shutdown(
    relay_home: Path, workdir: Path
) -> None:
    repo = init_repo(workdir / "proj")
    (repo / "src").mkdir()
    params = StdioServerParameters(
        command=str(Path(sys.executable).with_name("relay")),
        args=["serve", "--toolsets", "tasks"],
        env={**os.environ, "RELAY_HOME": str(relay_home)},
        cwd=str(repo / "src"),  # a subdirectory: the project is still the repository
    )
    with anyio.fail_after(CALL_TIMEOUT_S):
        async with Client(params) as c:
            names = {t.name for t in (await c.list_tools()).tools}
            made = (await c.call_tool("create_task", {"title": "over stdio", "session_id": "s"})).structured_content
            ready = (await c.call_tool("list_ready_tasks", {})).structured_content
    assert names == SEED_TOOLS | GOBBY_EXTRAS
    assert made is not None and ready is not None
    assert "tasks" in ready, (made, ready)
    assert [t["id"] for t in ready["tasks"]] == [made["id"]]
    exported = [json.loads(line) for line in (repo / ".gobby" / "tasks.jsonl").read_text().splitlines()]
    assert [(r["id"], r["title"], r["project_id"]) for r in exported] == [(made["id"], "over stdio", "proj")]


async def test_concurrent_calls_from_a_fresh_server_share_one_tracker_and_lose_nothing(
    make_settings: SettingsFactory, project_dir: Path
) -> None:
    made: list[str] = []
    async with Client(build_server(make_settings(RELAY_TASKS_AUTO_EXPORT="0"))) as c:

        async def create(i: int) -> None:
            out = await call_tool(c, "tasks", "create_task", {"title": f"parallel {i}", "session_id": "s"})
            made.append(out["result"]["id"])

        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(create, i)
        listed = (await call_tool(c, "tasks", "list_tasks", {"limit": 100}))["result"]
    assert len(set(made)) == 20
    assert sorted(t["id"] for t in listed["tasks"]) == sorted(made)
