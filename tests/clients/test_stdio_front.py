"""The stdio front: initialize and tools/list from the snapshot of the last run, everything else to the full server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from relay.server.stdio_front import SNAPSHOT_FILE, Snapshot, snapshot_key

pytestmark = pytest.mark.anyio

RELAY = str(Path(sys.executable).with_name("relay"))
INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


class Raw:
    def __init__(self, proc: anyio.abc.Process) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc, self.stdin, self.stdout, self.buf = proc, proc.stdin, proc.stdout, bytearray()

    async def send(self, message: dict[str, Any]) -> None:
        await self.stdin.send(json.dumps(message).encode() + b"\n")

    async def next(self) -> dict[str, Any]:
        while b"\n" not in self.buf:
            self.buf.extend(await self.stdout.receive())
        line, _, rest = bytes(self.buf).partition(b"\n")
        self.buf[:] = rest
        return json.loads(line)


async def handshake(env: dict[str, str], cwd: Path) -> tuple[dict[str, Any], dict[str, Any], list[Any]]:
    """initialize, tools/list and one tools/call over a fresh `relay serve`; also every notification seen."""
    async with await anyio.open_process([RELAY, "serve"], env=env, cwd=cwd, stderr=subprocess.DEVNULL) as proc:
        raw = Raw(proc)
        await raw.send(INIT)
        init = await raw.next()
        await raw.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await raw.send({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        tools = await raw.next()
        await raw.send(
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "job_list", "arguments": {}}}
        )
        seen: list[Any] = []
        while (message := await raw.next()).get("id") != 2:
            seen.append(message.get("method"))
        assert message["result"]["structuredContent"]["jobs"] == []
        await raw.stdin.aclose()
        assert await proc.wait() == 0
    return init, tools, seen


async def test_the_second_start_answers_from_the_snapshot_exactly_as_the_server_did(
    relay_home: Path, workdir: Path
) -> None:
    env = {**os.environ, "RELAY_HOME": str(relay_home)}
    with anyio.fail_after(120):
        first = await handshake(env, workdir)
        assert (relay_home / "cache" / SNAPSHOT_FILE).is_file()
        second = await handshake(env, workdir)
    assert second == first
    assert first[2] == []  # the snapshot matched: no tools/list_changed


async def test_a_stale_snapshot_is_answered_then_corrected_with_list_changed(relay_home: Path, workdir: Path) -> None:
    env = {**os.environ, "RELAY_HOME": str(relay_home)}
    with anyio.fail_after(120):
        _, tools, _ = await handshake(env, workdir)
        path = relay_home / "cache" / SNAPSHOT_FILE
        snapshot = Snapshot(path, json.loads(path.read_text())["key"])
        snapshot.tools = {"tools": []}
        snapshot.save()
        _, stale, seen = await handshake(env, workdir)
    assert stale["result"] == {"tools": []}
    assert seen == ["notifications/tools/list_changed"]
    assert Snapshot(path, snapshot.key).tools == tools["result"]


def test_the_snapshot_key_follows_the_toolsets_and_the_config(tmp_path: Path) -> None:
    env = {"RELAY_HOME": str(tmp_path)}
    base = snapshot_key(env, tmp_path, None, None)
    assert snapshot_key(env, tmp_path, "core,zen", None) != base
    assert snapshot_key({**env, "RELAY_PROFILE": "zen"}, tmp_path, None, None) != base
    (tmp_path / "config.toml").write_text("[server]\ntoolsets = ['zen']\n")
    assert snapshot_key(env, tmp_path, None, None) != base


async def test_the_sdk_client_works_through_the_front_on_a_warm_start(
    make_settings: Any, relay_home: Path, workdir: Path
) -> None:
    make_settings()
    env = {**os.environ, "RELAY_HOME": str(relay_home)}
    params = StdioServerParameters(command=RELAY, args=["serve"], env=env, cwd=str(workdir))
    with anyio.fail_after(120):
        for _ in range(2):  # cold (records the snapshot), then warm (answers from it)
            async with Client(params, mode="legacy") as client:
                listed = await client.list_tools()
                result = await client.call_tool("delegate", {"prompt": "hi", "cwd": str(workdir), "mode": "sync"})
            assert "delegate" in [t.name for t in listed.tools]
            assert result.structured_content is not None and result.structured_content["output"] == "hi from mock"
