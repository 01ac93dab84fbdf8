"""Profile `codex-mcp`: codex-mcp-server's codex, review, listSessions, ping, help, websearch, on the fake codex."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.argv import opt, resumed
from tests.compat.conftest import ProfileClient, call, data, error_message, logged, schemas, stdio_tool_names, text

pytestmark = pytest.mark.anyio

TOOLS = ["codex", "help", "listSessions", "ping", "review", "websearch"]
THREAD = "01a1fdea-b50b-74e3-a908-2db5de7dba18"
ANSWER = "MOCK-OK: hello from the mock model"


@pytest.fixture(autouse=True)
def _in_workdir(monkeypatch: pytest.MonkeyPatch, workdir: Path) -> None:  # pyright: ignore[reportUnusedFunction]
    """Without workingDirectory, Codex runs where relay was started: here the test's work folder."""
    monkeypatch.chdir(workdir)


def flag(argv: list[str], name: str) -> str:
    """A codex option's value as relay passes it (`--model=`, `--cd=`), or the thread after `resume --`."""
    return resumed(argv) if name == "resume" else opt(argv, *{"-m": ("--model",), "-C": ("--cd",)}.get(name, ()), name)


async def test_relay_serve_profile_codex_mcp_lists_exactly_the_tools(relay_home: Path, workdir: Path) -> None:
    assert await stdio_tool_names("codex-mcp", relay_home, workdir) == TOOLS


async def test_the_codex_schema_is_the_seeds(profile_client: ProfileClient) -> None:
    async with profile_client("codex-mcp") as c:
        found = await schemas(c)
    assert sorted(found) == TOOLS
    assert {n: s.get("required", []) for n, s in found.items()} == {
        "codex": ["prompt"],
        "review": [],
        "listSessions": [],
        "ping": [],
        "help": [],
        "websearch": ["query"],
    }
    props = found["codex"]["properties"]
    assert set(props) == {
        "prompt",
        "workingDirectory",
        "model",
        "sandbox",
        "fullAuto",
        "sessionId",
        "resetSession",
        "reasoningEffort",
        "callbackUri",
    }
    assert props["reasoningEffort"]["enum"] == ["minimal", "low", "medium", "high"]
    assert props["sandbox"]["enum"] == ["read-only", "workspace-write", "danger-full-access"]
    assert "defaults to gpt-5.2-codex" in props["model"]["description"]


async def test_codex_answers_in_text_with_the_thread_in_meta(
    profile_client: ProfileClient, workdir: Path, argv_log: Path
) -> None:
    async with profile_client("codex-mcp") as c:
        result = await call(c, "codex", prompt="What is Fibonacci?", sandbox="workspace-write", reasoningEffort="low")
    assert (result.is_error, text(result)) == (False, ANSWER)
    assert result.content[0].meta == {"model": "gpt-5.2-codex", "threadId": THREAD}
    argv = logged(argv_log)[0]["argv"]
    assert (flag(argv, "-m"), flag(argv, "-s"), flag(argv, "-C")) == ("gpt-5.2-codex", "workspace-write", str(workdir))
    assert '--config=model_reasoning_effort="low"' in argv


async def test_full_auto_writes_in_the_workspace_and_the_default_is_read_only(
    profile_client: ProfileClient, argv_log: Path
) -> None:
    async with profile_client("codex-mcp") as c:
        await call(c, "codex", prompt="a", fullAuto=True)
        await call(c, "codex", prompt="b")
    assert [flag(run["argv"], "-s") for run in logged(argv_log)] == ["workspace-write", "read-only"]


async def test_a_session_id_resumes_its_codex_thread_and_reset_starts_over(
    profile_client: ProfileClient, argv_log: Path
) -> None:
    async with profile_client("codex-mcp") as c:
        first = await call(c, "codex", prompt="write primes", sessionId="test-session-1")
        second = await call(c, "codex", prompt="Perfect, thanks.", sessionId="test-session-1")
        sessions = json.loads(text(await call(c, "listSessions")))
        await call(c, "codex", prompt="again", sessionId="test-session-1", resetSession=True)
        after_reset = json.loads(text(await call(c, "listSessions")))
    runs = [run["argv"] for run in logged(argv_log)]
    assert "resume" not in runs[0] and flag(runs[1], "resume") == THREAD and "resume" not in runs[2]
    assert first.content[0].meta == {"model": "gpt-5.2-codex", "sessionId": "test-session-1", "threadId": THREAD}
    assert text(second) == ANSWER
    assert [(s["id"], s["turnCount"]) for s in sessions] == [("test-session-1", 2)]
    assert set(sessions[0]) == {"id", "createdAt", "lastAccessedAt", "turnCount"}
    assert sessions[0]["createdAt"].endswith("Z") and len(sessions[0]["createdAt"]) == 24
    assert [(s["id"], s["turnCount"]) for s in after_reset] == [("test-session-1", 1)]


async def test_sessions_survive_a_relay_restart(profile_client: ProfileClient, argv_log: Path) -> None:
    async with profile_client("codex-mcp") as c:
        await call(c, "codex", prompt="one", sessionId="s1")
    async with profile_client("codex-mcp") as c:
        listed = json.loads(text(await call(c, "listSessions")))
        await call(c, "codex", prompt="two", sessionId="s1")
    assert [s["id"] for s in listed] == ["s1"]
    assert flag(logged(argv_log)[1]["argv"], "resume") == THREAD


async def test_no_sessions_yet_says_so(profile_client: ProfileClient) -> None:
    async with profile_client("codex-mcp") as c:
        assert text(await call(c, "listSessions")) == "No active sessions"


async def test_review_with_a_prompt_and_uncommitted_is_refused(profile_client: ProfileClient) -> None:
    async with profile_client("codex-mcp") as c:
        result = await call(c, "review", prompt="focus on security", uncommitted=True)
    assert error_message(result) == (
        "The review prompt cannot be combined with uncommitted=true. Use a base/commit review or omit the prompt."
    )
    assert data(result)["error"]["hint"] == (
        "drop the prompt to review the uncommitted changes, or pass base or commit with the prompt"
    )


async def test_review_runs_read_only_on_the_asked_target(
    profile_client: ProfileClient, workdir: Path, argv_log: Path
) -> None:
    async with profile_client("codex-mcp") as c:
        result = await call(c, "review", base="main", title="PR 7", workingDirectory=str(workdir))
    assert (text(result), result.content[0].meta) == (ANSWER, {"model": "gpt-5.2-codex", "base": "main"})
    run = logged(argv_log)[0]
    assert flag(run["argv"], "-s") == "read-only" and flag(run["argv"], "-C") == str(workdir)
    assert "base branch main" in run["prompt"] and "PR 7" in run["prompt"]


async def test_ping_echoes_its_message(profile_client: ProfileClient) -> None:
    async with profile_client("codex-mcp") as c:
        assert (text(await call(c, "ping")), text(await call(c, "ping", message="Test connectivity"))) == (
            "pong",
            "Test connectivity",
        )


async def test_help_is_what_codex_help_prints(profile_client: ProfileClient, tmp_path: Path) -> None:
    codex = tmp_path / "codex-with-help"
    codex.write_text('#!/bin/sh\n[ "$1" = "--help" ] && echo "Codex CLI" && echo "Usage: codex [OPTIONS] [PROMPT]"\n')
    codex.chmod(0o755)
    async with profile_client("codex-mcp", f'[agents.codex]\ncommand = "{codex}"\n', fakes=False) as c:
        result = await call(c, "help")
    assert (result.is_error, text(result)) == (False, "Codex CLI\nUsage: codex [OPTIONS] [PROMPT]\n")


async def test_help_from_a_cli_that_fails_reads_failed_to_execute_help(profile_client: ProfileClient) -> None:
    async with profile_client("codex-mcp") as c:  # the fake codex knows only `codex exec`
        result = await call(c, "help")
    assert error_message(result).startswith("Failed to execute help command: `codex --help` exited with 2")


async def test_websearch_asks_codex_for_the_results(profile_client: ProfileClient, argv_log: Path) -> None:
    async with profile_client("codex-mcp") as c:
        result = await call(c, "websearch", query="mcp tasks extension", numResults=3)
    assert text(result) == ANSWER
    assert "mcp tasks extension" in logged(argv_log)[0]["prompt"] and "3 most relevant" in logged(argv_log)[0]["prompt"]


async def test_a_failed_codex_run_reads_failed_to_execute(profile_client: ProfileClient) -> None:
    async with profile_client("codex-mcp") as c:
        result = await call(c, "codex", prompt="[[fake:replay=codex_exec_json_error_e500]]")
    assert error_message(result).startswith("Failed to execute codex command: ")


async def test_a_full_auto_conversation_keeps_its_sandbox_and_directory_on_every_turn(
    profile_client: ProfileClient, workdir: Path, argv_log: Path
) -> None:
    project = workdir / "project"
    project.mkdir()
    async with profile_client("codex-mcp") as c:
        await call(c, "codex", prompt="one", sessionId="s1", fullAuto=True, workingDirectory=str(project))
        await call(c, "codex", prompt="two", sessionId="s1")
    first, second = logged(argv_log)
    assert flag(first["argv"], "-s") == "workspace-write" and flag(first["argv"], "-C") == str(project)
    assert flag(second["argv"], "resume") == THREAD and '--config=sandbox_mode="workspace-write"' in second["argv"]
    assert second["cwd"] == str(project)


async def test_a_later_turn_that_names_a_sandbox_resumes_the_thread_with_it(
    profile_client: ProfileClient, argv_log: Path
) -> None:
    # danger-full-access is above the default grant (edit): this person granted full (docs/security.md)
    async with profile_client("codex-mcp", '[security]\ngrant = "full"\n') as c:
        await call(c, "codex", prompt="one", sessionId="s1", fullAuto=True)
        await call(c, "codex", prompt="two", sessionId="s1", sandbox="danger-full-access")
        await call(c, "codex", prompt="three", sessionId="s1")
    second, third = (run["argv"] for run in logged(argv_log)[1:])
    assert flag(second, "resume") == THREAD and '--config=sandbox_mode="danger-full-access"' in second
    assert '--config=sandbox_mode="workspace-write"' in third  # the session keeps what it was started with


async def test_codex_publishes_an_output_schema_with_thread_id_and_returns_structured_content(
    profile_client: ProfileClient,
) -> None:
    async with profile_client("codex-mcp") as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        result = await call(c, "codex", prompt="hi", sessionId="s9")
    schema = tools["codex"].output_schema
    assert schema is not None and {"threadId", "model", "sessionId"} <= set(schema["properties"])
    meta = {"model": "gpt-5.2-codex", "sessionId": "s9", "threadId": THREAD}
    assert result.structured_content == meta and result.content[0].meta == meta
