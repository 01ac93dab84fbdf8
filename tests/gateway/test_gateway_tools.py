"""The gateway toolset through the SDK's in-memory client, with real downstream servers behind it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from relay.gateway import Gateway, ServerRegistry, make_config, project_of
from relay.server.app import build_server
from tests.conftest import SettingsFactory
from tests.gateway.conftest import GATEWAY_ENV, LIMITS, TOY

pytestmark = pytest.mark.anyio


def relay(make_settings: SettingsFactory, **env: str) -> Client:
    return Client(build_server(make_settings(**{**GATEWAY_ENV, **env})))


async def call(c: Client, tool: str, args: dict[str, Any] | None = None, bound: float = 90) -> tuple[bool, Any]:
    with anyio.fail_after(bound):
        result = await c.call_tool(tool, args or {})
    assert result.structured_content is not None
    return bool(result.is_error), result.structured_content


def toy_args(state: Path, name: str = "toy", *extra: str, **env: str) -> dict[str, Any]:
    return {
        "name": name,
        "transport": "stdio",
        "command": sys.executable,
        "args": [str(TOY), *extra],
        "env": {"TOY_STATE_DIR": str(state), **env},
    }


async def test_a_stdio_server_is_added_listed_inspected_and_called(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    async with relay(make_settings) as c:
        failed, added = await call(c, "add_mcp_server", toy_args(tmp_path, TOY_API_KEY="sk-toy-secret-987654"))
        assert not failed
        assert added["success"] is True
        assert added["server"]["env"] == {"TOY_STATE_DIR": "***", "TOY_API_KEY": "***"}
        assert added["state"] == "connected"
        assert "echo" in added["tools"]
        assert "sk-toy-secret-987654" not in json.dumps(added)

        _, servers = await call(c, "list_mcp_servers")
        [toy] = servers["servers"]
        assert {k: toy[k] for k in ("name", "connected", "state", "transport")} == {
            "name": "toy",
            "connected": True,
            "state": "connected",
            "transport": "stdio",
        }

        _, listed = await call(c, "list_tools", {"server": "toy"})
        assert listed["success"] is True and listed["server"] == "toy"
        assert {"name": "echo", "brief": "Echo the text back."} in listed["tools"]

        _, everything = await call(c, "list_tools")
        names = [s["name"] for s in everything["servers"]]
        assert "core" in names and "toy" in names

        _, schema = await call(c, "get_tool_schema", {"server_name": "toy", "tool_name": "add"})
        assert schema["success"] is True
        assert schema["tool"]["name"] == "add"
        assert schema["tool"]["inputSchema"]["required"] == ["a", "b"]

        failed, called = await call(
            c, "call_tool", {"server_name": "toy", "tool_name": "add", "arguments": {"a": 4, "b": 5}}
        )
        assert not failed
    params = StdioServerParameters(command=sys.executable, args=[str(TOY)], env={"TOY_STATE_DIR": str(tmp_path)})
    async with Client(params, mode="legacy", cache=None) as direct:
        expected = (await direct.call_tool("add", {"a": 4, "b": 5})).model_dump(
            mode="json", by_alias=True, exclude_none=True
        )
    assert called == {"success": True, "result": expected}


async def test_downstream_failures_keep_the_seeds_error_shape(make_settings: SettingsFactory, tmp_path: Path) -> None:
    async with relay(make_settings) as c:
        await call(c, "add_mcp_server", toy_args(tmp_path))
        failed, errored = await call(
            c, "call_tool", {"server_name": "toy", "tool_name": "fail", "arguments": {"reason": "nope"}}
        )
        assert failed
        assert errored["success"] is False
        assert errored["error"] == "Error executing tool fail: toy failure: nope"
        assert errored["error_type"] == "ToolError"
        assert errored["result"]["isError"] is True

        failed, unknown_tool = await call(c, "call_tool", {"server_name": "toy", "tool_name": "ecco"})
        assert failed and unknown_tool["success"] is False
        assert unknown_tool["error"].startswith("Tool 'ecco' not found on 'toy'. Available: ")
        assert "echo" in unknown_tool["available_tools"]

        failed, unknown_server = await call(c, "call_tool", {"server_name": "tyo", "tool_name": "echo"})
        assert failed
        assert unknown_server["error"] == "Server 'tyo' not found"
        assert "toy" in unknown_server["available_servers"] and "core" in unknown_server["available_servers"]

        failed, died = await call(c, "call_tool", {"server_name": "toy", "tool_name": "crash"})
        assert failed and "died during crash" in died["error"]
        _, again = await call(
            c, "call_tool", {"server_name": "toy", "tool_name": "echo", "arguments": {"text": "back"}}
        )
        assert again["success"] is True


async def test_resources_are_read_and_servers_removed(make_settings: SettingsFactory, tmp_path: Path) -> None:
    async with relay(make_settings) as c:
        await call(c, "add_mcp_server", toy_args(tmp_path))
        _, read = await call(c, "read_mcp_resource", {"server_name": "toy", "resource_uri": "toy://greeting"})
        assert read["success"] is True
        assert read["result"]["contents"] == [
            {"uri": "toy://greeting", "mimeType": "text/plain", "text": "hello from toy"}
        ]
        _, removed = await call(c, "remove_mcp_server", {"name": "toy"})
        assert removed["success"] is True and removed["removed"] == "toy"
        _, servers = await call(c, "list_mcp_servers")
        assert servers == {"servers": []}
        failed, gone = await call(c, "remove_mcp_server", {"name": "toy"})
        assert failed and gone["error"] == "Server 'toy' not found"


async def test_a_server_added_by_another_process_is_callable_at_once(
    make_settings: SettingsFactory, relay_home: Path, tmp_path: Path
) -> None:
    settings = make_settings()  # default exposure: core plus the three discovery tools
    async with Client(build_server(settings)) as c:
        _, before = await call(c, "list_tools")
        registry = ServerRegistry(relay_home / "relay.db", relay_home)
        other = Gateway(registry, relay_home, project_of(Path.cwd()), LIMITS)
        config = make_config(
            name="late", transport="stdio", command=sys.executable, args=[str(TOY)], scope=project_of(Path.cwd())
        )
        await other.add(config)
        await other.aclose()
        registry.close()
        _, called = await call(
            c, "call_tool", {"server_name": "late", "tool_name": "echo", "arguments": {"text": "hi"}}
        )
        assert called["success"] is True
        assert called["result"]["structuredContent"] == {"result": "hi"}
    assert "late" not in [s["name"] for s in before["servers"]]


async def test_a_hung_server_never_holds_list_tools(make_settings: SettingsFactory, tmp_path: Path) -> None:
    async with relay(make_settings, RELAY_GATEWAY_LIST_WAIT_S="8") as c:
        await call(c, "add_mcp_server", toy_args(tmp_path))
        await call(c, "add_mcp_server", toy_args(tmp_path, "stuck", "hang"), bound=120)
        started = anyio.current_time()
        _, listed = await call(c, "list_tools", bound=60)
        assert anyio.current_time() - started < 30  # the per-server wait is 8 s
        by_name = {s["name"]: s for s in listed["servers"]}
        assert "echo" in [t["name"] for t in by_name["toy"]["tools"]]
        assert by_name["stuck"]["tools"] == []
        assert by_name["stuck"]["state"] in ("connecting", "failed")
        _, status = await call(c, "status")
        states = {s["name"]: s["state"] for s in status["mcp_servers"]}
        assert states["toy"] == "connected" and states["stuck"] in ("connecting", "failed")
        assert status["mcp_server_count"] == 2


async def test_a_changed_definition_is_refused_until_the_server_is_added_again(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    async with relay(make_settings) as c:
        args = toy_args(tmp_path)
        await call(c, "add_mcp_server", args)
        await call(c, "call_tool", {"server_name": "toy", "tool_name": "mutate"})
        with anyio.fail_after(60):
            while True:
                failed, refused = await call(
                    c, "call_tool", {"server_name": "toy", "tool_name": "echo", "arguments": {"text": "x"}}
                )
                if failed:
                    break
                await anyio.sleep(0.05)
        assert refused["error_type"] == "TOOL_CHANGED"
        assert "changed its definition" in refused["error"]
        _, schema = await call(c, "get_tool_schema", {"server_name": "toy", "tool_name": "echo"})
        assert schema["definition_changed"] is True
        assert "id_rsa" in schema["tool"]["description"]
        await call(c, "add_mcp_server", args)  # re-adding approves what the server now says
        _, ok = await call(c, "call_tool", {"server_name": "toy", "tool_name": "echo", "arguments": {"text": "x"}})
        assert ok["success"] is True


async def test_bad_add_arguments_are_explained(make_settings: SettingsFactory) -> None:
    async with relay(make_settings) as c:
        failed, no_command = await call(c, "add_mcp_server", {"name": "x", "transport": "stdio"})
        assert failed and no_command["error"] == "transport 'stdio' needs a command"
        failed, ws = await call(
            c, "add_mcp_server", {"name": "w", "transport": "websocket", "url": "http://127.0.0.1:9/"}
        )
        assert failed and ws["code"] == "INVALID_ARGUMENT"
        assert "does not suit transport 'websocket'" in ws["error"] and "wss://" in ws["hint"]
        failed, clash = await call(c, "add_mcp_server", {"name": "core", "transport": "stdio", "command": "x"})
        assert failed and "relay's own toolsets" in clash["error"]
        failed, enum = await call(c, "add_mcp_server", {"name": "x", "transport": "sse", "url": "http://h/"})
        assert failed and enum["error"]["code"] == "INVALID_ARGUMENT"


async def test_recommend_tools_ranks_internal_and_downstream_tools(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    async with relay(make_settings) as c:
        await call(c, "add_mcp_server", toy_args(tmp_path))
        _, reply = await call(c, "recommend_tools", {"task_description": "add two integers together", "agent_id": "a1"})
        assert reply["success"] is True and reply["task"] == "add two integers together"
        assert reply["tools"][0]["server"] == "toy" and reply["tools"][0]["name"] == "add"
        assert "call_tool(server_name='toy', tool_name='add')" in reply["recommendation"]
        assert {"core", "gateway", "toy"} <= set(reply["available_servers"])
        assert reply["total_tools"] > 10 and reply["agent_id"] == "a1"
        _, delegate = await call(c, "recommend_tools", {"task_description": "hand a refactor to another coding agent"})
        assert ("core", "delegate") in [(t["server"], t["name"]) for t in delegate["tools"][:3]]
        failed, empty = await call(c, "recommend_tools", {"task_description": "  "})
        assert failed and empty["error"] == "task_description is empty"


async def test_a_toolset_that_cannot_load_hides_no_other_server(
    make_settings: SettingsFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from relay.server.toolsets import BUILTIN

    monkeypatch.setitem(BUILTIN, "broken", "tests.gateway.broken_toolset")
    async with relay(make_settings) as c:
        await call(c, "add_mcp_server", toy_args(tmp_path))
        failed, listed = await call(c, "list_tools")
        assert not failed
        by_name = {s["name"]: s for s in listed["servers"]}
        assert by_name["broken"]["tools"] == [] and "some_optional_dependency" in by_name["broken"]["error"]
        assert by_name["core"]["tools"] and "echo" in [t["name"] for t in by_name["toy"]["tools"]]
        _, recommended = await call(c, "recommend_tools", {"task_description": "echo text back"})
        assert recommended["tools"][0]["server"] == "toy"


async def test_attached_servers_leave_the_default_tools_list_unchanged(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    async def default_tools() -> tuple[list[dict[str, Any]], Any]:
        async with Client(build_server(make_settings(RELAY_GATEWAY_LIST_WAIT_S="30"))) as c:  # default toolsets
            _, listed = await call(c, "list_tools")
            tools = [t.model_dump(mode="json", by_alias=True) for t in (await c.list_tools()).tools]
            return tools, listed

    before, _ = await default_tools()
    registry = ServerRegistry(make_settings().db_path, make_settings().home)
    for name in ("one", "two"):
        registry.put(make_config(name=name, transport="stdio", command=sys.executable, args=[str(TOY)]))
    registry.close()
    after, listed = await default_tools()
    assert after == before
    assert {"one", "two"} <= {s["name"] for s in listed["servers"] if s["tools"]}


async def test_a_misspelt_server_name_is_refused_naming_the_nearest_server(make_settings: SettingsFactory) -> None:
    async with relay(make_settings) as c:
        failed_call, called = await call(
            c, "call_tool", {"server_name": "zne", "tool_name": "challenge", "arguments": {"prompt": "x"}}
        )
        failed_list, listed = await call(c, "list_tools", {"server": "gobby-task"})
    assert (failed_call, failed_list) == (True, True)
    assert (called["server"], called["error"], called["code"]) == ("zne", "Server 'zne' not found", "SERVER_NOT_FOUND")
    assert called["hint"].startswith("did you mean `zen`? servers: core, gateway, ")
    assert called["hint"].endswith("; add one with add_mcp_server")
    assert listed["hint"].startswith("did you mean `gobby-tasks`")


async def test_a_misspelt_tool_name_is_refused_naming_the_nearest_tool_on_every_kind_of_server(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    async with relay(make_settings) as c:
        await call(c, "add_mcp_server", toy_args(tmp_path))
        _, called = await call(c, "call_tool", {"server_name": "toy", "tool_name": "ecco"})
        _, described = await call(c, "get_tool_schema", {"server_name": "toy", "tool_name": "ecco"})
        _, own = await call(c, "get_tool_schema", {"server_name": "zen", "tool_name": "chalenge"})
    assert (called["code"], called["hint"]) == (
        "TOOL_NOT_FOUND",
        "did you mean `echo`? call list_tools(server='toy') for the tools it has",
    )
    assert (described["code"], described["hint"]) == (
        "TOOL_NOT_FOUND",
        "did you mean `echo`? call list_tools(server='toy') for the tools it has",
    )
    assert (own["code"], own["hint"]) == (
        "TOOL_NOT_FOUND",
        "did you mean `challenge` or `chat`? list_tools(server='zen') lists them",
    )


async def test_list_tools_lists_each_toolset_once_with_its_aliases(make_settings: SettingsFactory) -> None:
    async with relay(make_settings) as c:
        _, everything = await call(c, "list_tools")
        _, by_alias = await call(c, "list_tools", {"server": "pal"})
    names = [s["name"] for s in everything["servers"]]
    assert len(names) == len(set(names))
    assert "pal" not in names and "gobby-tasks" not in names
    entries = {s["name"]: s for s in everything["servers"]}
    assert (entries["zen"]["aliases"], entries["tasks"]["aliases"]) == (["pal"], ["gobby-tasks"])
    assert "aliases" not in entries["core"]
    assert [t["name"] for t in by_alias["tools"]] == [t["name"] for t in entries["zen"]["tools"]]
