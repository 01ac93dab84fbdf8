"""Streamable HTTP: the SDK's ASGI app, with DNS-rebinding protection and bearer tokens, each a principal.

Without tokens (loopback only) every request is the local user. With `--token` / RELAY_TOKEN and the
named tokens of `[server.tokens.NAME]`, each request must carry one, and runs as its principal
(relay/principal.py): the `--token` one is the local user, a named one is that name with its role.
GET /metrics (Prometheus, relay.telemetry) has its own readers: see metrics_readers.
"""

from __future__ import annotations

import hmac
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.transport_security import TransportSecuritySettings

from relay.config import Settings
from relay.principal import LOCAL, Principal, acting_as
from relay.server.app import RelayServer
from relay.telemetry.endpoint import METRICS_PATH, MetricsApp, Readers

# Where the web dashboard is mounted; it asks for the token itself (login form and cookie).
DASHBOARD_PREFIX = "/ui"


# Where BearerAuth leaves the request's principal in the ASGI scope (read back per MCP message).
PRINCIPAL_SCOPE_KEY = "relay.principal"


# The MCP sessions whose principal BearerAuth remembers; past this many the oldest is forgotten, and its
# client, answered 404 like any unknown session, starts a new one (the spec's rule for a 404).
SESSIONS_KEPT = 10_000
SESSION_HEADER = b"mcp-session-id"


class BearerAuth:
    """ASGI middleware: every request must carry `Authorization: Bearer <token>` of a known principal, else 401.

    An MCP session belongs to the principal that opened it: a request naming a session another
    principal opened (or one no longer remembered) is answered 404, as the SDK answers an unknown
    session, so no token reads another's session stream or sends on it.
    """

    def __init__(self, app: Any, principals: Mapping[str, Principal]) -> None:
        self.app = app
        self.expected = [(f"Bearer {token}".encode(), who) for token, who in principals.items()]
        self.sessions: OrderedDict[bytes, Principal] = OrderedDict()

    def principal(self, got: bytes) -> Principal | None:
        """Whose token `got` is; every token is compared (in constant time), so timing tells nothing."""
        found = [who for expected, who in self.expected if hmac.compare_digest(got, expected)]
        return found[0] if found else None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path: str = scope.get("path", "")
        if (
            scope["type"] != "http"
            or path in (DASHBOARD_PREFIX, METRICS_PATH)
            or path.startswith(DASHBOARD_PREFIX + "/")
        ):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        who = self.principal(headers.get(b"authorization", b""))
        scope[PRINCIPAL_SCOPE_KEY] = who
        if who is None:
            await _refuse(send, 401, b'{"error":"missing or wrong bearer token"}', (b"www-authenticate", b"Bearer"))
            return
        session = headers.get(SESSION_HEADER)
        if session is not None and self.sessions.get(session) != who:
            await _refuse(send, 404, b'{"error":"session not found: start a new one (initialize)"}')
            return

        async def remembering(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                opened = dict(message.get("headers") or []).get(SESSION_HEADER)
                if opened is not None and opened not in self.sessions:
                    self.sessions[opened] = who
                    while len(self.sessions) > SESSIONS_KEPT:
                        self.sessions.popitem(last=False)
            await send(message)

        await self.app(scope, receive, remembering)


async def _refuse(send: Any, status: int, body: bytes, *extra: tuple[bytes, bytes]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *extra],
        }
    )
    await send({"type": "http.response.body", "body": body})


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def bound_names(host: str) -> list[str]:
    """The addresses and names a server bound to `host` answers on: every local address for a wildcard."""
    import socket

    if host not in ("0.0.0.0", "::", ""):
        return [host]
    names: list[str] = [socket.gethostname(), socket.getfqdn()]
    try:
        import psutil

        for addrs in psutil.net_if_addrs().values():
            for addr in addrs:
                if addr.family in (socket.AF_INET, socket.AF_INET6):
                    names.append(addr.address.split("%", 1)[0])
    except (ImportError, OSError):
        pass
    if host == "0.0.0.0":
        names = [n for n in names if ":" not in n]
    return list(dict.fromkeys(n for n in names if n))


def host_values(names: list[str], port: int) -> list[str]:
    """Host header values for names: each bare and with the port; IPv6 addresses in brackets."""
    values: list[str] = []
    for name in names:
        shown = f"[{name}]" if ":" in name and not name.startswith("[") else name
        values += [shown, f"{shown}:{port}"]
    return list(dict.fromkeys(values))


def principals(settings: Settings, token: str | None) -> dict[str, Principal]:
    """Each bearer token the server accepts, and whose it is (`token`: the local user's, as before tokens had names)."""
    found = {t.token: t.principal for t in settings.tokens}
    if token:
        found[token] = LOCAL
    return found


async def act_as_caller(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Server middleware: handle each MCP message as the principal its HTTP request's token named."""
    scope: Mapping[str, Any] = getattr(ctx.request, "scope", None) or {}  # no HTTP request: stdio, in-memory
    who = scope.get(PRINCIPAL_SCOPE_KEY)
    with acting_as(who if isinstance(who, Principal) else LOCAL):
        return await call_next(ctx)


def metrics_readers(settings: Settings, token: str | None) -> Readers:
    """Who may read the front's /metrics: with any token configured, admin tokens (`--token`'s too) and the metrics
    token only (a `user` token is refused: the counts tell of every principal's jobs); without, whoever reaches it."""
    accepted = principals(settings, token)
    allowed = [t for t, who in accepted.items() if who.is_admin]
    allowed += [settings.metrics_token] if settings.metrics_token else []
    users = [t for t, who in accepted.items() if not who.is_admin]
    return Readers(allowed, users, guarded=bool(accepted or settings.metrics_token))


class CheckedMetrics:
    """ASGI: GET /metrics (its own readers, not BearerAuth's), its Host and Origin checked as every request's are."""

    def __init__(self, metrics: MetricsApp, security: TransportSecuritySettings) -> None:
        from mcp.server.transport_security import TransportSecurityMiddleware

        self.metrics = metrics
        self.security = TransportSecurityMiddleware(security)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        from starlette.requests import Request

        refused = await self.security.validate_request(Request(scope), is_post=False)
        if refused is not None:  # a rebinding Host or a foreign Origin: refused in the SDK's own words
            await refused(scope, receive, send)
            return
        await self.metrics(scope, receive, send)


def build_http_app(
    server: RelayServer, host: str, port: int, token: str | None, dashboard: Callable[..., Any] | None = None
) -> Any:
    names = ["127.0.0.1", "localhost", "::1"]
    if (token or server.catalog.deps.settings.tokens) and host not in LOOPBACK:
        # Bound beyond loopback (behind a token): the names and addresses it is reachable by are valid
        # Hosts too; rebinding protection still refuses any other name, and Origin checks stay.
        names += bound_names(host) + list(server.catalog.deps.settings.allowed_hosts)
    elif host not in LOOPBACK:
        names.append(host)
    hosts = host_values(names, port)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"http://{h}" for h in hosts],
    )
    from relay.server.http_wire import WireCheck

    app = server.streamable_http_app(transport_security=security, host=host)
    if dashboard is not None:
        # The web dashboard (a surface above this one, handed in by the CLI) under /ui: it asks for the
        # token itself (login form and cookie), so the bearer check below lets /ui through to it.
        from starlette.routing import Mount

        deps = server.catalog.deps
        ui = dashboard(
            settings=deps.settings,
            host=host,
            port=port,
            token=token,
            engine=deps.engine,
            gateway=lambda: deps.existing_service("gateway"),
        )
        app.router.routes.insert(0, Mount(DASHBOARD_PREFIX, ui))
    from starlette.routing import Route

    # GET /metrics (Prometheus): who may read it is its own rule (metrics_readers), so the bearer check lets it by.
    metrics = MetricsApp(metrics_readers(server.catalog.deps.settings, token))
    app.router.routes.insert(0, Route(METRICS_PATH, CheckedMetrics(metrics, security), methods=["GET", "HEAD"]))
    accepted = principals(server.catalog.deps.settings, token)
    if act_as_caller not in server.middleware:
        server.middleware.append(act_as_caller)
    checked = WireCheck(app, security)  # a body that is not a JSON-RPC message gets its error reply, with its id
    return BearerAuth(checked, accepted) if accepted else checked


def run_http(
    server: RelayServer, *, host: str, port: int, token: str | None, dashboard: Callable[..., Any] | None = None
) -> None:
    import uvicorn

    app = build_http_app(server, host, port, token, dashboard)
    uvicorn.run(app, host=host, port=port, log_level="warning")
