"""The toy server (toy_server.py, the official SDK's MCPServer) served over WebSocket, for the gateway tests.

Usage: ws_server.py websocket PORT [garbage] ; TOY_STATE_DIR names a folder for markers.

The wire is the one websocket MCP servers speak: subprotocol `mcp`, one JSON-RPC message per text
message, every connection its own session of the SDK's lowlevel server run over memory streams
bridged to a `websockets` server on 127.0.0.1. Only the path /mcp is served (others get HTTP 404).
Each connection writes its handshake headers to TOY_STATE_DIR/ws-headers.json. With `garbage`,
every connection first receives messages that are not JSON-RPC. The extra tool `garble` sends
such messages in the middle of a session, then answers.
"""

from __future__ import annotations

import contextvars
import http
import json
import sys

import anyio
from mcp.shared.message import SessionMessage
from mcp.types import jsonrpc_message_adapter
from toy_server import STATE, server  # pyright: ignore[reportMissingImports, reportUnknownVariableType]
from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol

PORT = int(sys.argv[2])
GARBAGE = "garbage" in sys.argv[3:]
JUNK: tuple[str | bytes, ...] = ("this is not json", '{"jsonrpc": "2.0", "nonsense": true}', "[1, 2", b"\xff\xfe\x00")
_current: contextvars.ContextVar[ServerConnection] = contextvars.ContextVar("ws")


@server.tool(description="Send messages that are not JSON-RPC on this connection, then answer.")
async def garble() -> str:
    ws = _current.get()
    for junk in JUNK:
        await ws.send(junk)
    return "garbled"


def only_mcp_path(ws: ServerConnection, request: Request) -> Response | None:
    if request.path != "/mcp":
        return ws.respond(http.HTTPStatus.NOT_FOUND, "no MCP endpoint here; use /mcp\n")
    return None


async def session(ws: ServerConnection) -> None:
    """One connection: a fresh session of the toy server until the client goes away."""
    _current.set(ws)
    request_headers: Headers = ws.request.headers if ws.request is not None else Headers()
    (STATE / "ws-headers.json").write_text(
        json.dumps({k: v for k, v in request_headers.raw_items() if k.lower().startswith(("authorization", "x-"))})
    )
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def from_client() -> None:
        async with read_writer:
            try:
                async for raw in ws:
                    try:
                        message = jsonrpc_message_adapter.validate_json(raw, by_name=False)
                    except ValueError as exc:
                        await read_writer.send(exc)
                        continue
                    await read_writer.send(SessionMessage(message))
            except ConnectionClosed:
                pass

    async def to_client() -> None:
        async with write_reader:
            async for message in write_reader:
                try:
                    await ws.send(message.message.model_dump_json(by_alias=True, exclude_unset=True))
                except ConnectionClosed:
                    return

    lowlevel = server._lowlevel_server  # pyright: ignore[reportPrivateUsage, reportUnknownMemberType, reportUnknownVariableType]
    async with anyio.create_task_group() as tg:
        tg.start_soon(from_client)
        tg.start_soon(to_client)
        if GARBAGE:
            for junk in JUNK:
                await ws.send(junk)
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())  # pyright: ignore[reportUnknownMemberType]
        tg.cancel_scope.cancel()


async def main() -> None:
    async with serve(
        session, "127.0.0.1", PORT, subprotocols=[Subprotocol("mcp")], process_request=only_mcp_path
    ) as ws_server:
        print(f"listening on ws://127.0.0.1:{PORT}/mcp", flush=True)
        await ws_server.serve_forever()


if __name__ == "__main__":
    anyio.run(main)
