"""`[telemetry]` in config.toml and its environment variables, read for relay.config (which holds the fields).

[telemetry]
otlp_endpoint = "http://collector:4318"   # traces over OTLP/HTTP (OTEL_EXPORTER_OTLP_ENDPOINT); unset: none
metrics_port = 9464                       # `relay worker`'s /metrics (RELAY_METRICS_PORT, --metrics-port)
metrics_host = "127.0.0.1"                # where it listens (RELAY_METRICS_HOST, --metrics-host)
metrics_token_env = "RELAY_METRICS_TOKEN" # a token that reads /metrics and nothing else (or metrics_token)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from relay.errors import ErrorCode, RelayError

TRACES_PATH = "/v1/traces"
DEFAULT_METRICS_HOST = "127.0.0.1"
MIN_METRICS_TOKEN_CHARS = 16


def traces_endpoint(table: Mapping[str, Any], env: Mapping[str, str]) -> str | None:
    """The OTLP/HTTP traces URL: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, else OTEL_EXPORTER_OTLP_ENDPOINT or
    `otlp_endpoint` (a collector's base URL) with /v1/traces; None (tracing off) when none is set, or
    OTEL_SDK_DISABLED=true, or OTEL_TRACES_EXPORTER=none."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return None
    full = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    base, where = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip(), "OTEL_EXPORTER_OTLP_ENDPOINT"
    if not base:
        configured = table.get("otlp_endpoint")
        if configured is not None and not isinstance(configured, str):
            raise RelayError(ErrorCode.CONFIG_INVALID, "telemetry.otlp_endpoint must be a URL", _URL_HINT)
        base, where = (configured or "").strip(), "[telemetry] otlp_endpoint"
    if full:
        url, where = full, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    elif base:
        url = base if base.rstrip("/").endswith(TRACES_PATH) else base.rstrip("/") + TRACES_PATH
    else:
        return None
    if not url.startswith(("http://", "https://")):
        raise RelayError(ErrorCode.CONFIG_INVALID, f"{where} = {url[:80]!r} is not an http(s) URL", _URL_HINT)
    return url


_URL_HINT = 'set it to the collector\'s OTLP/HTTP address, e.g. "http://localhost:4318", or leave it out'


def metrics_port(table: Mapping[str, Any], env: Mapping[str, str]) -> int | None:
    raw: Any = env.get("RELAY_METRICS_PORT") or table.get("metrics_port")
    if raw is None or raw == "":
        return None
    try:
        port = int(raw)
    except (TypeError, ValueError):
        port = -1
    if isinstance(raw, bool) or not 0 <= port <= 65535:
        raise RelayError(
            ErrorCode.CONFIG_INVALID,
            f"the metrics port {raw!r} is not a port number",
            "set RELAY_METRICS_PORT or [telemetry] metrics_port to a port (0-65535), e.g. 9464",
        )
    return port


def metrics_token(table: Mapping[str, Any], env: Mapping[str, str]) -> str | None:
    """RELAY_METRICS_TOKEN, else `metrics_token_env` (a variable's name), else `metrics_token`."""
    var = table.get("metrics_token_env")
    token: Any = env.get("RELAY_METRICS_TOKEN") or (env.get(str(var), "") if var else table.get("metrics_token"))
    if token is None or token == "":
        return None
    if not isinstance(token, str) or len(token) < MIN_METRICS_TOKEN_CHARS:
        raise RelayError(
            ErrorCode.CONFIG_INVALID,
            f"the metrics token must be at least {MIN_METRICS_TOKEN_CHARS} characters",
            "set RELAY_METRICS_TOKEN (or [telemetry] metrics_token_env) to one, e.g. `openssl rand -hex 24`",
        )
    return token


def telemetry_fields(raw: Any, env: Mapping[str, str]) -> dict[str, Any]:
    """Settings' telemetry fields from the `[telemetry]` table (`raw`) and the environment (which wins)."""
    if raw is not None and not isinstance(raw, dict):
        raise RelayError(ErrorCode.CONFIG_INVALID, "[telemetry] must be a table", "fix config.toml")
    table: dict[str, Any] = {str(k): v for k, v in (raw or {}).items()}  # pyright: ignore[reportUnknownVariableType, reportUnknownMemberType, reportUnknownArgumentType]
    host = env.get("RELAY_METRICS_HOST") or table.get("metrics_host") or DEFAULT_METRICS_HOST
    return {
        "otlp_endpoint": traces_endpoint(table, env),
        "metrics_port": metrics_port(table, env),
        "metrics_host": str(host),
        "metrics_token": metrics_token(table, env),
    }
