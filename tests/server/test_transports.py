"""relay over real transports: stdio (as MCP clients launch it) and Streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import httpx2 as httpx
import pytest
from mcp import Client, StdioServerParameters

from relay.server.app import build_server
from relay.server.http import build_http_app
from tests.conftest import SettingsFactory

pytestmark = pytest.mark.anyio

RELAY = str(Path(sys.executable).with_name("relay"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_delegate_over_stdio(make_settings: SettingsFactory, relay_home: Path, workdir: Path) -> None:
    make_settings()  # writes config.toml with the fake claude
    params = StdioServerParameters(
        command=RELAY, args=["serve"], env={**os.environ, "RELAY_HOME": str(relay_home)}, cwd=str(workdir)
    )
    with anyio.fail_after(60):
        async with Client(params) as c:
            tools = await c.list_tools()
            result = await c.call_tool("delegate", {"prompt": "hi", "cwd": str(workdir), "mode": "sync"})
    assert "delegate" in [t.name for t in tools.tools]
    assert result.structured_content is not None
    assert result.structured_content["output"] == "hi from mock"


async def test_delegate_over_streamable_http(make_settings: SettingsFactory, relay_home: Path, workdir: Path) -> None:
    make_settings()
    port = free_port()
    env = {**os.environ, "RELAY_HOME": str(relay_home)}
    proc = subprocess.Popen(
        [RELAY, "serve", "--http", "--port", str(port)],
        env=env,
        cwd=str(workdir),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        with anyio.fail_after(30):
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                        break
                except OSError:
                    await anyio.sleep(0.05)
            async with Client(f"http://127.0.0.1:{port}/mcp") as c:
                result = await c.call_tool("delegate", {"prompt": "hi", "cwd": str(workdir), "mode": "sync"})
    finally:
        proc.terminate()
        proc.wait(10)
    assert result.structured_content is not None and result.structured_content["status"] == "completed"


def test_serving_http_beyond_loopback_without_a_token_is_refused(relay_home: Path) -> None:
    out = subprocess.run(
        [RELAY, "serve", "--http", "--host", "0.0.0.0", "--port", "1"],
        env={**os.environ, "RELAY_HOME": str(relay_home)},
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 2
    assert "INVALID_ARGUMENT" in out.stderr and "--token" in out.stderr


async def test_the_http_app_wants_the_bearer_token_and_checks_the_host(
    make_settings: SettingsFactory,
) -> None:
    app = build_http_app(build_server(make_settings()), "0.0.0.0", 8765, "s3cret")
    transport = httpx.ASGITransport(app=app)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    inner = app.app.app  # (bearer check, wire check) the SDK's Starlette app, whose lifespan starts the session manager
    async with (
        inner.router.lifespan_context(inner),
        httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as client,
    ):
        missing = await client.post("/mcp", json=body, headers=headers)
        wrong = await client.post("/mcp", json=body, headers={**headers, "authorization": "Bearer nope"})
        rebinding = await client.post(
            "/mcp",
            json=body,
            headers={**headers, "authorization": "Bearer s3cret", "host": "evil.example:8765"},
        )
    assert missing.status_code == 401 and wrong.status_code == 401
    assert rebinding.status_code in (403, 421)
