"""An HTTP downstream's messages, spilled as they arrive when they are longer than the result cap.

The SDK's Streamable HTTP (and old HTTP+SSE) transports read a JSON answer whole (`aread`) and an SSE
event's data whole, and refuse an event over 1 MiB. relay gives their HTTP client this transport
instead of httpx's own: each answer's body goes through `Gathered` as it arrives, so a JSON body, or
an SSE `data:` line, longer than the cap goes to a spill file and is read back as a stream
(`_spill.py`); the SDK then reads, in its place, the capped message (whose `_meta` names the kept
whole). Everything else passes unchanged. Answers are asked for without compression (relay reads the
bytes as they come); a compressed one passes unchanged, read whole by the SDK as before.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

import httpx2
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

from relay.gateway._spill import Gathered, Spiller, encoded

DATA = b"data:"


class SpillingTransport(httpx2.AsyncBaseTransport):
    """httpx's transport, with JSON and SSE answers read through the spiller."""

    def __init__(self, spiller: Spiller, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self._spiller = spiller
        self._inner = inner if inner is not None else httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.headers["accept-encoding"] = "identity"
        response = await self._inner.handle_async_request(request)
        kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        coding = response.headers.get("content-encoding", "identity").strip().lower()
        if coding != "identity" or kind not in ("application/json", "text/event-stream"):
            return response
        body = _json if kind == "application/json" else _sse
        raw = response.stream
        assert isinstance(raw, httpx2.AsyncByteStream)
        headers = [(k, v) for k, v in response.headers.raw if k.lower() != b"content-length"]
        stream = _Rewritten(body(raw, self._spiller), raw)
        return httpx2.Response(response.status_code, headers=headers, stream=stream, extensions=response.extensions)

    async def aclose(self) -> None:
        await self._inner.aclose()


def http_client(
    spiller: Spiller,
    headers: dict[str, str] | None = None,
    timeout: httpx2.Timeout | None = None,
    auth: httpx2.Auth | None = None,
) -> httpx2.AsyncClient:
    """The SDK's HTTP client (`create_mcp_http_client`: the same timeouts), on a `SpillingTransport`."""
    return httpx2.AsyncClient(
        headers=headers,
        timeout=timeout or httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        auth=auth,
        transport=SpillingTransport(spiller),
    )


class _Rewritten(httpx2.AsyncByteStream):
    def __init__(self, body: AsyncGenerator[bytes], raw: httpx2.AsyncByteStream) -> None:
        self._body = body
        self._raw = raw

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._body:
            yield chunk

    async def aclose(self) -> None:
        await self._body.aclose()  # its spill file, if it was cut short
        await self._raw.aclose()


async def _json(raw: httpx2.AsyncByteStream, spiller: Spiller) -> AsyncGenerator[bytes]:
    """A JSON body (one message): as it came, or the capped message read from its spill."""
    body = Gathered(spiller)
    try:
        async for chunk in raw:
            body.add(chunk)
        yield encoded(await body.message()) if body.spilled else bytes(body.take())
    finally:
        body.drop()


async def _sse(raw: httpx2.AsyncByteStream, spiller: Spiller) -> AsyncGenerator[bytes]:
    """An event stream, line by line: a `data:` line longer than the cap is spilled, then sent as the capped message.

    Lines end with LF (a CR before it stays in the line: JSON takes it as white space); other lines pass as they come.
    """
    line = _SseLine(spiller)
    try:
        async for chunk in raw:
            start = 0
            while (end := chunk.find(b"\n", start)) >= 0:
                if out := line.add(memoryview(chunk)[start:end]):
                    yield out
                yield await line.end()
                start = end + 1
            if out := line.add(memoryview(chunk)[start:]):
                yield out
        if rest := await line.end(final=True):
            yield rest
    finally:
        line.drop()


class _SseLine:
    """One line of an event stream: held while short, spilled when it is a long `data:` line, else passed on."""

    def __init__(self, spiller: Spiller) -> None:
        self._spiller = spiller
        self._head = bytearray()  # the line while it is short (at most the threshold)
        self._data: Gathered | None = None  # a long data line: its value, spilling
        self._passing = False  # a long line of another kind: passed on as it comes

    def add(self, piece: memoryview) -> bytes:
        """Take a piece of the line; what may already be passed on."""
        if self._data is not None:
            self._data.add(piece)
            return b""
        if self._passing:
            return bytes(piece)
        self._head += piece
        if len(self._head) <= self._spiller.threshold:
            return b""
        head, self._head = self._head, bytearray()
        if head.startswith(DATA):
            self._data = Gathered(self._spiller)
            skip = len(DATA) + (head[len(DATA)] == 0x20)  # one space after the colon is not part of the value
            self._data.add(memoryview(head)[skip:])
            return b""
        self._passing = True
        return bytes(head)

    async def end(self, *, final: bool = False) -> bytes:
        """The line has ended (at a LF, or with the stream): what to pass on for the rest of it."""
        newline = b"" if final else b"\n"
        data, self._data, self._passing = self._data, None, False
        if data is not None:
            return DATA + b" " + encoded(await data.message()) + newline
        head, self._head = self._head, bytearray()
        return bytes(head) + newline if head or not final else b""

    def drop(self) -> None:
        if self._data is not None:
            self._data.drop()
            self._data = None
