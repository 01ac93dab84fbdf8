"""Profile `gemini-mcp`: gemini-mcp-tool's six tools over MCP, on the fake gemini (and a recorded changeMode reply)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio
import pytest

from relay.server.toolsets import gemini_mcp
from relay.server.toolsets.gemini_mcp import TEXTS
from tests.argv import opt
from tests.compat.conftest import (
    CALL_TIMEOUT_S,
    ProfileClient,
    call,
    data,
    error_message,
    logged,
    schemas,
    stdio_tool_names,
    text,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _in_workdir(monkeypatch: pytest.MonkeyPatch, workdir: Path) -> None:  # pyright: ignore[reportUnusedFunction]
    """gemini-mcp has no cwd argument: Gemini runs where relay was started, here the test's work folder."""
    monkeypatch.chdir(workdir)


TOOLS = ["Help", "ask-gemini", "brainstorm", "fetch-chunk", "ping", "timeout-test"]
EDITS = 30


def gemini_reply(recordings: Path, name: str, reply: str) -> str:
    """A recorded Gemini run whose answer is `reply`; returns the directive that replays it."""
    lines: list[dict[str, Any]] = [
        {"type": "init", "session_id": "5eed0000-0000-4000-8000-000000000000", "model": "gemini-2.5-pro"},
        {"type": "message", "role": "user", "content": ""},
        {"type": "message", "role": "assistant", "content": reply, "delta": True},
        {"type": "result", "status": "success", "stats": {"input_tokens": 1, "output_tokens": 1, "cached": 0}},
    ]
    (recordings / f"{name}.ndjson").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return f"[[fake:replay={name}]]"


def edit_block(i: int) -> str:
    old = "\n".join(f"    old_line_{i}_{n} = {n}" for n in range(8))
    new = "\n".join(f"    new_line_{i}_{n} = '{'x' * 60}'" for n in range(40))
    return f"**FILE: src/module_{i:02d}.py:{10 + i}**\n```\nOLD:\n{old}\nNEW:\n{new}\n```\n"


async def test_relay_serve_profile_gemini_mcp_lists_exactly_the_seeds_tools(relay_home: Path, workdir: Path) -> None:
    assert await stdio_tool_names("gemini-mcp", relay_home, workdir) == TOOLS


async def test_schemas_have_the_originals_required_fields_and_defaults(profile_client: ProfileClient) -> None:
    async with profile_client("gemini-mcp") as c:
        found = await schemas(c)
    assert sorted(found) == TOOLS
    assert {n: s.get("required", []) for n, s in found.items()} == {
        "ask-gemini": ["prompt"],
        "brainstorm": ["prompt"],
        "fetch-chunk": ["cacheKey", "chunkIndex"],
        "ping": [],
        "Help": [],
        "timeout-test": ["duration"],
    }
    ask = found["ask-gemini"]["properties"]
    assert list(ask) == ["prompt", "model", "sandbox", "changeMode", "chunkIndex", "chunkCacheKey"]
    assert (ask["prompt"]["minLength"], ask["sandbox"]["default"], ask["changeMode"]["default"]) == (1, False, False)
    storm = found["brainstorm"]["properties"]
    assert storm["methodology"]["enum"] == ["divergent", "convergent", "scamper", "design-thinking", "lateral", "auto"]
    assert (storm["methodology"]["default"], storm["ideaCount"]["default"], storm["includeAnalysis"]["default"]) == (
        "auto",
        12,
        True,
    )
    assert found["timeout-test"]["properties"]["duration"]["minimum"] == 10


async def test_ask_gemini_prefixes_the_answer_and_uses_gemini_2_5_pro(
    profile_client: ProfileClient, workdir: Path, argv_log: Path
) -> None:
    async with profile_client("gemini-mcp") as c:
        result = await call(c, "ask-gemini", prompt="What is 2 + 2?")
    assert (result.is_error, text(result)) == (False, "Gemini response:\nhi from gemini mock")
    argv = logged(argv_log)[0]["argv"]
    assert opt(argv, "--model", "-m") == "gemini-2.5-pro"


async def test_a_blank_prompt_gives_the_originals_message(profile_client: ProfileClient) -> None:
    async with profile_client("gemini-mcp") as c:
        ask = await call(c, "ask-gemini", prompt="   ")
        empty = await call(c, "ask-gemini", prompt="")
        storm = await call(c, "brainstorm", prompt=" \n")
        empty_storm = await call(c, "brainstorm", prompt="")
    assert error_message(ask) == error_message(empty) == TEXTS["no_prompt"]
    assert error_message(empty_storm) == error_message(storm)
    assert error_message(ask).startswith("Please provide a prompt for analysis. Use @ syntax to include files")
    assert error_message(storm) == "You must provide a valid brainstorming challenge or question to explore"
    assert (data(ask)["error"]["hint"], data(storm)["error"]["hint"]) == (
        "pass prompt: a question or task, with @path to include files",
        "pass prompt: the challenge or question to brainstorm",
    )


async def test_a_pro_quota_error_is_retried_once_on_flash(profile_client: ProfileClient, argv_log: Path) -> None:
    async with profile_client("gemini-mcp") as c:
        result = await call(c, "ask-gemini", prompt="hi [[fake:fail=429]]")
    models = [opt(run["argv"], "--model", "-m") for run in logged(argv_log)]
    assert models == ["gemini-2.5-pro", "gemini-2.5-flash"]
    assert error_message(result).startswith("gemini-2.5-pro quota exceeded, gemini-2.5-flash fallback also failed: ")


async def test_change_mode_serves_thirty_edits_in_chunks_each_exactly_once(
    profile_client: ProfileClient, recordings: Path, argv_log: Path
) -> None:
    replay = gemini_reply(
        recordings, "thirty_edits", "Here are the edits.\n\n" + "\n".join(map(edit_block, range(EDITS)))
    )
    async with profile_client("gemini-mcp") as c:
        first = text(await call(c, "ask-gemini", prompt=f"rename everything {replay}", changeMode=True))
        total = int(re.search(r"Chunk 1 of (\d+)", first).group(1))  # pyright: ignore[reportOptionalMemberAccess]
        key = re.search(r'fetch-chunk cacheKey="([a-f0-9]{8})" chunkIndex=2', first).group(1)  # pyright: ignore[reportOptionalMemberAccess]
        pages = [first] + [text(await call(c, "fetch-chunk", cacheKey=key, chunkIndex=i)) for i in range(2, total + 1)]
        again = text(
            await call(c, "ask-gemini", prompt="rename everything", changeMode=True, chunkIndex="2", chunkCacheKey=key)
        )
    assert total > 1
    assert len(logged(argv_log)) == 1  # the cached continuation did not run Gemini again
    assert again == pages[1]
    assert first.startswith(f"ChangeMode Summary (Complete analysis across all chunks):\nTotal edits: {EDITS}")
    seen = [name for page in pages for name in re.findall(r"### Edit \d+: (\S+)", page)]
    assert sorted(seen) == [f"src/module_{i:02d}.py" for i in range(EDITS)]
    for i in range(EDITS):
        new_code = edit_block(i).split("NEW:\n")[1].split("\n```")[0]
        assert sum(page.count(new_code) for page in pages) == 1
    assert "fetch-chunk" not in pages[-1]
    assert "instructions" not in logged(argv_log)[0]["argv"]  # the wrapped request reached Gemini
    assert "[CHANGEMODE INSTRUCTIONS]" in logged(argv_log)[0]["prompt"]


async def test_a_reply_without_edits_says_so(profile_client: ProfileClient) -> None:
    async with profile_client("gemini-mcp") as c:
        result = await call(c, "ask-gemini", prompt="count files", changeMode=True)
    assert text(result).startswith("No edits found in Gemini's response. Please ensure Gemini uses the OLD/NEW format.")
    assert text(result).endswith("hi from gemini mock")


async def test_fetch_chunk_reports_misses_and_bad_indexes(profile_client: ProfileClient, recordings: Path) -> None:
    replay = gemini_reply(recordings, "eight_edits", "\n".join(map(edit_block, range(8))))
    async with profile_client("gemini-mcp") as c:
        first = text(await call(c, "ask-gemini", prompt=f"edit {replay}", changeMode=True))
        key = re.search(r'cacheKey="([a-f0-9]{8})"', first).group(1)  # pyright: ignore[reportOptionalMemberAccess]
        miss = text(await call(c, "fetch-chunk", cacheKey="deadbeef", chunkIndex=1))
        bad_index = text(await call(c, "fetch-chunk", cacheKey=key, chunkIndex=99))
    assert miss.startswith('❌ Cache miss: No chunks found for cache key "deadbeef".')
    assert bad_index.startswith("❌ Invalid chunk index: 99\n\nAvailable chunks: 1 to ")


@pytest.mark.parametrize("key", ["../../etc", "not-a-key", "DEADBEEF", "", "0123456789abcdef"])
async def test_fetch_chunk_with_an_unknown_key_answers_the_cache_miss_text_whatever_the_key_looks_like(
    profile_client: ProfileClient, key: str
) -> None:
    async with profile_client("gemini-mcp") as c:
        result = await call(c, "fetch-chunk", cacheKey=key, chunkIndex=1)
    assert not result.is_error
    assert text(result).startswith(f'❌ Cache miss: No chunks found for cache key "{key}". \n\n  Possible reasons:')


async def test_ask_gemini_with_sandbox_passes_gemini_s(profile_client: ProfileClient, argv_log: Path) -> None:
    async with profile_client("gemini-mcp") as c:
        await call(c, "ask-gemini", prompt="What is 2 + 2?", sandbox=True)
        await call(c, "ask-gemini", prompt="What is 2 + 2?")
    sandboxed, plain = (run["argv"] for run in logged(argv_log))
    assert "-s" in sandboxed and "-s" not in plain


async def test_brainstorm_builds_the_structured_prompt(profile_client: ProfileClient, argv_log: Path) -> None:
    async with profile_client("gemini-mcp") as c:
        result = await call(
            c, "brainstorm", prompt="Ways to test MCP delegation tools", ideaCount=5, methodology="scamper", domain="QA"
        )
    assert (result.is_error, text(result)) == (False, "hi from gemini mock")
    sent = logged(argv_log)[0]["prompt"]
    for part in ("# BRAINSTORMING SESSION", "Ways to test MCP delegation tools", "Generate 5 distinct", "SCAMPER"):
        assert part in sent
    assert "**Domain Focus:** QA" in sent and "**Feasibility**" in sent


async def test_ping_echoes_or_pongs(profile_client: ProfileClient) -> None:
    async with profile_client("gemini-mcp") as c:
        pong = text(await call(c, "ping"))
        echo = text(await call(c, "ping", prompt="Test connectivity"))
    assert (pong, echo) == ("Pong!", "Test connectivity")


async def test_help_is_what_gemini_help_prints(profile_client: ProfileClient, argv_log: Path) -> None:
    async with profile_client("gemini-mcp") as c:
        result = await call(c, "Help")
    assert [run["argv"] for run in logged(argv_log)] == [["--help"]]
    assert not result.is_error and '"type":"init"' in text(result)  # the fake's whole stdout


async def test_timeout_test_runs_for_the_duration_and_reports(profile_client: ProfileClient) -> None:
    async with profile_client("gemini-mcp") as c:
        result = text(await call(c, "timeout-test", duration=10))
    lines = result.split("\n")
    assert lines[0] == "Starting timeout test for 10ms (0.01s)"
    assert lines[1].startswith("Step 1/1 completed - Elapsed: ")
    assert "\nTimeout test completed successfully!\nTarget duration: 10ms\nActual duration: " in result


async def test_long_calls_send_keepalive_progress(
    profile_client: ProfileClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gemini_mcp, "KEEPALIVE_S", 0.2)
    messages: list[str] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    async with profile_client("gemini-mcp") as c:
        with anyio.fail_after(CALL_TIMEOUT_S):
            result = await c.call_tool("ask-gemini", {"prompt": "slow [[fake:sleep=1.5]]"}, progress_callback=progress)
    assert not result.is_error
    assert TEXTS["keepalive"] in messages
