"""The one place where exceptions of the vendor SDKs (and their HTTP layer) become RelayErrors."""

from __future__ import annotations

import email.utils
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

from relay.agents.api.keys import redact
from relay.agents.api.registry import ProviderInfo
from relay.errors import ErrorCode, RelayError

# Upstream messages are kept this long in a hint; bodies can be whole HTML error pages.
HINT_MESSAGE_LIMIT = 500
# Modules whose exceptions are "the upstream failed", never a relay bug.
_SDK_MODULES = ("anthropic", "openai", "httpx2", "httpcore2")


@dataclass(frozen=True)
class Failure:
    """A translated upstream failure: the error, whether another attempt may succeed, and when."""

    error: RelayError
    status: int | None = None
    retryable: bool = False
    retry_after_s: float | None = None


def is_sdk_exception(exc: BaseException) -> bool:
    module = type(exc).__module__.split(".")[0]
    return module in _SDK_MODULES


def _retry_after(headers: Any) -> float | None:
    """Seconds from `retry-after-ms` / `retry-after` (seconds or an HTTP date), None when absent or bad."""
    if headers is None:
        return None
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        parsed = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, parsed.timestamp() - time.time())


def _upstream_message(exc: BaseException) -> str:
    message: Any = getattr(exc, "api_message", None) or getattr(exc, "message", None) or str(exc)
    body: Any = getattr(exc, "body", None)
    if not getattr(exc, "api_message", None) and isinstance(body, dict):
        err: Any = cast(dict[str, Any], body).get("error")
        if isinstance(err, dict) and isinstance(cast(dict[str, Any], err).get("message"), str):
            message = cast(dict[str, Any], err)["message"]
        elif isinstance(err, str):
            message = err
    return " ".join(str(message).split())[:HINT_MESSAGE_LIMIT]


def _status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status
    response = getattr(exc, "response", None)
    code = getattr(response, "status_code", None)
    return code if isinstance(code, int) else None


def translate(exc: BaseException, provider: ProviderInfo, model: str, secrets: Iterable[str]) -> Failure | None:
    """The RelayError for an SDK/HTTP exception, or None when it is not one (a relay bug: let it raise)."""
    if isinstance(exc, RelayError):
        return Failure(exc)
    if not is_sdk_exception(exc):
        return None
    keys = list(secrets)
    upstream = redact(_upstream_message(exc), keys)
    name = type(exc).__name__
    status = _status_of(exc)
    where = f"{provider.name} ({redact(provider.base_url, keys)})"
    key_names = " or ".join(provider.key_env) or "the provider's key"
    if status is not None:
        if status in (401, 403):
            return Failure(
                RelayError(
                    ErrorCode.AUTH_INVALID,
                    f"{where} refused the API key (HTTP {status})",
                    f"check {key_names} (or api_keys.json): {upstream}",
                ),
                status,
            )
        if status == 404:
            return Failure(
                RelayError(
                    ErrorCode.MODEL_NOT_FOUND,
                    f"{where} has no model {model!r} (HTTP 404)",
                    f"pick a model from list_models: {upstream}",
                ),
                status,
            )
        if status == 429:
            response = getattr(exc, "response", None)
            return Failure(
                RelayError(
                    ErrorCode.RATE_LIMITED,
                    f"{where} rate-limited the request (HTTP 429)",
                    f"wait and retry, or use another model: {upstream}",
                ),
                status,
                retryable=True,
                retry_after_s=_retry_after(getattr(response, "headers", None)),
            )
        retryable = status >= 500 or status == 408
        response = getattr(exc, "response", None)
        return Failure(
            RelayError(
                ErrorCode.UPSTREAM_ERROR,
                f"{where} answered HTTP {status} ({name})",
                upstream or "no message from the provider",
            ),
            status,
            retryable=retryable,
            retry_after_s=_retry_after(getattr(response, "headers", None)) if retryable else None,
        )
    if "Timeout" in name:
        return Failure(
            RelayError(
                ErrorCode.UPSTREAM_ERROR,
                f"{where} did not answer in time ({name})",
                "retry, or raise timeout_s",
            )
        )
    if "Connect" in name or "Network" in name or "Protocol" in name or "Read" in name or "Write" in name:
        return Failure(
            RelayError(
                ErrorCode.UPSTREAM_ERROR,
                f"lost or could not open the connection to {where} ({name})",
                f"check the network, or that the server is running; set {provider.base_url_env} to change the endpoint",
            )
        )
    return Failure(RelayError(ErrorCode.UPSTREAM_ERROR, f"{where} call failed ({name})", upstream or name))


def loaded_sdk_exception_classes() -> list[type[BaseException]]:
    """Every exception class the SDKs and their HTTP layer define (for the test that none escapes)."""
    found: list[type[BaseException]] = []
    for module_name, module in list(sys.modules.items()):
        if module_name.split(".")[0] not in _SDK_MODULES:
            continue
        for value in list(vars(module).values()):
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__.split(".")[0] in _SDK_MODULES
            ):
                found.append(value)  # pyright: ignore[reportUnknownArgumentType]
    return sorted(set(found), key=lambda c: f"{c.__module__}.{c.__qualname__}")
