"""The toolset frame: exposure by toolsets and profiles, strict arguments, discovery and routing, clean errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Annotated, Any, Literal

import pytest
from mcp import Client
from mcp.types import CallToolResult
from pydantic import BaseModel, Field

from relay.errors import ErrorCode, RelayError
from relay.server.app import build_server
from relay.server.toolsets import BUILTIN, DEFAULT_EXPOSURE, PROFILES, resolve_exposure
from tests.conftest import ERROR_RESULTS_VALIDATED, SettingsFactory

# The gateway toolset's tools, in the order it defines them (seed 003's direct tools).
GATEWAY_TOOLS = (
    "list_tools",
    "get_tool_schema",
    "call_tool",
    "list_mcp_servers",
    "read_mcp_resource",
    "add_mcp_server",
    "remove_mcp_server",
    "import_mcp_server",
    "recommend_tools",
)

pytestmark = pytest.mark.anyio


class Pick(BaseModel):
    """A nested argument with an enum (for the nested-enum test)."""

    stance: Literal["for", "against", "neutral"]


def data(result: CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None, result
    return result.structured_content


async def exposed_tools(settings_factory: SettingsFactory, **env: str) -> list[Any]:
    async with Client(build_server(settings_factory(**env))) as c:
        return (await c.list_tools()).tools


async def test_the_default_exposes_core_and_the_three_discovery_tools(make_settings: SettingsFactory) -> None:
    names = [t.name for t in await exposed_tools(make_settings)]
    assert names == [
        "delegate",
        "job_status",
        "job_result",
        "job_wait",
        "job_send",
        "job_cancel",
        "job_list",
        "session_list",
        "status",
        "ask",
        "thread_list",
        "thread_show",
        "list_models",
        "list_tools",
        "get_tool_schema",
        "call_tool",
    ]


async def test_every_exposed_input_schema_is_closed_and_its_defaults_are_allowed(
    make_settings: SettingsFactory,
) -> None:
    # One toolset at a time: the surreal and call-cc profiles both name a tool call_cc.
    tools = [tool for name in BUILTIN for tool in await exposed_tools(make_settings, RELAY_TOOLSETS=name)]
    for tool in tools:
        schema = tool.input_schema
        assert schema.get("additionalProperties") is False, tool.name
        for arg, spec in schema.get("properties", {}).items():
            if "default" in spec and "enum" in spec:
                assert spec["default"] in spec["enum"], (tool.name, arg)


async def test_every_tool_of_every_toolset_refuses_an_unknown_argument_naming_it(
    make_settings: SettingsFactory,
) -> None:
    async with Client(build_server(make_settings())) as c:
        listing = data(await c.call_tool("list_tools", {}))
        checked = 0
        for server in listing["servers"]:
            for tool in server["tools"]:
                result = await c.call_tool(
                    "call_tool",
                    {"server_name": server["name"], "tool_name": tool["name"], "arguments": {"zz_not_an_arg": 1}},
                )
                assert result.is_error, (server["name"], tool["name"])
                body = data(result)
                assert body["success"] is False
                assert "zz_not_an_arg" in body["error"], (server["name"], tool["name"], body)
                checked += 1
    assert checked >= 15


async def test_an_unknown_argument_names_the_closest_valid_one(make_settings: SettingsFactory, workdir: Any) -> None:
    async with Client(build_server(make_settings())) as c:
        result = await c.call_tool("delegate", {"prompt": "hi", "working_directory": str(workdir), "timeout_ms": 5})
    assert result.is_error
    err = data(result)["error"]
    assert err["code"] == "INVALID_ARGUMENT"
    assert "`working_directory`" in err["message"] and "`cwd`" in err["message"] and "delegate" in err["message"]
    assert "timeout_s" in err["hint"]


async def test_a_bad_enum_value_names_the_nearest_allowed_value(make_settings: SettingsFactory) -> None:
    async with Client(build_server(make_settings())) as c:
        listed = await c.call_tool("job_list", {"status": ["runing"]})
        mode = await c.call_tool("delegate", {"prompt": "x", "mode": "asynch"})
    assert data(listed)["error"]["code"] == "INVALID_ARGUMENT"
    assert "`running`" in data(listed)["error"]["message"]
    assert "`async`" in data(mode)["error"]["message"]


async def test_an_unknown_tool_names_the_closest_tools(make_settings: SettingsFactory) -> None:
    async with Client(build_server(make_settings())) as c:
        typo = await c.call_tool("delegat", {})
        elsewhere = await c.call_tool("get_tool_schema", {"server_name": "core", "tool_name": "nope"})
    assert data(typo)["error"]["code"] == "TOOL_NOT_FOUND"
    assert "delegate" in data(typo)["error"]["message"]
    assert data(elsewhere)["success"] is False and "delegate" in data(elsewhere)["available_tools"]


async def test_a_tool_of_a_toolset_that_is_not_exposed_points_at_call_tool(make_settings: SettingsFactory) -> None:
    async with Client(build_server(make_settings(RELAY_TOOLSETS="core"))) as c:
        result = await c.call_tool("list_tools", {})
    err = data(result)["error"]
    assert err["code"] == "TOOL_NOT_FOUND" and "gateway" in err["message"]
    assert "call_tool(server_name='gateway'" in err["hint"]


async def test_call_tool_reaches_a_toolset_and_wraps_the_result_in_the_seed_envelope(
    make_settings: SettingsFactory,
) -> None:
    async with Client(build_server(make_settings())) as c:
        direct = data(await c.call_tool("status", {}))
        routed = await c.call_tool("call_tool", {"server_name": "core", "tool_name": "status"})
        missing_server = await c.call_tool("call_tool", {"server_name": "nowhere", "tool_name": "x"})
        missing_tool = await c.call_tool("call_tool", {"server_name": "core", "tool_name": "delegat"})
        schema = data(await c.call_tool("get_tool_schema", {"server_name": "core", "tool_name": "job_wait"}))
        one = data(await c.call_tool("list_tools", {"server": "gateway"}))
    body = data(routed)
    assert not routed.is_error and body["success"] is True
    assert body["result"]["pid"] == direct["pid"] and body["result"]["status"] == "running"
    gone = data(missing_server)
    assert gone["success"] is False and gone["error"] == "Server 'nowhere' not found"
    assert {"core", "gateway"} <= set(gone["available_servers"])
    bad = data(missing_tool)
    assert bad["success"] is False and bad["error_type"] == "TOOL_NOT_FOUND"
    assert bad["error"].startswith("Tool 'delegat' not found on 'core'. Available: delegate")
    assert schema["success"] is True and schema["server"] == "core"
    assert schema["tool"]["name"] == "job_wait" and schema["tool"]["inputSchema"]["required"] == ["job_ids"]
    assert one == {
        "success": True,
        "server": "gateway",
        "tools": [{"name": name, "brief": t["brief"]} for name, t in zip(GATEWAY_TOOLS, one["tools"], strict=True)],
    }
    assert all(0 < len(t["brief"]) <= 100 for t in one["tools"])


async def test_a_failing_routed_call_keeps_code_message_and_hint(make_settings: SettingsFactory) -> None:
    async with Client(build_server(make_settings())) as c:
        result = await c.call_tool(
            "call_tool", {"server_name": "core", "tool_name": "job_status", "arguments": {"job_id": "nope"}}
        )
    body = data(result)
    assert result.is_error
    assert body["success"] is False and body["error_type"] == "JOB_NOT_FOUND" and body["hint"]


def test_two_exposed_toolsets_defining_one_tool_name_fail_at_start_naming_both(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(BUILTIN, "core-again", "relay.server.toolsets.core")
    monkeypatch.setitem(PROFILES, "clash", (("core", frozenset({"status"})), ("core-again", frozenset({"status"}))))
    with pytest.raises(RelayError) as caught:
        build_server(make_settings(RELAY_PROFILE="clash"))
    assert caught.value.code == ErrorCode.CONFIG_INVALID
    assert "core" in caught.value.message and "status" in caught.value.message


def test_exposure_from_toolsets_profile_or_default() -> None:
    assert resolve_exposure((), None) == DEFAULT_EXPOSURE
    assert resolve_exposure(("core", "gateway"), None) == (("core", None), ("gateway", None))
    with pytest.raises(RelayError) as typo:
        resolve_exposure(("cor",), None)
    assert typo.value.code == ErrorCode.CONFIG_INVALID and "core" in typo.value.message
    with pytest.raises(RelayError) as both:
        resolve_exposure(("core",), "zen")
    assert both.value.code == ErrorCode.CONFIG_INVALID
    with pytest.raises(RelayError) as nope:
        resolve_exposure((), "no-such-profile")
    assert nope.value.code == ErrorCode.CONFIG_INVALID


def test_every_profile_exposes_tools_that_exist(make_settings: SettingsFactory) -> None:
    for name in PROFILES:
        server = build_server(make_settings(RELAY_PROFILE=name))
        assert server.catalog.exposed, name


def test_toolsets_come_from_config_toml_and_env(make_settings: SettingsFactory) -> None:
    from_config = make_settings('[server]\ntoolsets = ["core"]\n')
    assert from_config.toolsets == ("core",) and from_config.profile is None
    env_wins = make_settings('[server]\ntoolsets = ["core"]\n', RELAY_TOOLSETS="core,gateway")
    assert env_wins.toolsets == ("core", "gateway")


async def test_an_error_result_of_a_published_schema_tool_is_valid_against_that_schema(
    make_settings: SettingsFactory,
) -> None:
    before = len(ERROR_RESULTS_VALIDATED)
    async with Client(build_server(make_settings())) as c:
        result = await c.call_tool("job_result", {"job_id": "nope"})
        published = {t.name: t.output_schema for t in (await c.list_tools()).tools}
    assert result.is_error and data(result)["error"]["code"] == "JOB_NOT_FOUND"
    assert published["job_result"] is not None and "error" in published["job_result"]["properties"]
    assert len(ERROR_RESULTS_VALIDATED) > before


@pytest.fixture
def cli_env(relay_home: Any) -> Iterator[dict[str, str]]:
    yield {**os.environ, "RELAY_HOME": str(relay_home)}


def test_relay_toolsets_lists_every_toolset_with_tools_and_tokens(cli_env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "relay.cli.main", "toolsets", "--json"],
        capture_output=True,
        text=True,
        env=cli_env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert set(BUILTIN) | set(PROFILES) | {"(default)"} == set(rows)
    assert rows["core"]["tools"][0] == "delegate" and rows["core"]["tokens"] > 0
    assert rows["(default)"]["tokens"] <= 3100  # 3000 until job_send (steering, ~105 tokens) joined core


def test_relay_serve_with_a_profile_over_stdio_lists_exactly_that_profile(cli_env: dict[str, str]) -> None:
    import anyio
    from mcp import StdioServerParameters

    async def listed(args: list[str]) -> list[str]:
        params = StdioServerParameters(command=sys.executable, args=["-m", "relay.cli.main", *args], env=cli_env)
        with anyio.fail_after(60):
            async with Client(params) as c:
                return [t.name for t in (await c.list_tools()).tools]

    assert anyio.run(listed, ["serve", "--toolsets", "gateway"]) == list(GATEWAY_TOOLS)


def test_camel_case_and_longer_argument_names_point_at_the_valid_one() -> None:
    from relay.server.toolsets._registry import closest

    valid = ["prompt", "cwd", "model", "timeout_s"]
    assert closest("workingDirectory", valid)[0] == "cwd"
    assert closest("working_directory_absolute_path", valid)[0] == "cwd"
    assert closest("timeoutMs", valid)[0] == "timeout_s"


async def test_a_bad_value_of_a_nested_enum_names_the_nearest_one(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from relay.server.toolsets import _registry

    def build(reg: _registry.ToolRegistry, deps: _registry.Deps) -> None:
        @reg.tool(description="nested", annotations=_registry.READ_ONLY)
        async def nested(picks: Annotated[list[Pick], Field(description="picks")]) -> dict[str, Any]:
            return {"n": len(picks)}

    import types

    module = types.ModuleType("relay_test_nested_toolset")
    module.TOOLSET = _registry.Toolset("nested", "test only", build)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "relay_test_nested_toolset", module)
    monkeypatch.setitem(BUILTIN, "nested", "relay_test_nested_toolset")
    async with Client(build_server(make_settings(RELAY_TOOLSETS="nested"))) as c:
        bad = await c.call_tool("nested", {"picks": [{"stance": "agains"}]})
        good = await c.call_tool("nested", {"picks": [{"stance": "for"}]})
    assert bad.is_error and "`against`" in data(bad)["error"]["message"]
    assert data(good) == {"n": 1}


def test_an_unknown_toolset_names_each_candidate_once() -> None:
    with pytest.raises(RelayError) as caught:
        resolve_exposure(("core", "zne"), None)
    assert "did you mean zen?" in caught.value.message
    assert caught.value.hint.count("zen,") + caught.value.hint.count("zen ") <= 1


async def test_a_misspelt_agent_names_the_nearest_one(make_settings: SettingsFactory) -> None:
    async with Client(build_server(make_settings())) as c:
        result = await c.call_tool("delegate", {"prompt": "hi", "agent": "claud"})
    err = data(result)["error"]
    assert err["code"] == "AGENT_UNKNOWN" and "did you mean 'claude'?" in err["message"]


def test_every_tool_of_every_toolset_has_a_title_and_says_what_it_does(tmp_path: Any) -> None:
    from relay.server.tooldocs import catalog_tools, doc_settings

    toolsets, _, _ = catalog_tools(doc_settings(str(tmp_path)))
    unannotated = [
        f"{name}/{tool['name']}"
        for name, tools in toolsets.items()
        for tool in tools
        if not tool.get("title") or "readOnlyHint" not in tool.get("annotations", {})
    ]
    assert not unannotated, f"tools without a title or a read-only annotation: {unannotated}"
    writers = {
        t["name"]
        for tools in toolsets.values()
        for t in tools
        if t["annotations"]["readOnlyHint"] is False and t["annotations"].get("destructiveHint") is not False
    }
    assert {"delegate", "job_cancel", "delete_task", "execute_code", "call_tool"} <= writers


async def test_an_error_quotes_a_huge_argument_only_in_part(make_settings: SettingsFactory) -> None:
    async with Client(build_server(make_settings())) as c:
        result = await c.call_tool("job_status", {"job_id": "x" * 1_000_000})
    err = data(result)["error"]
    assert err["code"] == "JOB_NOT_FOUND"
    assert len(err["message"]) < 2100 and "more characters" in err["message"]
    assert sum(len(getattr(block, "text", "")) for block in result.content) < 5000


def test_release_freed_memory_works_on_this_machine() -> None:
    from relay.memory import release_freed_memory

    assert release_freed_memory() is (sys.platform.startswith("linux"))
