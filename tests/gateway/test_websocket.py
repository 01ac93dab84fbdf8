"""Downstream servers over WebSocket: relay's transport with the SDK's Client, and through relay's gateway.

The server is the toy SDK server served over a real `websockets` server on 127.0.0.1, in its own
process (servers/ws_server.py), so a test can kill it and start it again on the same port.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client

from relay.errors import ErrorCode, RelayError
from relay.gateway import Gateway, Limits, ServerRegistry, make_config
from relay.gateway.websocket import websocket_client
from tests.conftest import SettingsFactory
from tests.gateway.conftest import HERE, PROJECT, free_port
from tests.gateway.test_gateway_tools import call, relay

pytestmark = pytest.mark.anyio

WS_SERVER = HERE / "servers" / "ws_server.py"


class WsServer:
    """The toy server over WebSocket in a child process; `kill` and `start` keep its port."""

    def __init__(self, state: Path, *flags: str) -> None:
        self.state = state
        self.flags = flags
        self.port = free_port()
        self.url = f"ws://127.0.0.1:{self.port}/mcp"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.kill()  # reaps the one before (it may have crashed on its own)
        proc = self.proc = subprocess.Popen(
            [sys.executable, str(WS_SERVER), "websocket", str(self.port), *self.flags],
            env={**os.environ, "TOY_STATE_DIR": str(self.state)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the websocket toy server did not start")
            time.sleep(0.05)

    def kill(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def headers_seen(self) -> dict[str, str]:
        return json.loads((self.state / "ws-headers.json").read_text())


@contextlib.contextmanager
def ws_server(state: Path, *flags: str) -> Iterator[WsServer]:
    server = WsServer(state, *flags)
    server.start()
    try:
        yield server
    finally:
        server.kill()


def ws_args(server: WsServer, name: str = "wsy", **headers: str) -> dict[str, object]:
    return {"name": name, "transport": "websocket", "url": server.url, **({"headers": headers} if headers else {})}


async def test_the_sdk_client_runs_over_the_transport_and_messages_that_are_not_json_rpc_are_skipped(
    tmp_path: Path,
) -> None:
    with ws_server(tmp_path, "garbage") as server:
        with anyio.fail_after(60):
            transport = websocket_client(server.url, {"X-Api-Key": "k-123"})
            async with Client(transport, mode="legacy") as client:
                names = [t.name for t in (await client.list_tools()).tools]
                garbled = await client.call_tool("garble", {})
                echoed = await client.call_tool("echo", {"text": "still here"})
        assert {"echo", "add", "garble"} <= set(names)
        assert garbled.structured_content == {"result": "garbled"}
        assert echoed.structured_content == {"result": "still here"}
        assert server.headers_seen() == {"X-Api-Key": "k-123"}


async def test_a_websocket_server_is_added_listed_inspected_and_called_through_relay(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    with ws_server(tmp_path) as server:
        async with relay(make_settings) as c:
            failed, added = await call(c, "add_mcp_server", ws_args(server, Authorization="Bearer ws-secret-4242"))
            assert not failed and added["state"] == "connected", added
            assert added["server"]["transport"] == "websocket" and added["server"]["url"] == server.url
            assert added["server"]["headers"] == {"Authorization": "***"}
            assert "echo" in added["tools"] and "ws-secret-4242" not in json.dumps(added)
            assert server.headers_seen() == {"Authorization": "Bearer ws-secret-4242"}

            _, listed = await call(c, "list_tools", {"server": "wsy"})
            assert {"name": "add", "brief": "Add two integers."} in listed["tools"]
            _, schema = await call(c, "get_tool_schema", {"server_name": "wsy", "tool_name": "add"})
            assert schema["tool"]["inputSchema"]["required"] == ["a", "b"]
            failed, added_up = await call(
                c, "call_tool", {"server_name": "wsy", "tool_name": "add", "arguments": {"a": 4, "b": 5}}
            )
            assert not failed and added_up["result"]["structuredContent"] == {"sum": 9}
            failed, garbled = await call(c, "call_tool", {"server_name": "wsy", "tool_name": "garble"})
            assert not failed and garbled["result"]["structuredContent"] == {"result": "garbled"}
            _, servers = await call(c, "list_mcp_servers")
            [wsy] = servers["servers"]
            assert (wsy["transport"], wsy["state"], wsy["connected"]) == ("websocket", "connected", True)


async def test_a_websocket_server_going_away_mid_call_is_a_clear_error_and_relay_keeps_serving(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    # Two failed starts in a row: the next waits out the restart backoff, kept short here so the
    # server started again below is reached on the very next call.
    with ws_server(tmp_path) as server:
        async with relay(make_settings, RELAY_GATEWAY_RESTART_BACKOFF_S="0.001") as c:
            await call(c, "add_mcp_server", ws_args(server))
            _, before = await call(c, "call_tool", {"server_name": "wsy", "tool_name": "pid"})
            assert before["result"]["structuredContent"] == {"result": server.proc.pid if server.proc else None}

            failed, died = await call(c, "call_tool", {"server_name": "wsy", "tool_name": "crash"})
            assert failed and died["code"] == "UPSTREAM_ERROR"
            assert "wsy died during crash" in died["error"]
            assert "call it again if it is safe" in died["hint"]

            _, own = await call(c, "list_tools", {"server": "core"})
            assert own["success"] is True and own["tools"]
            failed, down = await call(c, "call_tool", {"server_name": "wsy", "tool_name": "echo", "arguments": {}})
            assert failed and down["code"] == "UPSTREAM_ERROR"
            # Refused, or (the process was still closing its listening socket) accepted and dropped.
            assert down["error"].startswith(
                ("wsy failed to start: cannot connect to", "wsy failed to start: the websocket")
            )
            assert server.url in down["error"] and server.url in down["hint"]
            _, servers = await call(c, "list_mcp_servers")
            [wsy] = servers["servers"]
            assert wsy["state"] == "failed" and wsy["last_error"] == down["error"]

            await anyio.to_thread.run_sync(server.start)  # the same port, a new process
            failed, back = await call(
                c, "call_tool", {"server_name": "wsy", "tool_name": "echo", "arguments": {"text": "back"}}
            )
            assert not failed and back["result"]["structuredContent"] == {"result": "back"}
            _, after = await call(c, "call_tool", {"server_name": "wsy", "tool_name": "pid"})
            assert after["result"]["structuredContent"] == {"result": server.proc.pid if server.proc else None}
            assert after != before


async def test_relay_reconnects_when_the_websocket_server_restarts_while_idle(gateway: Gateway, tmp_path: Path) -> None:
    with ws_server(tmp_path) as server:
        await gateway.add(make_config(name="wsy", transport="websocket", url=server.url, scope=PROJECT))
        first = await gateway.call_tool("wsy", "pid", {})
        server.kill()
        with anyio.fail_after(30):  # the closed socket is noticed while idle, before any call
            while gateway.connection("wsy").alive:
                await anyio.sleep(0.02)
        await anyio.to_thread.run_sync(server.start)
        second = await gateway.call_tool("wsy", "echo", {"text": "again"})
        third = await gateway.call_tool("wsy", "pid", {})
    assert second.structured_content == {"result": "again"}
    assert server.proc is not None and third.structured_content == {"result": server.proc.pid}
    assert first.structured_content != third.structured_content
    assert gateway.connection("wsy").starts == 2


async def test_no_server_or_a_refused_handshake_is_a_clear_upstream_error(gateway: Gateway, tmp_path: Path) -> None:
    nobody = f"ws://127.0.0.1:{free_port()}/mcp"
    await gateway.add(make_config(name="nobody", transport="websocket", url=nobody, scope=PROJECT))
    with pytest.raises(RelayError) as absent:
        await gateway.call_tool("nobody", "echo", {"text": "x"})
    assert absent.value.code is ErrorCode.UPSTREAM_ERROR
    assert f"nobody failed to start: cannot connect to {nobody}" in absent.value.message
    assert nobody in absent.value.hint
    with ws_server(tmp_path) as server:
        wrong = server.url.replace("/mcp", "/elsewhere")
        await gateway.add(make_config(name="wrong", transport="websocket", url=wrong, scope=PROJECT))
        [listed] = await gateway.list_tools("wrong")
    assert listed.state == "failed" and listed.tools == []
    assert listed.error == f"wrong failed to start: the websocket handshake with {wrong} was refused: HTTP 404"


async def test_a_handshake_that_never_completes_fails_after_the_connect_timeout(
    registry: ServerRegistry, relay_home: Path
) -> None:
    with socket.socket() as listener:  # the kernel accepts the TCP connection; nobody ever answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"ws://127.0.0.1:{listener.getsockname()[1]}/mcp"
        gateway = Gateway(registry, relay_home, PROJECT, Limits(connect_timeout_s=1.5, list_wait_s=30))
        try:
            await gateway.add(make_config(name="mute", transport="websocket", url=url, scope=PROJECT))
            with anyio.fail_after(30), pytest.raises(RelayError) as caught:
                await gateway.call_tool("mute", "echo", {"text": "x"})
        finally:
            await gateway.aclose()
    assert caught.value.code is ErrorCode.UPSTREAM_ERROR
    assert caught.value.message == "mute did not finish starting within 1.5 seconds"
    assert url in caught.value.hint


async def test_a_websocket_server_declared_in_a_projects_config_toml_is_imported_and_called(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    project = tmp_path / "other-project"
    with ws_server(tmp_path) as server:
        (project / ".codex").mkdir(parents=True)
        (project / ".codex" / "config.toml").write_text(f'[mcp_servers.sock]\nurl = "{server.url}"\n')
        (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"typed": {"type": "ws", "url": server.url}}}))
        async with relay(make_settings) as c:
            _, reply = await call(c, "import_mcp_server", {"from_project": str(project)})
            assert reply == {"success": True, "imported": ["typed", "sock"]}
            _, servers = await call(c, "list_mcp_servers")
            assert {s["name"]: s["transport"] for s in servers["servers"]} == {
                "sock": "websocket",
                "typed": "websocket",
            }
            for name in ("sock", "typed"):
                failed, called = await call(
                    c, "call_tool", {"server_name": name, "tool_name": "echo", "arguments": {"text": name}}
                )
                assert not failed and called["result"]["structuredContent"] == {"result": name}
