"""codex, codex_list_threads, codex_archive_thread on profile gobby, against the fake codex CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from relay.config import Settings
from relay.server.app import build_server
from tests.argv import opt
from tests.conftest import SettingsFactory

from .conftest import FAKE_CODEX, tool

pytestmark = pytest.mark.anyio
THREAD = "01a1fdea-b50b-74e3-a908-2db5de7dba18"  # what the recording's thread.started announces


@pytest.fixture
def argv_log(tmp_path: Path) -> Path:
    return tmp_path / "codex-argv.jsonl"


@pytest.fixture
def codex_settings(make_settings: SettingsFactory, project_dir: Path, argv_log: Path) -> Settings:
    config = f'[agents.codex]\ncommand = "{FAKE_CODEX}"\n[agents.codex.env]\nFAKE_ARGV_LOG = "{argv_log}"\n'
    return make_settings(config).with_(profile="gobby")


def runs(argv_log: Path) -> list[list[str]]:
    return [json.loads(line)["argv"] for line in argv_log.read_text().splitlines()]


def flag(argv: list[str], name: str) -> str | None:
    """A codex option's value as relay passes it (`--model=`, `--cd=`, or `-s value`), None when absent."""
    try:
        return opt(argv, *{"-m": ("--model",), "-C": ("--cd",)}.get(name, ()), name)
    except KeyError:
        return None


async def test_codex_runs_a_turn_as_a_job_and_continues_its_thread(
    codex_settings: Settings, project_dir: Path, argv_log: Path
) -> None:
    async with Client(build_server(codex_settings)) as c:
        first = await tool(c, "codex", prompt="Help me refactor the parser", sandbox="workspaceWrite", model="o3")
        again = await tool(c, "codex", prompt="Now add tests", thread_id=THREAD, approval_policy="never")
        jobs = await tool(c, "call_tool", server_name="core", tool_name="job_list", arguments={"agent": "codex"})
    assert first["success"] is True
    assert (first["thread_id"], first["session_id"], first["is_continuation"]) == (THREAD, THREAD, False)
    assert first["response"] == "MOCK-OK: hello from the mock model"
    assert first["usage"]["input"] == 11 and first["usage"]["output"] == 7
    assert first["items"] == [{"type": "message", "text": "MOCK-OK: hello from the mock model"}]
    assert again["success"] is True
    assert (again["thread_id"], again["is_continuation"], again["approval_policy"]) == (THREAD, True, "never")
    new, resumed = runs(argv_log)
    assert (flag(new, "-s"), flag(new, "-m"), flag(new, "-C")) == ("workspace-write", "o3", str(project_dir))
    assert resumed[-4:] == ["resume", "--", THREAD, "Now add tests"]
    listed = {j["job_id"] for j in jobs["result"]["jobs"]}
    assert {first["turn_id"], again["turn_id"]} <= listed


async def test_threads_are_listed_paged_and_archived(codex_settings: Settings, project_dir: Path) -> None:
    async with Client(build_server(codex_settings)) as c:
        await tool(c, "codex", prompt="Help me refactor the parser")
        # A second thread, reported by Codex itself through the hooks.
        await tool(
            c,
            "call_hook",
            hook_type="SessionStart",
            params={"session_id": "thr-hooked", "source": "startup", "cwd": str(project_dir)},
            source="Codex",
        )
        await tool(
            c, "call_hook", hook_type="PromptSubmit", params={"session_id": "thr-hooked", "prompt": "Explain the lexer"}
        )
        both = await tool(c, "codex_list_threads")
        sessions = await tool(
            c, "call_tool", server_name="core", tool_name="session_list", arguments={"agent": "codex"}
        )
        page1 = await tool(c, "codex_list_threads", limit=1)
        page2 = await tool(c, "codex_list_threads", limit=1, cursor=page1["next_cursor"])
        archived = await tool(c, "codex_archive_thread", thread_id=THREAD)
        after = await tool(c, "codex_list_threads")
        unknown = await tool(c, "codex_archive_thread", thread_id="thr-nope")
        bad_cursor = await tool(c, "codex_list_threads", cursor="not-a-cursor")
    threads: list[dict[str, Any]] = both["threads"]
    assert [t["id"] for t in threads] == ["thr-hooked", THREAD]
    assert {t["id"]: t["preview"] for t in threads} == {
        "thr-hooked": "Explain the lexer",
        THREAD: "Help me refactor the parser",
    }
    assert all(t["model_provider"] == "openai" and t["created_at"].endswith("Z") for t in threads)
    assert both["next_cursor"] is None
    # One list: the thread relay ran (resumable, tracked by the hooks too) once, and the hooked one.
    listed = [(s["session_id"], s["origin"], s["status"]) for s in sessions["result"]["sessions"]]
    assert listed == [("thr-hooked", "hook", "active"), (THREAD, "relay", "active")]
    assert [t["id"] for t in page1["threads"] + page2["threads"]] == ["thr-hooked", THREAD]
    assert page1["next_cursor"] and page2["next_cursor"] is None
    assert archived == {"success": True, "thread_id": THREAD, "message": f"Thread {THREAD} archived"}
    assert [t["id"] for t in after["threads"]] == ["thr-hooked"]
    assert (unknown["success"], unknown["error"]) == (False, "Thread thr-nope not found")
    assert (bad_cursor["success"], bad_cursor["error_type"]) == (False, "ValueError")


async def test_a_failed_codex_turn_is_a_failure_with_the_job_to_read(codex_settings: Settings) -> None:
    async with Client(build_server(codex_settings)) as c:
        failed = await tool(c, "codex", prompt="[[fake:replay=codex_exec_json_error_e401]] hello")
    assert failed["success"] is False
    assert failed["job_id"] and failed["status"] == "failed"
    assert failed["error"]
