"""Who may use the dashboard: Host/Origin checks, the token login cookie, and CSRF for the two actions.

Bound to loopback the dashboard is open to the machine's user, as the MCP endpoint is. Bound
anywhere else it asks for the MCP endpoint's token once, on a login form, and keeps a session
cookie (HttpOnly, SameSite=Strict) derived from the token, so no token travels in a URL.
The two state-changing actions (cancel a job, change a task's status) need a CSRF token that
matches a SameSite=Strict cookie, and an Origin (when the browser sends one) of the dashboard.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from starlette.requests import Request

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
    # The tokens of `admin` principals (`[server.tokens.NAME] role = "admin"`): each may log in too. A `user`
    # token may not: the dashboard shows every principal's jobs.
    admin_tokens: tuple[str, ...] = field(default_factory=tuple, repr=False)

    @property
    def tokens(self) -> tuple[str, ...]:
        return ((self.token,) if self.token is not None else ()) + self.admin_tokens

    @property
    def loopback(self) -> bool:
        return self.host in LOOPBACK_HOSTS

    @property
    def needs_login(self) -> bool:
        return bool(self.tokens)

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
        """The token `given` is (compared in constant time with each), or None."""
        found = [t for t in self.tokens if hmac.compare_digest(given.encode(), t.encode())]
        return found[0] if found else None

    def token_matches(self, given: str) -> bool:
        return self.matching_token(given) is not None


def host_ok(access: Access, request: Request) -> bool:
    return request.headers.get("host", "") in access.allowed_hosts()


def origin_ok(access: Access, request: Request) -> bool:
    """A cross-site request is refused: Origin (or, lacking it, Referer) must name the dashboard itself."""
    origin = request.headers.get("origin")
    if origin is None:
        referer = request.headers.get("referer")
        if referer is None:
            return True  # not a browser's cross-site request (curl, the test client)
        parts = urlsplit(referer)
        origin = f"{parts.scheme}://{parts.netloc}"
    return origin in access.allowed_origins()


def logged_in(access: Access, request: Request) -> bool:
    """Whether the request may see the dashboard: no login needed, the session cookie, or a bearer token."""
    if not access.needs_login:
        return True
    cookie = request.cookies.get(SESSION_COOKIE, "")
    if cookie and any(hmac.compare_digest(cookie.encode(), access.session_value(t).encode()) for t in access.tokens):
        return True
    auth = request.headers.get("authorization", "")
    return auth.startswith("Bearer ") and access.token_matches(auth[len("Bearer ") :])


def new_csrf_token() -> str:
    return secrets.token_hex(16)


def csrf_ok(request: Request, submitted: str | None) -> bool:
    """Double submit: the form field (or header) must equal the SameSite=Strict CSRF cookie."""
    cookie = request.cookies.get(CSRF_COOKIE, "")
    given = submitted or request.headers.get(CSRF_HEADER, "")
    return bool(cookie) and bool(given) and hmac.compare_digest(cookie.encode(), given.encode())
