"""`relay serve --profile zen` over stdio, as an MCP client launches it, and zen through the discovery tools."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from relay import __version__
from tests.workflows.conftest import SettingsFactory, call, zen_client

pytestmark = pytest.mark.anyio

RELAY = str(Path(sys.executable).with_name("relay"))
ZEN_TOOLS = [
    "apilookup",
    "challenge",
    "chat",
    "clink",
    "codereview",
    "consensus",
    "debug",
    "listmodels",
    "planner",
    "thinkdeep",
    "version",
]


async def test_relay_serve_profile_zen_over_stdio_lists_exactly_its_tools(
    zen_settings: SettingsFactory, relay_home: Path, workdir: Path
) -> None:
    zen_settings()  # writes config.toml with the fake CLIs
    env = {k: v for k, v in os.environ.items() if k not in ("RELAY_PROFILE", "RELAY_TOOLSETS")}
    params = StdioServerParameters(
        command=RELAY, args=["serve", "--profile", "zen"], env=env | {"RELAY_HOME": str(relay_home)}, cwd=str(workdir)
    )
    with anyio.fail_after(60):
        async with Client(params) as client:
            tools = await client.list_tools()
            result = await client.call_tool("challenge", {"prompt": "It works on my machine"})
    assert sorted(t.name for t in tools.tools) == ZEN_TOOLS
    assert result.structured_content is not None
    assert result.structured_content["status"] == "challenge_accepted"


async def test_the_default_server_reaches_zen_through_the_discovery_tools(zen_settings: SettingsFactory) -> None:
    async with zen_client(zen_settings(RELAY_PROFILE="")) as client:
        _, listing = await call(client, "list_tools", {"server": "zen"})
        failed, out = await call(
            client,
            "call_tool",
            {"server_name": "zen", "tool_name": "apilookup", "arguments": {"prompt": "pydantic v3"}},
        )
        refused, bad = await call(
            client,
            "call_tool",
            {"server_name": "zen", "tool_name": "clink", "arguments": {"prompt": "x", "cli_name": "codex", "cwd": "/"}},
        )
    assert not failed and out["result"]["status"] == "web_lookup_needed"
    assert refused and "Unknown parameter(s) for clink: cwd" in str(bad)
    assert sorted(t["name"] for t in listing["tools"]) == ZEN_TOOLS


# Zen's own server lists 18 tools in 12,563 tokens (about 700 a tool); relay's nine must stay within 3,500,
# plus about 40 for each of PAL's two argument-less utilities (listmodels, version).
ZEN_TOOLS_LIST_TOKEN_BUDGET = 3600


async def test_the_zen_tools_list_fits_its_token_budget(zen_settings: SettingsFactory) -> None:
    async with zen_client(zen_settings()) as client:
        listed = (await client.list_tools()).tools
    tools = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed]
    tokens = len(json.dumps(tools, separators=(",", ":")).encode("utf-8")) / 4  # as benchmarks/bench_tools_list.py
    assert sorted(t["name"] for t in tools) == ZEN_TOOLS
    assert tokens <= ZEN_TOOLS_LIST_TOKEN_BUDGET, f"{tokens:.0f} tokens"


async def test_the_zen_profile_offers_pals_listmodels_and_version(zen_settings: SettingsFactory) -> None:
    async with zen_client(zen_settings()) as client:
        failed, models = await call(client, "listmodels", {})
        vfailed, ver = await call(client, "version", {})
    assert not failed and not vfailed
    assert models["status"] == "success" and models["content"].startswith("# Available AI Models")
    assert "- `anthropic:claude-sonnet-4-5` - 200K context" in models["content"]
    assert "## mistral ❌\n**Status**: Not configured (set MISTRAL_API_KEY)" in models["content"]
    assert models["metadata"]["tool_name"] == "listmodels" and models["metadata"]["configured_providers"] >= 2
    assert ver["status"] == "success" and ver["metadata"]["server_version"] == __version__
    assert sorted(ver["metadata"]["available_tools"]) == ZEN_TOOLS
