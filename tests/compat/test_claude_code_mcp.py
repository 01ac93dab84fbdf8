"""Profile `claude-code-mcp`: claude_code(prompt, workFolder), on the fake claude."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.compat.conftest import ProfileClient, call, data, error_message, logged, schemas, stdio_tool_names, text

pytestmark = pytest.mark.anyio


async def test_relay_serve_profile_claude_code_mcp_lists_only_claude_code(relay_home: Path, workdir: Path) -> None:
    assert await stdio_tool_names("claude-code-mcp", relay_home, workdir) == ["claude_code"]


async def test_the_schema_is_the_seeds(profile_client: ProfileClient) -> None:
    async with profile_client("claude-code-mcp") as c:
        found = await schemas(c)
    schema = found["claude_code"]
    assert (list(found), schema["required"], list(schema["properties"])) == (
        ["claude_code"],
        ["prompt"],
        ["prompt", "workFolder"],
    )
    assert schema["properties"]["prompt"] == {
        "description": "The detailed natural language prompt for Claude to execute.",
        "type": "string",
    }


async def test_the_answer_comes_back_as_plain_text_from_a_skipped_permissions_run(
    profile_client: ProfileClient, workdir: Path, argv_log: Path
) -> None:
    async with profile_client("claude-code-mcp") as c:
        result = await call(c, "claude_code", prompt="say hello", workFolder=str(workdir))
    assert not result.is_error
    assert (text(result), result.structured_content) == ("hi from mock", None)
    run = logged(argv_log)[0]
    assert run["cwd"] == str(workdir)
    assert run["argv"][run["argv"].index("--permission-mode") + 1] == "bypassPermissions"


async def test_a_work_folder_that_does_not_exist_falls_back_to_home(
    profile_client: ProfileClient, relay_home: Path, workdir: Path, argv_log: Path
) -> None:
    # HOME is relay_home in the test settings; allow it as a root so the fallback may run there.
    roots = f'[security]\nallowed_roots = ["{workdir}", "{relay_home}"]\n'
    async with profile_client("claude-code-mcp", roots) as c:
        result = await call(c, "claude_code", prompt="hi", workFolder=str(workdir / "missing"))
    assert not result.is_error, text(result)
    assert logged(argv_log)[0]["cwd"] == str(relay_home)


async def test_a_home_fallback_outside_the_allowed_roots_says_to_pass_work_folder(
    profile_client: ProfileClient, relay_home: Path, workdir: Path
) -> None:
    async with profile_client("claude-code-mcp") as c:
        without = await call(c, "claude_code", prompt="hi")
        missing = await call(c, "claude_code", prompt="hi", workFolder=str(workdir / "missing"))
    assert error_message(without) == f"Claude CLI execution failed: cwd '{relay_home}' is outside the allowed roots"
    assert data(without)["error"]["code"] == "CWD_NOT_ALLOWED"
    assert data(without)["error"]["hint"].startswith(
        f"no workFolder was given, so Claude was to run in the home directory {relay_home}: pass workFolder (use a "
    )
    assert data(missing)["error"]["hint"].startswith(
        f"workFolder '{workdir / 'missing'}' is not a directory, so Claude was to run in the home directory "
        f"{relay_home}: pass workFolder (use a "
    )


@pytest.mark.parametrize("args", [{}, {"prompt": 42}, {"prompt": None}])
async def test_a_missing_or_non_string_prompt_gives_the_originals_message(
    profile_client: ProfileClient, args: dict[str, Any]
) -> None:
    async with profile_client("claude-code-mcp") as c:
        result = await call(c, "claude_code", **args)
    assert error_message(result) == "Missing or invalid required parameter: prompt"


async def test_a_failed_run_reads_claude_cli_execution_failed(profile_client: ProfileClient, workdir: Path) -> None:
    async with profile_client("claude-code-mcp") as c:
        result = await call(c, "claude_code", prompt="[[fake:replay=claude_stream_error_500]]", workFolder=str(workdir))
    assert error_message(result).startswith("Claude CLI execution failed: ")


async def test_a_claude_code_job_is_a_relay_job(profile_client: ProfileClient, workdir: Path) -> None:
    async with profile_client(toolsets="core,claude-code-mcp") as c:
        await call(c, "claude_code", prompt="hello there", workFolder=str(workdir))
        listed = await call(c, "job_list")
    assert listed.structured_content is not None
    assert [(j["agent"], j["status"], j["title"]) for j in listed.structured_content["jobs"]] == [
        ("claude", "completed", "hello there")
    ]
