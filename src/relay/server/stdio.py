"""relay's stdio transport: the SDK's, plus a standard JSON-RPC error reply for every line that is not a message.

The SDK's stdio transport drops a malformed line (bad JSON, a wrong "jsonrpc", `"id": null`, a
batch) without a word, so the client waits forever for its answer. Here every such line gets
-32700, -32600 or -32602, with its id when it can be read (see stdio_wire), and an answer that
UTF-8 cannot carry (a lone surrogate echoed from a request) is written with escapes rather than
ending the server. Like the SDK, fd 0 and 1 are claimed while serving: fd 0 reads the null device
and fd 1 goes to stderr, so a stray print or a child cannot corrupt the wire.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncGenerator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import IO, Any, Protocol

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server import MCPServer
from mcp.shared.message import SessionMessage
from mcp.types import JSONRPCResponse, jsonrpc_message_adapter
from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from relay.errors import ErrorCode, RelayError
from relay.memory import LARGE_MESSAGE_BYTES, release_freed_memory
from relay.osfiles import private_dup
from relay.server.stdio_front import Front
from relay.server.stdio_wire import (
    CANCEL_REASONS,
    INVALID_REQUEST,
    encode,
    encode_pieces,
    error_reply,
    parse_line,
    valid_id,
)

# A result whose content blocks carry this much text or more is written in pieces.
PIECES_TEXT_CHARS = 1 << 18

ReadStream = MemoryObjectReceiveStream[SessionMessage | Exception]
WriteStream = MemoryObjectSendStream[SessionMessage]


class _Writer(Protocol):
    def write(self, data: bytes, /) -> int: ...

    def flush(self) -> None: ...


class _Wire:
    """The two ends of the wire; writes are serialized so replies and error lines never interleave."""

    def __init__(self, reader: IO[bytes], writer: IO[bytes] | _Writer) -> None:
        self.reader = reader
        self.writer = writer
        self._lock = anyio.Lock()

    async def readline(self) -> bytes:
        # abandon_on_cancel: a blocked read must not keep the server from shutting down.
        return await anyio.to_thread.run_sync(self.reader.readline, abandon_on_cancel=True)

    async def write(self, data: bytes | Iterator[bytes]) -> None:
        async with self._lock:
            await anyio.to_thread.run_sync(self._write, data)

    def _write(self, data: bytes | Iterator[bytes]) -> None:
        for piece in [data] if isinstance(data, bytes) else data:
            self.writer.write(piece)
        self.writer.flush()


def _claim_std_fds() -> tuple[IO[bytes], IO[bytes], Callable[[], None]]:
    """Serve the wire from private duplicates of fd 0/1; point fd 0 at /dev/null and fd 1 at stderr meanwhile."""
    sys.stdout.flush()
    wire_in = private_dup(0)
    wire_out = private_dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)

    def restore() -> None:
        sys.stdout.flush()
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)

    # closefd=False: a worker thread may still block on the reader after the transport exits.
    return os.fdopen(wire_in, "rb", closefd=False), os.fdopen(wire_out, "wb", closefd=False), restore


class LetGo(Exception):
    """Not a message: sent to the SDK right after a large one, which the server's read loops drop (logged at debug).

    The SDK's read loops keep the last item they received until the next one arrives, so without
    this a 10 MB request would stay in memory until the client's next message.
    """


def _to_message(obj: dict[str, Any]) -> tuple[SessionMessage | None, dict[str, Any] | None]:
    try:
        return SessionMessage(jsonrpc_message_adapter.validate_python(obj, by_name=False)), None
    except (ValidationError, RecursionError) as exc:
        request_id = obj.get("id")
        reply = error_reply(
            INVALID_REQUEST, "Invalid Request", request_id if valid_id(request_id) else None, str(exc)[:300]
        )
        return None, reply


def _dump(message: SessionMessage) -> bytes | Iterator[bytes]:
    """One outgoing message as a line; a string that UTF-8 cannot carry (a lone surrogate) goes as its escape.

    A result carrying a lot of text (a gateway result at its cap) is written in pieces (`encode_pieces`).
    """
    msg = message.message
    if isinstance(msg, JSONRPCResponse) and _text_chars(msg.result) >= PIECES_TEXT_CHARS:
        with contextlib.suppress(ValueError, TypeError):  # NaN, or a value JSON cannot carry: the usual way
            return encode_pieces({"jsonrpc": msg.jsonrpc, "id": msg.id, "result": msg.result})
    try:
        return message.message.model_dump_json(by_alias=True, exclude_unset=True).encode("utf-8") + b"\n"
    except PydanticSerializationError:
        return encode(message.message.model_dump(mode="json", by_alias=True, exclude_unset=True))


def _text_chars(result: dict[str, Any]) -> int:
    content: Any = result.get("content")
    if not isinstance(content, list):
        return 0
    blocks: list[Any] = content  # pyright: ignore[reportUnknownVariableType]
    return sum(len(b.get("text") or "") for b in blocks if isinstance(b, dict))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]


@asynccontextmanager
async def stdio_transport(
    reader: IO[bytes] | None = None, writer: IO[bytes] | _Writer | None = None
) -> AsyncGenerator[tuple[ReadStream, WriteStream]]:
    """(read, write) streams for the SDK's server loop over stdin/stdout (or the given binary files)."""
    restore: Callable[[], None] | None = None
    if reader is None or writer is None:
        reader, writer, restore = _claim_std_fds()
    wire = _Wire(reader, writer)
    to_server, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, from_server = anyio.create_memory_object_stream[SessionMessage](0)

    large_seen = False  # a large request was read: hand freed memory back once its answer is out

    async def take(line: bytes) -> None:
        obj, reply = parse_line(line)
        if obj is not None:
            CANCEL_REASONS.record(obj)  # before the SDK cancels the call, so the tool can read why
            message, reply = _to_message(obj)
            if message is not None:
                await to_server.send(message)
        if reply is not None:
            await wire.write(encode(reply))

    async def read_lines() -> None:
        nonlocal large_seen
        async with to_server:
            while True:
                line = await wire.readline()
                if not line:
                    break
                large = len(line) >= LARGE_MESSAGE_BYTES
                large_seen = large_seen or large
                await take(line)
                # Not kept while the next line is awaited: a 10 MB line (and its parse, in take) would stay for good.
                del line
                if large:
                    await to_server.send(LetGo())

    async def write_messages() -> None:
        nonlocal large_seen
        async with from_server:
            async for session_message in from_server:
                data = _dump(session_message)
                await wire.write(data)
                del data, session_message
                if large_seen:
                    large_seen = False
                    release_freed_memory()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_lines)
            tg.start_soon(write_messages)
            yield read_stream, write_stream
            tg.cancel_scope.cancel()
    finally:
        if restore is not None:
            restore()


async def serve_stdio(server: MCPServer[Any], front: Front | None = None) -> None:
    """Run `server` over stdio (or behind the stdio front that already holds it) until the client closes stdin."""
    # The SDK's own run_stdio_async is this loop over its transport; it has no public hook for another one.
    lowlevel: Any = getattr(server, "_lowlevel_server")  # noqa: B009
    reader, writer = (front.reader, front.writer) if front is not None else (None, None)
    async with stdio_transport(reader, writer) as (read_stream, write_stream):
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
    failure = getattr(front, "failure", None)
    if failure is not None:
        # The front's reader died (it logged why): its EOF ended the server, but this is no clean shutdown.
        raise RelayError(ErrorCode.INTERNAL, f"the stdio reader stopped: {failure}", "report it with the log above")


def run_stdio(server: MCPServer[Any], front: Front | None = None) -> None:
    anyio.run(serve_stdio, server, front)
