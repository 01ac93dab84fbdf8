"""Starting the MCP server on stdio or Streamable HTTP."""

from __future__ import annotations

import os
import sys
from typing import Any

from relay.config import load_settings
from relay.errors import ErrorCode, RelayError

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def serve(
    *,
    http: bool,
    host: str,
    port: int,
    token: str | None,
    toolsets: str | None = None,
    profile: str | None = None,
    front: Any = None,
    dashboard: Any = None,
) -> int:
    from relay.memory import map_large_blocks

    map_large_blocks()  # a large request's buffers go back to the system once freed
    settings = load_settings()
    if toolsets is not None or profile is not None:
        # Flags win over RELAY_TOOLSETS / RELAY_PROFILE and config.toml, as a whole.
        chosen = tuple(t.strip() for t in (toolsets or "").split(",") if t.strip())
        settings = settings.with_(toolsets=chosen, profile=profile or None)
    if settings.otlp_endpoint:  # traces of each job's life (docs/scaling.md); the 'otel' extra is loaded only now
        from relay.telemetry import tracing

        tracing.start(settings.otlp_endpoint)
        print(f"relay {os.getpid()}: tracing to {settings.otlp_endpoint}", file=sys.stderr)
    from relay.server.app import build_server
    from relay.server.toolsets import full_access_notice

    notice = full_access_notice(settings.profile, settings.toolsets)
    if notice:
        print(f"relay {os.getpid()}: {notice}", file=sys.stderr)
    server = build_server(settings, port=port if http else None)
    if not http:
        from relay.server.stdio import run_stdio

        run_stdio(server, front)  # answers malformed JSON-RPC lines too (the SDK's stdio drops them)
        return 0
    token = token or settings.environ.get("RELAY_TOKEN")
    if host not in LOOPBACK and not token and not settings.tokens:
        raise RelayError(
            ErrorCode.INVALID_ARGUMENT,
            f"refusing to serve HTTP on {host} without a token",
            "pass --token SECRET (or set RELAY_TOKEN, or name tokens in [server.tokens.NAME]), or bind 127.0.0.1",
        )
    from relay.server.http import run_http

    print(f"relay {os.getpid()}: serving MCP on http://{host}:{port}/mcp", file=sys.stderr)
    run_http(server, host=host, port=port, token=token, dashboard=dashboard)
    return 0
