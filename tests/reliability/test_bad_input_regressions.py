"""Bad input the fuzzer found: each case must be a coded error or a failed job, and the server must keep answering."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.server.app import build_server
from relay.server.toolsets import BUILTIN
from tests.reliability.conftest import AdvSettings, quick_agent
from tests.reliability.test_fuzzed_tools import classify

pytestmark = pytest.mark.anyio


async def call(client: Client, tool: str, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    with anyio.fail_after(30):
        result = await client.call_tool(tool, args)
    assert result.structured_content is not None
    return bool(result.is_error), result.structured_content


@pytest.mark.parametrize(
    "args",
    [
        {"prompt": "a NUL \x00 in the prompt", "mode": "async"},
        {"prompt": "x", "model": "so\x00nnet", "mode": "async"},
        {"prompt": "x", "system_prompt": "\x00", "mode": "async"},
    ],
    ids=["prompt", "model", "system_prompt"],
)
async def test_a_nul_byte_in_a_delegated_argv_fails_one_job_and_the_server_keeps_answering(
    adv_settings: AdvSettings, workdir: Path, tmp_path: Path, args: dict[str, Any]
) -> None:
    settings = adv_settings(command=quick_agent(tmp_path / "bin"))
    async with Client(build_server(settings)) as client:
        failed, first = await call(client, "delegate", {**args, "cwd": str(workdir)})
        if not failed:
            _, waited = await call(client, "job_wait", {"job_ids": [first["job_id"]], "timeout_s": 10})
            first = waited["jobs"][0]
        _, after = await call(client, "delegate", {"prompt": "still alive?", "cwd": str(workdir), "mode": "sync"})
    assert first["error"]["code"] == "INVALID_ARGUMENT" and first["error"]["hint"]
    assert after["status"] == "completed"


async def test_a_nul_byte_in_cwd_is_an_invalid_argument(adv_settings: AdvSettings, workdir: Path) -> None:
    async with Client(build_server(adv_settings())) as client:
        failed, content = await call(client, "delegate", {"prompt": "x", "cwd": f"{workdir}/\x00", "mode": "async"})
    assert failed and content["error"]["code"] == "INVALID_ARGUMENT" and content["error"]["hint"]


@pytest.mark.parametrize("tool", ["job_status", "job_result", "job_cancel"])
async def test_a_job_id_longer_than_sqlite_allows_in_like_is_job_not_found(
    adv_settings: AdvSettings, workdir: Path, tmp_path: Path, tool: str
) -> None:
    async with Client(build_server(adv_settings(command=quick_agent(tmp_path / "bin")))) as client:
        await call(client, "delegate", {"prompt": "a job to search past", "cwd": str(workdir), "mode": "sync"})
        failed, content = await call(client, tool, {"job_id": "a" * 60_000})
    assert failed and content["error"]["code"] == "JOB_NOT_FOUND"


LONE = "\ud800"  # valid in JSON ("\\ud800"), not in UTF-8


def surrogate_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """Every property of a tool's input: each string a lone surrogate, the rest the first value its type allows."""
    args: dict[str, Any] = {}
    for name, prop in schema.get("properties", {}).items():
        kinds = prop.get("type") if isinstance(prop.get("type"), list) else [prop.get("type")]
        if "enum" in prop:
            args[name] = prop["enum"][0]
        elif "string" in kinds or not any(kinds):
            args[name] = f"{name} {LONE}"
        elif "array" in kinds:
            args[name] = [f"{name} {LONE}"]
        elif "object" in kinds:
            args[name] = {LONE: LONE}
        elif "integer" in kinds or "number" in kinds:
            args[name] = 1
        elif "boolean" in kinds:
            args[name] = False
    return args


@pytest.mark.parametrize("toolset", sorted(BUILTIN))
async def test_a_lone_surrogate_in_any_argument_of_any_tool_is_a_coded_error_not_a_crash(
    adv_settings: AdvSettings, workdir: Path, tmp_path: Path, toolset: str
) -> None:
    settings = adv_settings(command=quick_agent(tmp_path / "bin"), RELAY_TOOLSETS=toolset)
    outcomes: dict[str, str] = {}
    said: dict[str, str] = {}
    async with Client(build_server(settings)) as client:
        with anyio.fail_after(30):
            tools = (await client.list_tools()).tools
        for tool in tools:
            with anyio.fail_after(30):
                result = await client.call_tool(tool.name, surrogate_arguments(tool.input_schema))
            outcomes[tool.name] = classify(result)  # raises on INTERNAL, or an error without code and hint
            said[tool.name] = json.dumps(result.structured_content)
        with anyio.fail_after(30):
            still = (await client.list_tools()).tools  # the server still answers
    assert len(still) == len(tools) and "INVALID_ARGUMENT" in outcomes.values(), outcomes
    if toolset == "tasks":  # the tracker's store is where the text first meets UTF-8: the error names the argument
        assert "title holds a lone surrogate" in said["create_task"], said["create_task"]


TOO_LONG = "/" + "x" * 60_000  # a name the system refuses (ENAMETOOLONG), not merely a missing one


@pytest.mark.parametrize(
    ("toolset", "tool", "args"),
    [
        ("claude-code-mcp", "claude_code", {"prompt": "x", "workFolder": TOO_LONG}),
        ("gateway", "import_mcp_server", {"from_project": TOO_LONG}),
        ("zen", "chat", {"prompt": "x", "working_directory_absolute_path": TOO_LONG}),
        ("zen", "chat", {"prompt": "x", "working_directory_absolute_path": "~nobody-such-user/x"}),
        ("tasks", "list_tasks", {"project": "~nobody-such-user/x"}),
        ("core", "delegate", {"prompt": "x", "cwd": "~nobody-such-user/x", "mode": "async"}),
    ],
    ids=["workFolder-too-long", "from_project-too-long", "zen-dir-too-long", "zen-unknown-user", "tracker", "cwd"],
)
async def test_a_path_too_long_or_under_an_unknown_users_home_is_a_coded_error(
    adv_settings: AdvSettings, tmp_path: Path, toolset: str, tool: str, args: dict[str, Any]
) -> None:
    settings = adv_settings(command=quick_agent(tmp_path / "bin"), RELAY_TOOLSETS=f"core,{toolset}")
    async with Client(build_server(settings)) as client:
        with anyio.fail_after(30):
            result = await client.call_tool(tool, args)
    assert result.is_error and classify(result) != "INTERNAL", result.structured_content
