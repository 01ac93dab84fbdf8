"""Who may use the dashboard: Host/Origin checks, the token login cookie, and CSRF for the two actions.

The dashboard shows every principal's jobs, transcripts, threads, tasks and audit log, so it is
admin-only: it opens to the one `--token` (the local user's, as for the MCP endpoint) and to the
named tokens of `admin` principals, never to a `user` token. It asks for one whenever any token
exists: always beyond loopback (relay refuses to serve it there without one), and on loopback too
as soon as config names a token (`[server.tokens.NAME]`, of any role), since loopback is then no
longer one person's. Bound to loopback with no token anywhere it is the machine's, as the MCP
endpoint is.

The login is a form that sets a session cookie (HttpOnly, SameSite=Strict) derived from the token,
so no token travels in a URL; scripts may send `Authorization: Bearer`. The state-changing
actions (cancel, land or discard a job, change a task's status) need a CSRF token that matches a
SameSite=Strict cookie, and an Origin (when the browser sends one) of the dashboard.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from starlette.requests import HTTPConnection

from relay.config import NamedToken, Settings
from relay.principal import LOCAL, Principal

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
SESSION_COOKIE = "relay_dashboard"
CSRF_COOKIE = "relay_csrf"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
# The session cookie proves the token without holding it: an HMAC of this label under the token.
SESSION_LABEL = b"relay-dashboard-session-v1"


@dataclass(frozen=True)
class Access:
    """Where the dashboard is served and what it asks of a browser."""

    host: str = "127.0.0.1"
    port: int = 8766
    token: str | None = None
    extra_hosts: tuple[str, ...] = field(default_factory=tuple)
    # The tokens of `admin` principals (`[server.tokens.NAME] role = "admin"`): each may log in too.
    admin_tokens: tuple[str, ...] = field(default_factory=tuple, repr=False)
    # Every named token of config, of either role: any of them closes the dashboard behind a login (loopback
    # too), and says whose a login is. A `user` token may not log in: the dashboard shows every principal's work.
    named: tuple[NamedToken, ...] = field(default_factory=tuple, repr=False)

    @property
    def tokens(self) -> tuple[str, ...]:
        """The tokens that open the dashboard: the one `--token` and every admin's."""
        admins = [t.token for t in self.named if t.principal.is_admin]
        return tuple(dict.fromkeys([*((self.token,) if self.token else ()), *self.admin_tokens, *admins]))

    @property
    def loopback(self) -> bool:
        return self.host in LOOPBACK_HOSTS

    @property
    def needs_login(self) -> bool:
        """Whether a browser must log in: whenever any token exists, wherever the dashboard is served."""
        return bool(self.tokens) or bool(self.named)

    @property
    def closed(self) -> bool:
        """Named tokens exist but none opens the dashboard (only `user` ones, and no `--token`): nobody may log in."""
        return self.needs_login and not self.tokens

    def allowed_hosts(self) -> set[str]:
        """Host header values accepted (DNS-rebinding protection, as for the MCP endpoint)."""
        names = ["127.0.0.1", "localhost", "[::1]"]
        if self.host not in (*LOOPBACK_HOSTS, "0.0.0.0", "::"):
            names.append(f"[{self.host}]" if ":" in self.host else self.host)
        names += list(self.extra_hosts)
        return {n for name in names for n in (name, f"{name}:{self.port}")}

    def allowed_origins(self) -> set[str]:
        return {f"{scheme}://{h}" for h in self.allowed_hosts() for scheme in ("http", "https")}

    def session_value(self, token: str | None = None) -> str:
        """The session cookie's value for a login with `token` (default: the one token)."""
        token = token if token is not None else self.token
        assert token is not None
        return hmac.new(token.encode(), SESSION_LABEL, hashlib.sha256).hexdigest()

    def matching_token(self, given: str) -> str | None:
        """The token `given` is, among those that open the dashboard (compared in constant time with each), or None."""
        found = [t for t in self.tokens if hmac.compare_digest(given.encode(), t.encode())]
        return found[0] if found else None

    def token_matches(self, given: str) -> bool:
        return self.matching_token(given) is not None

    def is_user_token(self, given: str) -> bool:
        """Whether `given` is a named `user` token: a right token, refused because the dashboard is admin-only."""
        users = [t.token for t in self.named if not t.principal.is_admin]
        return any([hmac.compare_digest(given.encode(), t.encode()) for t in users])

    def principal_of(self, token: str) -> Principal:
        """Whose a token that opens the dashboard is: its named admin, else the local user (`--token`)."""
        return next((t.principal for t in self.named if t.token == token), LOCAL)


def with_config(access: Access, settings: Settings) -> Access:
    """`access` with config's named tokens: however the dashboard is built, a named token closes it behind a login."""
    named = tuple(dict.fromkeys([*access.named, *settings.tokens]))
    return replace(access, named=named)


def host_ok(access: Access, conn: HTTPConnection) -> bool:
    return conn.headers.get("host", "") in access.allowed_hosts()


def origin_ok(access: Access, conn: HTTPConnection) -> bool:
    """A cross-site request is refused: Origin (or, lacking it, Referer) must name the dashboard itself."""
    origin = conn.headers.get("origin")
    if origin is None:
        referer = conn.headers.get("referer")
        if referer is None:
            return True  # not a browser's cross-site request (curl, the test client)
        parts = urlsplit(referer)
        origin = f"{parts.scheme}://{parts.netloc}"
    return origin in access.allowed_origins()


def login_of(access: Access, conn: HTTPConnection) -> Principal | None:
    """Who the request is logged in as (the session cookie, or a bearer token), None when it is not; with no
    login needed, the local user."""
    if not access.needs_login:
        return LOCAL
    cookie = conn.cookies.get(SESSION_COOKIE, "")
    if cookie:
        for token in access.tokens:
            if hmac.compare_digest(cookie.encode(), access.session_value(token).encode()):
                return access.principal_of(token)
    auth = conn.headers.get("authorization", "")
    if auth.startswith("Bearer "):
        token = access.matching_token(auth[len("Bearer ") :])
        if token is not None:
            return access.principal_of(token)
    return None


def new_csrf_token() -> str:
    return secrets.token_hex(16)


def csrf_ok(request: HTTPConnection, submitted: str | None) -> bool:
    """Double submit: the form field (or header) must equal the SameSite=Strict CSRF cookie."""
    cookie = request.cookies.get(CSRF_COOKIE, "")
    given = submitted or request.headers.get(CSRF_HEADER, "")
    return bool(cookie) and bool(given) and hmac.compare_digest(cookie.encode(), given.encode())
