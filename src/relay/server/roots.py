"""The client's roots: folders an MCP client declares (`roots` capability) are allowed job folders too.

On a connection opened with `initialize` (the 2025 era), once the client has sent
`notifications/initialized`, relay asks it `roots/list`, and asks again on each
`notifications/roots/list_changed`; each answer replaces that connection's roots.

On a 2026-07-28 connection a server sends no requests and there is no connection to key them on:
a `tools/call` from a client that declared `roots` in the request's `_meta` answers
`InputRequiredResult` with a `roots/list` input request when relay holds no fresh roots of that
client; the client's retry carries them in `inputResponses`, and the call goes on. That revision
has no `roots/list_changed` either, so an answer is kept for `SESSIONLESS_ROOTS_TTL_S` per acting
principal and client name, then asked for again (a stale answer is dropped at the next such call,
so a folder the client dropped stays allowed about that long). A call through an MCP task uses the
roots kept from the client's plain calls.

Either way the answer lands in `Settings.client_roots`, which `Settings.allowed_roots` adds to the
configured roots. On by default over stdio (the client started relay for its user); over HTTP only
with `[security] client_roots = true` (RELAY_CLIENT_ROOTS=1), since any client holding the token
could widen them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import anyio
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.types import InputRequiredResult, ListRootsRequest, ListRootsResult, Root
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from relay.config import Settings
from relay.principal import current
from relay.server.clientinfo import client_name

logger = logging.getLogger(__name__)

# A client that has not answered roots/list by then keeps the roots it had.
ROOTS_TIMEOUT_S = 10.0
# The key of relay's roots/list in a 2026-07-28 call's `inputRequests`, and how long an answer is kept.
ROOTS_INPUT_KEY = "relay-roots"
SESSIONLESS_ROOTS_TTL_S = 300.0


def now() -> float:
    """The clock the kept roots expire by (a test moves it)."""
    return time.monotonic()


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


class _Kept:
    """The key of one client's kept roots in `Settings.client_roots` (held weakly there): dropping it drops them."""

    __slots__ = ("__weakref__",)


class Sessionless:
    """Roots of 2026-07-28 clients: asked in the call's result, kept per (principal, client name) for a while."""

    def __init__(self, settings: Settings, http: bool) -> None:
        self.settings = settings
        self.enabled = enabled(settings, http)
        self._kept: dict[tuple[str, str], tuple[_Kept, float]] = {}

    def ask(self, ctx: Context[Any, Any] | None) -> InputRequiredResult | None:
        """The `roots/list` this call must ask before it runs, or None (kept roots are fresh, or none apply).

        A retry that carries the answer records it, whether or not relay asked in this round: a client
        can only declare its own roots, which it may do at any time on the older era too."""
        if not self.enabled or ctx is None or not _sessionless(ctx):
            return None
        try:
            caps = ctx.client_capabilities
        except (ValueError, AttributeError):  # no request in flight
            return None
        if caps is None or caps.roots is None:
            return None
        who = (current().name, client_name(ctx) or "")
        self._forget_stale()
        given = (ctx.input_responses or {}).get(ROOTS_INPUT_KEY)
        if isinstance(given, ListRootsResult):
            kept = _Kept()
            self._kept[who] = (kept, now() + SESSIONLESS_ROOTS_TTL_S)
            self.settings.client_roots.set(kept, who[1] or who[0], folders(given.roots))
            return None
        if who in self._kept:
            return None
        return InputRequiredResult(input_requests={ROOTS_INPUT_KEY: ListRootsRequest()})

    def _forget_stale(self) -> None:
        moment = now()
        for who in [w for w, (_, until) in self._kept.items() if until <= moment]:
            del self._kept[who]  # the last strong reference: the client's roots leave `allowed_roots` with it


def _sessionless(ctx: Context[Any, Any]) -> bool:
    try:
        return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
    except (ValueError, AttributeError):
        return False
