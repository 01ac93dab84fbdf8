"""relay over real stdio: downstream servers it started end when it exits."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.gateway.conftest import TOY, alive

pytestmark = pytest.mark.anyio

RELAY = Path(sys.executable).parent / "relay"


async def test_downstream_servers_end_when_relay_exits(relay_home: Path, tmp_path: Path) -> None:
    env = {
        "RELAY_HOME": str(relay_home),
        "HOME": str(relay_home),
        "PATH": os.environ.get("PATH", ""),
        "RELAY_TOOLSETS": "core,gateway",
        "RELAY_GRANT": "full",  # adding a stdio server is a `full` action: granted, not asked
    }
    params = StdioServerParameters(command=str(RELAY), args=["serve"], env=env, cwd=tmp_path)
    with anyio.fail_after(180):
        async with Client(params, mode="legacy", cache=None) as relay:
            added = await relay.call_tool(
                "add_mcp_server",
                {
                    "name": "toy",
                    "transport": "stdio",
                    "command": sys.executable,
                    "args": [str(TOY)],
                    "env": {"TOY_STATE_DIR": str(tmp_path)},
                },
            )
            assert added.structured_content is not None and added.structured_content["state"] == "connected"
            called = await relay.call_tool("call_tool", {"server_name": "toy", "tool_name": "pid"})
            assert called.structured_content is not None
            pid = called.structured_content["result"]["structuredContent"]["result"]
            assert alive(pid)
        while alive(pid):  # relay closes its downstream servers on the way out
            await anyio.sleep(0.05)
