"""Secrets relay must never write down: which values are secret, and how to remove them from text."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from urllib.parse import urlsplit

REDACTED = "[redacted]"
# Environment names whose values are credentials.
SECRET_NAME = re.compile(r"(?:API_KEY|_KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$|^(?:GH|GITHUB)_TOKEN$", re.I)
# Shapes of vendor keys, redacted from any text even when relay did not know the key.
KEY_SHAPES = re.compile(
    r"\b(?:sk-[A-Za-z0-9_\-*.]{8,}|xai-[A-Za-z0-9_\-*.]{8,}|AIza[A-Za-z0-9_\-]{20,}|gh[pousr]_[A-Za-z0-9]{20,})"
)
# Every key shape starts with one of these; the regex runs only on text that contains one.
KEY_PREFIXES = ("sk-", "xai-", "AIza", "ghp_", "gho_", "ghu_", "ghs_", "ghr_")
# Shorter values are too likely to be ordinary words to replace everywhere.
MIN_SECRET_LEN = 8
# The shortest piece of a known key worth redacting on its own (vendors echo masked prefixes/suffixes).
MIN_FRAGMENT = 6
# Credentials inside a URL (`http://user:pass@proxy:3128`): the user-info part goes wherever it appears.
URL_USERINFO = re.compile(r"(?<=://)[^\s/@:]+:[^\s/@]+@")
# Environment names that hold a proxy URL (HTTPS_PROXY, http_proxy, ALL_PROXY ...).
PROXY_NAME = re.compile(r"proxy$", re.I)
# Placeholder keys that are not secret (local servers that need some value).
NOT_SECRET = frozenset({"relay-local"})


def secret_values(environ: Mapping[str, str], extra: Iterable[str] = ()) -> tuple[str, ...]:
    """The credential values in an environment (plus any known keys), longest first."""
    found = {v for k, v in environ.items() if SECRET_NAME.search(k) and len(v) >= MIN_SECRET_LEN}
    found |= {v for v in extra if len(v) >= MIN_SECRET_LEN}
    for key, value in environ.items():
        if PROXY_NAME.search(key):
            found |= set(_proxy_credentials(value))
    return tuple(sorted(found - NOT_SECRET, key=len, reverse=True))


def _proxy_credentials(url: str) -> list[str]:
    """The password (and user:password) of a proxy URL, when it carries them."""
    try:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        password = parts.password
    except ValueError:
        return []
    if not password:
        return []
    found = [f"{parts.username}:{password}"]
    return [*found, password] if len(password) >= MIN_FRAGMENT else found


def redact(text: str, secrets: Iterable[str]) -> str:
    """Text with every known secret, any long fragment of one, and anything shaped like a key removed."""
    for secret in secrets:
        if len(secret) < MIN_FRAGMENT or secret in NOT_SECRET:
            continue
        text = text.replace(secret, REDACTED)
        head = secret[: max(MIN_FRAGMENT, len(secret) // 3)]
        tail = secret[-max(MIN_FRAGMENT, len(secret) // 4) :]
        text = text.replace(head, REDACTED).replace(tail, REDACTED)
    if any(prefix in text for prefix in KEY_PREFIXES):
        text = KEY_SHAPES.sub(REDACTED, text)
    if "://" in text and "@" in text:
        text = URL_USERINFO.sub(REDACTED + "@", text)
    return text


# `redact_pieces` redacts a text given in pieces a window of about this many characters at a time, each
# cut after its last whitespace (within the window's last REDACT_LOOKBACK characters): a secret, a key
# and a URL's credentials hold none, so none is split between two windows.
REDACT_WINDOW = 1 << 18
REDACT_LOOKBACK = 1 << 16


def redact_pieces(pieces: Iterable[str], secrets: Iterable[str]) -> Iterator[str]:
    """`redact` over a text too large to hold, given and handed back in pieces."""
    known = tuple(secrets)
    window = ""
    for piece in pieces:
        window += piece
        while len(window) >= REDACT_WINDOW:
            floor = len(window) - REDACT_LOOKBACK
            cut = max(window.rfind(space, floor) for space in " \n\t\r") + 1 or len(window)
            yield redact(window[:cut], known)
            window = window[cut:]
    if window:
        yield redact(window, known)


def redact_value(value: object, secrets: tuple[str, ...]) -> object:
    """`redact` applied to every string inside a JSON-like value."""
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        items: dict[object, object] = value  # pyright: ignore[reportUnknownVariableType]
        return {k: redact_value(v, secrets) for k, v in items.items()}
    if isinstance(value, list | tuple):
        seq: list[object] | tuple[object, ...] = value  # pyright: ignore[reportUnknownVariableType]
        return [redact_value(v, secrets) for v in seq]
    return value
