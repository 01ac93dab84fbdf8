"""Which MCP client a tool call comes from, how long it will wait, and why it cancelled a call."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context

from relay.clients.timeouts import auto_threshold
from relay.config import Settings
from relay.server.stdio_wire import CANCEL_REASONS


def client_name(ctx: Context[Any, Any] | None) -> str | None:
    """The `clientInfo.name` the client sent at initialize (or in the request's envelope), if any."""
    if ctx is None:
        return None
    try:
        params = ctx.request_context.session.client_params
    except (ValueError, AttributeError):  # no request in flight
        return None
    return params.client_info.name if params is not None else None


def auto_threshold_for(settings: Settings, ctx: Context[Any, Any] | None) -> float:
    """Seconds an auto-mode call waits before handing back the job handle, for this call's client."""
    return auto_threshold(settings.auto_threshold_s, client_name(ctx), settings.client_timeouts)


def cancelled_by_client_timeout(ctx: Context[Any, Any] | None) -> bool:
    """True when the client cancelled this call because its tool timeout ran out (not a user interrupt)."""
    if ctx is None:
        return False
    try:
        request_id = ctx.request_id
    except ValueError:
        return False
    return CANCEL_REASONS.timed_out(request_id)
