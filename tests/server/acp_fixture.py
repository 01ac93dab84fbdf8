"""What the steering and approval tests share: the fake ACP agent registered, a relay over real Streamable HTTP in
this process (so the fake agent is its agent too), and the audit entries of one event."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

import relay.agents
from relay.audit import LOG_FILE, iter_lines, parse_loose
from relay.config import Settings
from relay.server.app import build_server
from relay.server.http import build_http_app
from tests.fakes.acp.adapter import NAME, FakeAcpAdapter
from tests.reliability.conftest import free_port

AGENT = NAME


@pytest.fixture
def acp_agent(relay_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The fake ACP agent (tests/fakes/acp) as an agent of relay for this test; its name."""
    monkeypatch.setitem(relay.agents._BUILTIN, NAME, FakeAcpAdapter(relay_home / "jobs"))  # pyright: ignore[reportPrivateUsage]
    yield NAME


def audit(home: Path, event: str) -> list[dict[str, Any]]:
    entries = [parse_loose(line) for line in iter_lines(home / LOG_FILE)]
    return [e for e in entries if e is not None and e["event"] == event]


@contextlib.asynccontextmanager
async def over_http(settings: Settings) -> AsyncIterator[int]:
    """relay's MCP server over Streamable HTTP on a free 127.0.0.1 port, served by uvicorn in this event loop."""
    import uvicorn

    port = free_port()
    app = build_http_app(build_server(settings), "127.0.0.1", port, None)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        with anyio.fail_after(30):
            while not server.started:
                await anyio.sleep(0.02)
        try:
            yield port
        finally:
            server.should_exit = True


@contextlib.asynccontextmanager
async def http_client(port: int, token: str | None = None, **options: Any) -> AsyncIterator[Client]:
    """An SDK client over Streamable HTTP (with `token` as its bearer), `options` the Client's own."""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    async with create_mcp_http_client(headers=headers) as http:
        transport = streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http)
        async with Client(transport, **options) as client:
            yield client
