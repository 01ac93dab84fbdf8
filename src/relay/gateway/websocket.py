"""MCP over WebSocket, client side: the transport the SDK relay uses (mcp 2.3.0) no longer ships.

The wire is what the SDK's old `websocket_client` and websocket MCP servers speak: the `mcp`
subprotocol, one JSON-RPC message per text message. `websocket_client(url, headers)` yields the
same `(read_stream, write_stream)` pair as the SDK's stdio and Streamable HTTP transports, so
`mcp.Client` takes it as it is. A message that is not JSON-RPC reaches the session as an
exception value (the session logs and skips it, as with a bad stdout line); the connection
ending, cleanly or not, ends the read stream, which fails the requests in flight with the SDK's
"Connection closed" error.

relay reads the frames itself (`websockets` builds and checks the handshake and frames what relay
sends): a library reading a frame whole would hold a 50 MB answer several times over. A message's
payload goes through `Gathered` as it arrives, so one longer than the result cap is spilled to a
file and read back as a stream (`_spill.py`), as from a stdio server. No proxy is used and no
extension (compression) is offered.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import asynccontextmanager

import anyio
from anyio.abc import ByteStream
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage
from websockets.client import ClientProtocol
from websockets.exceptions import InvalidURI
from websockets.frames import Close, CloseCode, Frame, Opcode
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from relay.gateway._spill import Gathered, Spiller

logger = logging.getLogger(__name__)

SUBPROTOCOL = Subprotocol("mcp")
SCHEMES = ("ws://", "wss://")
# The handshake; relay's own connect deadline bounds the whole start as well.
DEFAULT_OPEN_TIMEOUT_S = 30.0
# How long a closing handshake may take before the TCP connection is dropped.
CLOSE_TIMEOUT_S = 2.0
# The handshake's answer (status line and headers) may be at most this long.
MAX_HANDSHAKE_BYTES = 64 * 1024

_GONE = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


class WebSocketError(ConnectionError):
    """The websocket could not be opened: what was tried, and what the server or the network said."""


class _ProtocolError(Exception):
    """The server broke the websocket framing; the connection is closed with this code."""

    def __init__(self, code: CloseCode, reason: str) -> None:
        super().__init__(reason)
        self.code = code


async def _open(url: str, headers: Mapping[str, str] | None, open_timeout_s: float | None) -> tuple[ByteStream, bytes]:
    """Connect and complete the handshake; the stream, and the bytes already read past the handshake's answer."""
    if not url.startswith(SCHEMES):
        raise WebSocketError(f"{url!r} is not a websocket url (ws:// or wss://)")
    try:
        uri = parse_uri(url)
    except InvalidURI as exc:
        raise WebSocketError(f"{url!r} is not a usable websocket url: {exc}") from exc
    protocol = ClientProtocol(uri, subprotocols=[SUBPROTOCOL], max_size=None)
    request = protocol.connect()
    for key, value in (headers or {}).items():
        request.headers[key] = value
    protocol.send_request(request)
    with anyio.fail_after(open_timeout_s):
        try:
            if uri.secure:
                tls = ssl.create_default_context()
                stream: ByteStream = await anyio.connect_tcp(uri.host, uri.port, ssl_context=tls, tls_hostname=uri.host)
            else:
                stream = await anyio.connect_tcp(uri.host, uri.port)
        except OSError as exc:
            if isinstance(exc, TimeoutError):
                raise
            raise WebSocketError(f"cannot connect to {url}: {exc}") from exc
        try:
            await stream.send(b"".join(protocol.data_to_send()))
            answer = bytearray()
            while (end := answer.find(b"\r\n\r\n")) < 0:
                if len(answer) > MAX_HANDSHAKE_BYTES:
                    raise WebSocketError(f"the websocket handshake with {url} failed: its answer is too long")
                answer += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError) as exc:
            await stream.aclose()
            if isinstance(exc, TimeoutError):
                raise
            raise WebSocketError(f"the websocket handshake with {url} failed: the connection closed") from exc
        except BaseException:
            await stream.aclose()
            raise
    status = bytes(answer[: answer.find(b"\r\n")]).split(b" ")
    if len(status) < 2 or status[1] != b"101":
        await stream.aclose()
        code = status[1].decode("ascii", "replace") if len(status) > 1 else "?"
        raise WebSocketError(f"the websocket handshake with {url} was refused: HTTP {code}")
    protocol.receive_data(bytes(answer[: end + 4]))
    protocol.events_received()
    if protocol.handshake_exc is not None:
        await stream.aclose()
        raise WebSocketError(f"the websocket handshake with {url} failed: {protocol.handshake_exc}")
    if protocol.subprotocol != SUBPROTOCOL:
        logger.debug("%s accepted the websocket without the mcp subprotocol; speaking MCP anyway", url)
    return stream, bytes(answer[end + 4 :])


class _Frames:
    """The server's frames off the stream, a data frame's payload handed on piece by piece as it arrives."""

    def __init__(self, stream: ByteStream, already: bytes) -> None:
        self._stream = stream
        self._buf = bytearray(already)

    async def _exact(self, n: int) -> bytes:
        while len(self._buf) < n:
            self._buf += await self._stream.receive()
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    async def header(self) -> tuple[bool, int, int]:
        """The next frame's (fin, opcode, payload length)."""
        first, second = await self._exact(2)
        if first & 0x70:
            raise _ProtocolError(CloseCode.PROTOCOL_ERROR, "a frame with reserved bits set (no extension was agreed)")
        if second & 0x80:
            raise _ProtocolError(CloseCode.PROTOCOL_ERROR, "a masked frame from the server")
        length = second & 0x7F
        if length >= 126:
            length = int.from_bytes(await self._exact(2 if length == 126 else 8), "big")
        opcode = first & 0x0F
        if opcode >= Opcode.CLOSE and (length > 125 or not first & 0x80):
            raise _ProtocolError(CloseCode.PROTOCOL_ERROR, "a control frame that is too long or fragmented")
        return bool(first & 0x80), opcode, length

    async def payload(self, n: int) -> bytes:
        return await self._exact(n)

    async def pieces(self, n: int) -> AsyncIterator[bytes]:
        while n > 0:
            if not self._buf:
                self._buf += await self._stream.receive()
            piece = bytes(self._buf[:n])
            del self._buf[: len(piece)]
            n -= len(piece)
            yield piece


@asynccontextmanager
async def websocket_client(
    url: str,
    headers: Mapping[str, str] | None = None,
    *,
    open_timeout_s: float | None = DEFAULT_OPEN_TIMEOUT_S,
    spiller: Spiller | None = None,
) -> AsyncGenerator[TransportStreams]:
    """Connect to an MCP server at a ws:// or wss:// url (subprotocol `mcp`, `headers` sent with the handshake).

    Raises WebSocketError when the connection or the handshake fails, TimeoutError when the
    handshake takes longer than `open_timeout_s`. With a `spiller`, a message longer than its
    threshold goes to a file as it arrives and is read back as a stream.
    """
    stream, already = await _open(url, headers, open_timeout_s)
    frames = _Frames(stream, already)
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    sending = anyio.Lock()
    closed = anyio.Event()  # a close frame was sent

    async def send(opcode: Opcode, data: bytes) -> None:
        async with sending:
            if opcode is not Opcode.CLOSE and closed.is_set():
                raise anyio.ClosedResourceError
            if opcode is Opcode.CLOSE:
                closed.set()
            await stream.send(Frame(opcode, data).serialize(mask=True))

    async def reader() -> None:
        message = Gathered(spiller)
        try:
            async with read_writer:
                while True:
                    fin, opcode, length = await frames.header()
                    if opcode == Opcode.PING:
                        await send(Opcode.PONG, await frames.payload(length))
                    elif opcode == Opcode.CLOSE:
                        data = await frames.payload(length)
                        if not closed.is_set():
                            with contextlib.suppress(*_GONE):
                                await send(Opcode.CLOSE, data[:2])
                        logger.info("%s closed the websocket", url)
                        return
                    elif opcode == Opcode.PONG:
                        await frames.payload(length)
                    else:
                        async for piece in frames.pieces(length):
                            message.add(piece)
                        if fin:
                            await read_writer.send(await message.message())
        except _ProtocolError as exc:
            logger.info("the websocket to %s broke its framing: %s", url, exc)
            with contextlib.suppress(*_GONE):
                await send(Opcode.CLOSE, Close(exc.code, str(exc)).serialize())
        except _GONE as exc:  # the connection was lost, or the session is gone
            logger.info("the websocket to %s was lost: %r", url, exc)
        finally:
            message.drop()

    async def writer() -> None:
        try:
            async with write_reader:
                async for session_message in write_reader:
                    text = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await send(Opcode.TEXT, text.encode())
        except _GONE:
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
            with anyio.move_on_after(CLOSE_TIMEOUT_S), contextlib.suppress(*_GONE):
                if not closed.is_set():
                    await send(Opcode.CLOSE, Close(CloseCode.NORMAL_CLOSURE, "").serialize())
                while await stream.receive():  # until the server closes its side
                    pass
            await stream.aclose()
            for memory in (read_stream, write_stream, read_writer, write_reader):
                await memory.aclose()
