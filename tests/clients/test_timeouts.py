"""Timeouts that lose nothing: auto mode answers before the client's own tool timeout; a client timeout keeps the job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.types import Implementation

from relay.clients.timeouts import auto_threshold, client_timeout
from relay.server.app import build_server
from relay.server.stdio_wire import CancelReasons
from tests.conftest import SettingsFactory

pytestmark = pytest.mark.anyio

RELAY = str(Path(sys.executable).with_name("relay"))


@pytest.mark.parametrize(
    ("client", "configured", "expected"),
    [
        ("codex-mcp-client", {}, 45.0),  # Codex waits 60 s: the handle goes back 15 s before
        ("codex-mcp-client", {"codex": 15.0}, 10.0),  # a lowered timeout, from config
        ("codex-mcp-client", {"codex-mcp-client": 20.0}, 15.0),  # config may use the clientInfo name
        ("claude-code", {}, 45.0),  # Claude waits a day: relay's own threshold applies
        ("gemini-cli-mcp-client", {}, 45.0),
        ("cursor-vscode", {"cursor": 4.0}, 0.0),  # no room at all: the handle at once
        ("some-new-client", {}, 45.0),  # unknown and not configured: relay's threshold
        ("some-new-client", {"some-new-client": 30.0}, 22.5),
        (None, {}, 45.0),
    ],
)
def test_the_auto_threshold_fits_inside_each_clients_tool_timeout(
    client: str | None, configured: dict[str, float], expected: float
) -> None:
    assert auto_threshold(45.0, client, configured) == expected


def test_known_clients_and_where_their_timeout_comes_from() -> None:
    assert client_timeout("codex-mcp-client", {}).source == "default"
    assert client_timeout("codex-mcp-client", {"codex": 9.0}).source == "config"
    assert client_timeout("mystery", {}).source == "unknown"


def test_a_cancel_reason_tells_a_client_timeout_from_an_interrupt() -> None:
    reasons = CancelReasons()
    for request_id, reason in [
        (1, "McpError: MCP error -32001: Request timed out"),
        ("b", "request timeout after 60s"),
        (3, "AbortError: This operation was aborted"),
    ]:
        reasons.record(
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": request_id, "reason": reason},
            }
        )
    assert [reasons.timed_out(i) for i in ("1", "b", "3", "4")] == [True, True, False, False]
    assert reasons.timed_out("1") is False  # read once


async def test_a_client_with_a_short_configured_timeout_gets_the_job_handle_in_time(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    settings = make_settings("[clients.codex]\ntool_timeout_s = 8\n")
    assert settings.client_timeouts == {"codex": 8.0}
    codex = Implementation(name="codex-mcp-client", version="0.169.0")
    with anyio.fail_after(60):
        async with Client(build_server(settings), client_info=codex) as client:
            result = await client.call_tool(
                "delegate", {"prompt": "[[fake:sleep=30]] hi", "cwd": str(workdir), "mode": "auto"}
            )
            assert result.structured_content is not None
            job_id = result.structured_content["job_id"]
            assert result.structured_content["status"] == "running"  # 3 s in, not the 30 s the job takes
            await client.call_tool("job_cancel", {"job_id": job_id})


class RawClient:
    """JSON-RPC over a real `relay serve` subprocess, line by line."""

    def __init__(self, proc: anyio.abc.Process) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.stdin = proc.stdin
        self.stdout = proc.stdout
        self.buf = bytearray()
        self.next_id = 100

    async def send(self, message: dict[str, Any]) -> None:
        await self.stdin.send(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")

    async def reply(self, request_id: int) -> dict[str, Any]:
        while True:
            while b"\n" not in self.buf:
                self.buf.extend(await self.stdout.receive())
            line, _, rest = bytes(self.buf).partition(b"\n")
            self.buf[:] = rest
            message = json.loads(line)
            if message.get("id") == request_id:
                return message

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        await self.send({"id": self.next_id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
        return (await self.reply(self.next_id))["result"]["structuredContent"]

    async def running_job(self) -> str:
        while True:  # bounded by the caller's fail_after
            jobs = (await self.call("job_list", {"status": ["running"]}))["jobs"]
            if jobs:
                return str(jobs[0]["job_id"])


async def test_over_stdio_a_client_timeout_keeps_the_job_and_a_user_interrupt_cancels_it(
    make_settings: SettingsFactory, relay_home: Path, workdir: Path
) -> None:
    make_settings()
    env = {**os.environ, "RELAY_HOME": str(relay_home)}
    async with await anyio.open_process([RELAY, "serve"], env=env, cwd=workdir, stderr=subprocess.DEVNULL) as proc:
        client = RawClient(proc)
        with anyio.fail_after(120):
            await client.send(
                {
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {},
                        "clientInfo": {"name": "claude-code", "version": "2.1.197"},
                    },
                }
            )
            await client.reply(1)
            await client.send({"method": "notifications/initialized"})
            outcomes: dict[str, str] = {}
            for call_id, reason in [(2, "McpError: MCP error -32001: Request timed out"), (3, "user interrupted")]:
                arguments = {"prompt": "[[fake:sleep=60]] long", "cwd": str(workdir), "mode": "sync"}
                await client.send(
                    {"id": call_id, "method": "tools/call", "params": {"name": "delegate", "arguments": arguments}}
                )
                job_id = await client.running_job()
                await client.send(
                    {"method": "notifications/cancelled", "params": {"requestId": call_id, "reason": reason}}
                )
                waited = await client.call("job_wait", {"job_ids": [job_id], "timeout_s": 3})
                outcomes[reason] = waited["jobs"][0]["status"] if "jobs" in waited else json.dumps(waited)
                if outcomes[reason] == "running":
                    await client.call("job_cancel", {"job_id": job_id})
            await client.stdin.aclose()
            await proc.wait()
    assert outcomes == {"McpError: MCP error -32001: Request timed out": "running", "user interrupted": "cancelled"}
