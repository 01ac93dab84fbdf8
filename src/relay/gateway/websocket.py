"""MCP over WebSocket, client side: the transport the SDK relay uses (mcp 2.3.0) no longer ships.

The wire is what the SDK's old `websocket_client` and websocket MCP servers speak: the `mcp`
subprotocol, one JSON-RPC message per text message. `websocket_client(url, headers)` yields the
same `(read_stream, write_stream)` pair as the SDK's stdio and Streamable HTTP transports, so
`mcp.Client` takes it as it is. A message that is not JSON-RPC reaches the session as an
exception value (the session logs and skips it, as with a bad stdout line); the connection
ending, cleanly or not, ends the read stream, which fails the requests in flight with the SDK's
"Connection closed" error.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Mapping
from contextlib import asynccontextmanager

import anyio
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage
from mcp.types import jsonrpc_message_adapter
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI
from websockets.typing import Subprotocol

logger = logging.getLogger(__name__)

SUBPROTOCOL = Subprotocol("mcp")
SCHEMES = ("ws://", "wss://")
# The handshake; relay's own connect deadline bounds the whole start as well.
DEFAULT_OPEN_TIMEOUT_S = 30.0
# How long a closing handshake may take before the TCP connection is dropped.
CLOSE_TIMEOUT_S = 2.0
# One message; a tool result with images can be large (websockets' own default is 1 MiB).
DEFAULT_MAX_MESSAGE_BYTES = 32 * 1024 * 1024


class WebSocketError(ConnectionError):
    """The websocket could not be opened: what was tried, and what the server or the network said."""


def parse(raw: str | bytes) -> SessionMessage | Exception:
    """One websocket message as a session message, or the reason it is not one (as a value, never raised)."""
    try:
        message = jsonrpc_message_adapter.validate_json(raw, by_name=False)
    except ValueError as exc:
        logger.warning("skipping a websocket message that is not JSON-RPC: %.200r", raw)
        return exc
    return SessionMessage(message)


async def _open(
    url: str, headers: Mapping[str, str] | None, open_timeout_s: float | None, max_message_bytes: int
) -> ClientConnection:
    if not url.startswith(SCHEMES):
        raise WebSocketError(f"{url!r} is not a websocket url (ws:// or wss://)")
    try:
        return await connect(
            url,
            subprotocols=[SUBPROTOCOL],
            additional_headers=dict(headers) if headers else None,
            open_timeout=open_timeout_s,
            close_timeout=CLOSE_TIMEOUT_S,
            max_size=max_message_bytes,
        )
    except InvalidStatus as exc:
        raise WebSocketError(
            f"the websocket handshake with {url} was refused: HTTP {exc.response.status_code}"
        ) from exc
    except InvalidURI as exc:
        raise WebSocketError(f"{url!r} is not a usable websocket url: {exc}") from exc
    except InvalidHandshake as exc:
        raise WebSocketError(f"the websocket handshake with {url} failed: {exc}") from exc
    except OSError as exc:
        if isinstance(exc, TimeoutError):
            raise
        raise WebSocketError(f"cannot connect to {url}: {exc}") from exc


@asynccontextmanager
async def websocket_client(
    url: str,
    headers: Mapping[str, str] | None = None,
    *,
    open_timeout_s: float | None = DEFAULT_OPEN_TIMEOUT_S,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
) -> AsyncGenerator[TransportStreams]:
    """Connect to an MCP server at a ws:// or wss:// url (subprotocol `mcp`, `headers` sent with the handshake).

    Raises WebSocketError when the connection or the handshake fails, TimeoutError when the
    handshake takes longer than `open_timeout_s`.
    """
    ws = await _open(url, headers, open_timeout_s, max_message_bytes)
    if ws.subprotocol != SUBPROTOCOL:
        logger.debug("%s accepted the websocket without the mcp subprotocol; speaking MCP anyway", url)
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader() -> None:
        try:
            async with read_writer:
                async for raw in ws:
                    await read_writer.send(parse(raw))
        except ConnectionClosed as exc:  # closed without a clean closing handshake
            logger.info("the websocket to %s was lost: %s", url, exc)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the session is gone

    async def writer() -> None:
        try:
            async with write_reader:
                async for session_message in write_reader:
                    await ws.send(session_message.message.model_dump_json(by_alias=True, exclude_unset=True))
        except (ConnectionClosed, anyio.ClosedResourceError, anyio.BrokenResourceError):
            # The read side may not have noticed yet: end it, so no request waits for a reply forever.
            await read_writer.aclose()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            tg.start_soon(writer)
            try:
                yield read_stream, write_stream
            finally:
                tg.cancel_scope.cancel()
    finally:
        # Even under a caller's cancellation the socket is closed, the wait for the peer bounded.
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(CLOSE_TIMEOUT_S * 2):
                await ws.close()
            for stream in (read_stream, write_stream, read_writer, write_reader):
                await stream.aclose()
