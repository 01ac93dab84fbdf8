"""Two published MCP servers nobody here wrote, pinned in scripts/install-mcp-servers, behind the gateway."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.server.app import build_server
from tests.conftest import SettingsFactory
from tests.gateway.conftest import GATEWAY_ENV, TOY

pytestmark = pytest.mark.anyio


async def call(c: Client, tool: str, args: dict[str, Any] | None = None) -> tuple[bool, Any]:
    with anyio.fail_after(120):
        result = await c.call_tool(tool, args or {})
    assert result.structured_content is not None
    return bool(result.is_error), result.structured_content


async def test_the_everything_server_lists_describes_calls_and_serves_resources(
    make_settings: SettingsFactory, published: Path
) -> None:
    async with Client(build_server(make_settings(**GATEWAY_ENV))) as c:
        _, added = await call(
            c,
            "add_mcp_server",
            {"name": "everything", "transport": "stdio", "command": str(published / "mcp-server-everything")},
        )
        assert added["state"] == "connected"
        assert {"echo", "get-sum", "get-structured-content"} <= set(added["tools"])

        _, listed = await call(c, "list_tools", {"server": "everything"})
        assert {"name": "echo", "brief": "Echoes back the input string"} in listed["tools"]

        _, schema = await call(c, "get_tool_schema", {"server_name": "everything", "tool_name": "get-sum"})
        assert set(schema["tool"]["inputSchema"]["properties"]) == {"a", "b"}

        _, echoed = await call(
            c, "call_tool", {"server_name": "everything", "tool_name": "echo", "arguments": {"message": "hi"}}
        )
        assert echoed == {
            "success": True,
            "result": {"content": [{"type": "text", "text": "Echo: hi"}], "isError": False, "resultType": "complete"},
        }

        _, summed = await call(
            c, "call_tool", {"server_name": "everything", "tool_name": "get-sum", "arguments": {"a": 2, "b": 40}}
        )
        assert summed["success"] is True and "42" in summed["result"]["content"][0]["text"]

        failed, bad = await call(
            c, "call_tool", {"server_name": "everything", "tool_name": "get-sum", "arguments": {"a": "x"}}
        )
        assert failed and bad["success"] is False

        uri = "demo://resource/static/document/architecture.md"
        _, read = await call(c, "read_mcp_resource", {"server_name": "everything", "resource_uri": uri})
        [content] = read["result"]["contents"]
        assert content["uri"] == uri and content["text"].startswith("# Everything Server")


async def test_the_filesystem_server_reads_inside_its_root_and_refuses_outside(
    make_settings: SettingsFactory, published: Path, tmp_path: Path
) -> None:
    root = tmp_path / "exported"
    root.mkdir()
    (root / "notes.txt").write_text("gateway notes\n")
    async with Client(build_server(make_settings(**GATEWAY_ENV))) as c:
        await call(
            c,
            "add_mcp_server",
            {
                "name": "fs",
                "transport": "stdio",
                "command": str(published / "mcp-server-filesystem"),
                "args": [str(root)],
            },
        )
        _, read = await call(
            c,
            "call_tool",
            {"server_name": "fs", "tool_name": "read_text_file", "arguments": {"path": str(root / "notes.txt")}},
        )
        assert read["success"] is True
        assert read["result"]["content"][0]["text"] == "gateway notes\n"

        failed, refused = await call(
            c, "call_tool", {"server_name": "fs", "tool_name": "read_text_file", "arguments": {"path": "/etc/hostname"}}
        )
        assert failed and refused["success"] is False
        assert "Access denied" in refused["error"]
        assert refused["result"]["isError"] is True

        _, both = await call(c, "list_tools")
        names = {s["name"]: s for s in both["servers"]}
        assert "list_directory" in [t["name"] for t in names["fs"]["tools"]]


async def test_published_and_own_servers_share_one_listing(
    make_settings: SettingsFactory, published: Path, tmp_path: Path
) -> None:
    async with Client(build_server(make_settings(**GATEWAY_ENV))) as c:
        await call(
            c,
            "add_mcp_server",
            {"name": "everything", "transport": "stdio", "command": str(published / "mcp-server-everything")},
        )
        await call(
            c,
            "add_mcp_server",
            {
                "name": "toy",
                "transport": "stdio",
                "command": sys.executable,
                "args": [str(TOY)],
                "env": {"TOY_STATE_DIR": str(tmp_path)},
            },
        )
        _, listed = await call(c, "list_tools")
        names = [s["name"] for s in listed["servers"]]
        assert {"core", "everything", "toy"} <= set(names)
        _, servers = await call(c, "list_mcp_servers")
        assert sorted((s["name"], s["connected"]) for s in servers["servers"]) == [("everything", True), ("toy", True)]
