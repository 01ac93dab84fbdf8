"""Streamable HTTP: the JSON-RPC error reply for every POSTed body that is not a message, as on stdio.

The SDK's endpoint answers a body with `"id": null` or an object id with 202 and an empty body (it
takes it for a notification), a request with params that are not an object with -32602 but `id:
null`, and a parse error with `id: null` even when the id is there to read. This check runs in
front of it, with the same rules as stdio (stdio_wire.parse_line, with the SDK's own JSON parser),
and answers 400 with the standard error and the request's id (413 for a body over the SDK's size
limit). Everything else, and every request that fails the SDK's host, origin or content-type
checks, goes to the SDK untouched.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import pydantic_core
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import Request

from relay.server.stdio_wire import INVALID_REQUEST, encode, error_reply, parse_line, recover_id

MCP_PATH = "/mcp"
# The SDK's own limit on a POSTed body (mcp.server.transport_security.DEFAULT_MAX_REQUEST_BODY_SIZE): a
# larger body gets 413, as from the SDK, but with a JSON-RPC error that carries its id.
MAX_CHECKED_BODY = 4 * 1024 * 1024


class WireCheck:
    """ASGI middleware: a POST to /mcp whose body is not a JSON-RPC message gets its error reply here (400; 413 if too big)."""

    def __init__(self, app: Any, security: TransportSecuritySettings) -> None:
        self.app = app
        self.security = TransportSecurityMiddleware(security)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("path") != MCP_PATH:
            await self.app(scope, receive, send)
            return
        if await self.security.validate_request(Request(scope), is_post=True) is not None:
            await self.app(scope, receive, send)  # the SDK refuses it in its own words
            return
        body, complete, held = await _read_body(receive)
        reply, status = None, 400
        if complete:
            message, reply = parse_line(body, pydantic_core.from_json)
            if message is not None and not body.isascii() and not _utf8(body):
                body = encode(message)  # invalid bytes in a notification or response: passed on decoded
        elif not held:  # over the limit (not a client gone mid-body): refused, with the id when it can be read
            why = f"the body is over {MAX_CHECKED_BODY} bytes: send large input as a file path or in parts"
            reply, status = error_reply(INVALID_REQUEST, "Request too large", recover_id(body), why), 413
        if reply is None:
            held.appendleft({"type": "http.request", "body": body, "more_body": not complete})

            async def replay() -> Any:
                return held.popleft() if held else await receive()

            await self.app(scope, replay, send)
            return
        await send(
            {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
        )
        await send({"type": "http.response.body", "body": encode(reply)})


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


async def _read_body(receive: Any) -> tuple[bytes, bool, deque[Any]]:
    """(the body read so far, whether it is all there, any other message received meanwhile), at most the limit."""
    chunks = bytearray()
    held: deque[Any] = deque()
    while len(chunks) <= MAX_CHECKED_BODY:
        message = await receive()
        if message["type"] != "http.request":
            held.append(message)
            return bytes(chunks), False, held
        chunks += message.get("body", b"")
        if not message.get("more_body", False):
            return bytes(chunks), True, held
    return bytes(chunks), False, held
