"""The web dashboard for people: live jobs, transcripts, costs, threads, tasks, servers and the audit log.

A surface like server/ and cli/: it reads the same core functions (jobs, threads, tracker, gateway)
and knows neither of them. Served by `relay dashboard` on its own port, or under `/ui` of relay's
Streamable HTTP server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp

from relay.config import Settings
from relay.web.app import build_app
from relay.web.security import Access

__all__ = ["Access", "admin_tokens", "build_app", "for_server", "run_dashboard"]


def for_server(
    *,
    settings: Settings,
    host: str,
    port: int,
    token: str | None,
    engine: Callable[[], Any],
    gateway: Callable[[], Any],
) -> ASGIApp:
    """The dashboard for `relay serve --http` to mount under /ui, reading the server's engine and gateway."""
    access = Access(host=host, port=port, token=token)  # build_app adds config's named tokens
    return build_app(settings, access=access, engine_provider=engine, gateway_provider=gateway)


def admin_tokens(settings: Settings) -> tuple[str, ...]:
    """The named tokens whose principal is an `admin`: the ones that may log in to the dashboard (besides `--token`)."""
    return tuple(t.token for t in settings.tokens if t.principal.is_admin)


def run_dashboard(*, host: str, port: int, token: str | None, open_browser: bool = False) -> None:
    """Serve the dashboard until interrupted (`relay dashboard`)."""
    import sys
    import threading
    import webbrowser

    import uvicorn

    from relay.config import load_settings

    settings = load_settings()
    token = token or settings.environ.get("RELAY_TOKEN")
    app = build_app(settings, access=Access(host=host, port=port, token=token))
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else shown}:{port}/jobs"
    print(f"relay dashboard: {url}", file=sys.stderr)
    if settings.tokens and not token and not admin_tokens(settings):
        print(
            "relay dashboard: no token opens it: it is admin-only and config names only user tokens;"
            ' give one role = "admin" ([server.tokens.NAME]) or pass --token',
            file=sys.stderr,
        )
    if open_browser:
        threading.Timer(0.5, webbrowser.open, args=(url,)).start()
    uvicorn.run(app, host=host, port=port, log_level="warning")
