"""call_hook over MCP: a session's round trip, its summary (model-written or not), session_list, task links."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from relay.config import Settings
from relay.hooks import HOOK_TYPES, normalize, title_from
from relay.server.app import build_server
from tests.api.mock_servers import MockServer, Reply
from tests.conftest import SettingsFactory

from .conftest import FAKE_CODEX, tool

pytestmark = pytest.mark.anyio


@pytest.fixture
def anthropic_mock() -> Iterator[MockServer]:
    with MockServer("anthropic") as server:
        yield server


def test_every_hook_type_is_accepted_in_camel_and_kebab_case() -> None:
    for name, kebab in HOOK_TYPES.items():
        assert normalize(name) == normalize(kebab) == name
    assert normalize("user_prompt_submit") == "UserPromptSubmit"
    assert normalize("SessionBegin") is None


def test_a_title_is_the_first_line_of_the_prompt_cut_at_a_word() -> None:
    assert title_from("\n  Fix the   login bug\nthen more") == "Fix the login bug"
    long = "word " * 40
    assert title_from(long).endswith("…") and len(title_from(long)) <= 81


async def hook(c: Client, hook_type: str, params: dict[str, Any], source: str = "Codex") -> dict[str, Any]:
    return await tool(c, "call_hook", hook_type=hook_type, params=params, source=source)


async def test_a_session_round_trip_registers_titles_pauses_and_summarizes_and_the_next_one_restores_it(
    gobby_settings: Settings, project_dir: Path
) -> None:
    async with Client(build_server(gobby_settings)) as c:
        # The seed's own example.
        started = await tool(
            c,
            "call_hook",
            hook_type="SessionStart",
            params={"session_id": "codex-abc123", "source": "startup"},
            source="Codex",
        )
        assert started["success"] is True
        assert (started["hook_type"], started["normalized_type"]) == ("SessionStart", "session-start")
        first = started["result"]
        assert isinstance(first, dict)
        assert (first["session_id"], first["parent_session_id"], first["restored_summary"]) == (
            "codex-abc123",
            None,
            None,
        )
        assert (first["source"], first["project"], first["status"], first["is_new"]) == (
            "Codex",
            str(project_dir),
            "active",
            True,
        )
        assert isinstance(first["machine_id"], str) and first["machine_id"]

        titled = await hook(
            c, "prompt-submit", {"session_id": "codex-abc123", "prompt": "Add login with JWT\nand tests"}
        )
        assert titled["result"] == {
            "session_id": "codex-abc123",
            "title": "Add login with JWT",
            "prompt_count": 1,
            "status": "active",
        }
        await hook(c, "UserPromptSubmit", {"session_id": "codex-abc123", "prompt": "now the refresh tokens"})

        # A task the session works on, linked through the tracker.
        created = await tool(
            c,
            "call_tool",
            server_name="gobby-tasks",
            tool_name="create_task",
            arguments={"title": "JWT refresh tokens", "session_id": "codex-abc123"},
        )
        task_id = created["result"]["id"]
        await tool(
            c,
            "call_tool",
            server_name="gobby-tasks",
            tool_name="link_task_to_session",
            arguments={"task_id": task_id, "session_id": "codex-abc123"},
        )

        recorded = await hook(c, "PreToolUse", {"session_id": "codex-abc123", "tool_name": "shell"})
        assert recorded["result"] == {
            "session_id": "codex-abc123",
            "recorded": True,
            "events": {"PreToolUse": 1},
            "decision": "allow",
        }

        paused = await hook(c, "Stop", {"session_id": "codex-abc123"})
        assert paused["result"] == {"session_id": "codex-abc123", "status": "paused", "title": "Add login with JWT"}

        listed = await tool(c, "call_tool", server_name="core", tool_name="session_list", arguments={})
        mine = [s for s in listed["result"]["sessions"] if s["session_id"] == "codex-abc123"]
        assert mine == [
            {
                "agent": "codex",
                "session_id": "codex-abc123",
                "cwd": str(project_dir),
                "model": None,
                "permission": "external",
                "title": "Add login with JWT",
                "turns": 2,
                "total_cost_usd": 0.0,
                "last_used_at": mine[0]["last_used_at"],
                "origin": "hook",
                "status": "paused",
            }
        ]

        ended = await hook(c, "session-end", {"session_id": "codex-abc123"})
        result = ended["result"]
        assert isinstance(result, dict)
        assert (result["status"], result["summary_source"]) == ("ended", "prompts")
        summary = str(result["summary"])
        assert "Add login with JWT" in summary and "now the refresh tokens" in summary
        assert f"{task_id} JWT refresh tokens [open]" in summary
        assert [(t["id"], t["action"]) for t in result["tasks"]] == [(task_id, "discovered"), (task_id, "worked_on")]

        # The next session of the project gets that summary back; after /clear the old one is its parent.
        nxt = await hook(c, "SessionStart", {"session_id": "gem-2", "source": "startup"}, source="Gemini")
        assert nxt["success"] is True
        second = await hook(c, "SessionStart", {"session_id": "gem-3", "source": "clear"}, source="Gemini")
        assert second["result"]["restored_from"] == "gem-2"
        assert second["result"]["parent_session_id"] == "gem-2"
        restored = nxt["result"]
        assert isinstance(restored, dict)
        assert (restored["restored_from"], restored["restored_summary"], restored["parent_session_id"]) == (
            "codex-abc123",
            summary,
            None,
        )

        sessions = await tool(
            c, "call_tool", server_name="gobby-tasks", tool_name="get_task_sessions", arguments={"task_id": task_id}
        )
        assert {s["session_id"] for s in sessions["result"]["sessions"]} == {"codex-abc123"}


async def test_session_end_summary_is_written_by_the_configured_model(
    make_settings: SettingsFactory, project_dir: Path, anthropic_mock: MockServer
) -> None:
    anthropic_mock.script(Reply(text="The user added JWT login; refresh tokens remain."))
    settings = make_settings(
        f'[agents.codex]\ncommand = "{FAKE_CODEX}"\n',
        RELAY_ANTHROPIC_BASE_URL=anthropic_mock.base_url,
        ANTHROPIC_API_KEY="sk-ant-test-0123456789abcdefghij",
        RELAY_ASK_MODEL="sonnet",
    ).with_(profile="gobby")
    async with Client(build_server(settings)) as c:
        await hook(c, "SessionStart", {"session_id": "s-1", "cwd": str(project_dir)})
        await hook(c, "PromptSubmit", {"session_id": "s-1", "prompt": "Add JWT login"})
        ended = await hook(c, "SessionEnd", {"session_id": "s-1"})
        again = await hook(c, "SessionStart", {"session_id": "s-2", "cwd": str(project_dir)})
    assert ended["result"]["summary"] == "The user added JWT login; refresh tokens remain."
    assert ended["result"]["summary_source"] == "model"
    asked = anthropic_mock.requests[-1].body
    assert "Add JWT login" in str(asked)
    assert again["result"]["restored_summary"] == "The user added JWT login; refresh tokens remain."


async def test_unknown_hook_types_and_missing_session_ids_fail_in_seed_shape(gobby_settings: Settings) -> None:
    async with Client(build_server(gobby_settings)) as c:
        unknown = await tool(c, "call_hook", hook_type="SessionBegin", params={"session_id": "x"})
        missing = await tool(c, "call_hook", hook_type="Stop", params={})
    assert unknown["success"] is False
    assert unknown["error"] == "Unknown hook type: SessionBegin"
    assert "SessionStart" in unknown["available_types"] and "session-start" in unknown["available_types"]
    assert (missing["success"], missing["error"], missing["error_type"]) == (
        False,
        "session_id is required",
        "ValueError",
    )


async def test_a_misspelt_hook_type_is_refused_naming_the_nearest_one(gobby_settings: Settings) -> None:
    async with Client(build_server(gobby_settings)) as c:
        unknown = await tool(c, "call_hook", hook_type="SessionStrat", params={"session_id": "x"})
    assert (unknown["success"], unknown["error"], unknown["error_type"]) == (
        False,
        "Unknown hook type: SessionStrat",
        "ValueError",
    )
    assert unknown["hint"] == (
        "did you mean `SessionStart` or `SessionEnd` or `SubagentStart`? hook types: " + ", ".join(HOOK_TYPES)
    )
