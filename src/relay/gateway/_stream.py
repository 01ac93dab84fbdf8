"""A downstream server's messages as the gateway reads them: end of stream noted, lines that are not JSON-RPC skipped.

The SDK's transports hand a line they cannot parse to the session as an exception value. Here
such a line is counted and logged, then skipped, so it never stops the messages after it. When
the line still names the id of a request (an answer whose bytes were broken), that request is
answered at once with a `LOST_ANSWER` error instead of waiting for its timeout.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any

import anyio
from mcp.shared.message import SessionMessage
from mcp.types import ErrorData, JSONRPCError
from pydantic import ValidationError

from relay.gateway._spill import UnreadableLine

# The error code of a request whose answer arrived as a line that is not JSON-RPC (JSON-RPC's parse error).
LOST_ANSWER = -32700
# How much of a skipped line is kept for the status and the log (a line may be megabytes long).
PREVIEW_CHARS = 200
# Where an id is looked for in a broken line: its first and last characters (`"id"` may come after the result).
ID_SCAN_CHARS = 256

_ID = re.compile(r'"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,200}")')

logger = logging.getLogger("relay.gateway")


def line_of(exc: BaseException) -> str:
    """The text of the line a transport could not parse (what pydantic kept of it), else the error itself."""
    if isinstance(exc, UnreadableLine):
        return exc.line
    if isinstance(exc, ValidationError):
        for error in exc.errors():
            value = error.get("input")
            if isinstance(value, str):
                return value
    return f"{type(exc).__name__}: {exc}"


def preview(line: str) -> str:
    shown = line[:PREVIEW_CHARS]
    return repr(shown) + (f" ... ({len(line)} characters)" if len(line) > PREVIEW_CHARS else "")


def answered_id(line: str) -> int | str | None:
    """The request id a broken line still names, if it names one."""
    head, tail = line[:ID_SCAN_CHARS], line[-ID_SCAN_CHARS:]
    for part in (head, tail):
        match = _ID.search(part)
        if match is not None:
            raw = match.group(1)
            return int(raw) if raw[0] != '"' else raw[1:-1]
    return None


class WatchedReadStream:
    """The transport's read stream: `on_eof` at its end, `on_skipped` for each line that is not JSON-RPC."""

    def __init__(self, inner: Any, on_eof: Callable[[], None], on_skipped: Callable[[str], None]) -> None:
        self._inner = inner
        self._on_eof = on_eof
        self._on_skipped = on_skipped

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        while True:
            try:
                item = await self._inner.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                self._on_eof()
                raise
            if not isinstance(item, Exception):
                return item
            line = line_of(item)
            shown = preview(line)
            logger.warning("skipped a line from a downstream server that is not JSON-RPC: %s", shown)
            self._on_skipped(shown)
            request_id = answered_id(line)
            if request_id is not None:
                message = f"its answer was not valid JSON-RPC and was skipped: {shown}"
                error = ErrorData(code=LOST_ANSWER, message=message)
                return SessionMessage(JSONRPCError(jsonrpc="2.0", id=request_id, error=error))

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> WatchedReadStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> WatchedReadStream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


@asynccontextmanager
async def watched(
    transport: Any, on_eof: Callable[[], None], on_skipped: Callable[[str], None]
) -> AsyncGenerator[tuple[Any, Any]]:
    async with transport as (read_stream, write_stream):
        yield WatchedReadStream(read_stream, on_eof, on_skipped), write_stream
