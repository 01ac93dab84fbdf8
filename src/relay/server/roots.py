"""The client's roots: folders an MCP client declares (`roots` capability) are allowed job folders too.

Once the client has sent `notifications/initialized`, relay asks it `roots/list`, and asks again
on each `notifications/roots/list_changed`; each answer replaces that connection's roots in
`Settings.client_roots`, which `Settings.allowed_roots` adds to the configured roots. On by
default over stdio (the client started relay for its user); over HTTP only with `[security]
client_roots = true` (RELAY_CLIENT_ROOTS=1), since any client holding the token could widen them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import anyio
from mcp.server.context import ServerRequestContext
from mcp.types import ListRootsRequest, ListRootsResult, Root

from relay.config import Settings

logger = logging.getLogger(__name__)

# A client that has not answered roots/list by then keeps the roots it had.
ROOTS_TIMEOUT_S = 10.0


def enabled(settings: Settings, http: bool) -> bool:
    return settings.use_client_roots if settings.use_client_roots is not None else not http


def folders(roots: Sequence[Root]) -> tuple[Path, ...]:
    """The existing local folders among `roots` (file:// URIs), resolved; anything else is left out."""
    found: list[Path] = []
    for root in roots:
        uri = urlparse(str(root.uri))
        if uri.scheme != "file" or uri.netloc not in ("", "localhost"):
            continue
        try:
            path = Path(unquote(uri.path)).resolve(strict=True)
        except (OSError, RuntimeError, ValueError):
            continue
        if path.is_dir():
            found.append(path)
    return tuple(dict.fromkeys(found))


async def refresh(ctx: ServerRequestContext[Any, Any], settings: Settings) -> None:
    """Ask the client for its roots (when it declared the capability) and record them for its connection."""
    session = ctx.session
    params = session.client_params
    capabilities = session.client_capabilities
    if params is None or capabilities is None or capabilities.roots is None:
        return
    try:
        with anyio.fail_after(ROOTS_TIMEOUT_S):
            result = await session.send_request(ListRootsRequest(), ListRootsResult)
    except Exception as exc:  # a client that cannot answer keeps its previous roots; nothing else depends on it
        logger.warning("roots/list to %s failed: %s", params.client_info.name, exc)
        return
    # Keyed on the SDK's per-client connection (a session is per request): its roots go with it.
    connection: object = getattr(session, "_connection")  # noqa: B009
    settings.client_roots.set(connection, params.client_info.name, folders(result.roots))


class Refreshes:
    """A tool call waits (bounded) for a roots/list in flight, so a job in a root just declared is not refused."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._last: anyio.Event | None = None

    async def refresh(self, ctx: ServerRequestContext[Any, Any]) -> None:
        done = self._last = anyio.Event()
        try:
            await refresh(ctx, self.settings)
        finally:
            done.set()

    async def settled(self) -> None:
        last = self._last
        if last is not None and not last.is_set():
            with anyio.move_on_after(ROOTS_TIMEOUT_S):
                await last.wait()
