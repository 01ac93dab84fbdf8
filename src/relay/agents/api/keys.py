"""API keys: `RELAY_HOME/api_keys.json` first (seed 004: the file wins), then the environment with aliases.

A key is returned to the one caller that builds the SDK client and goes nowhere else: not in
the store, job files, events, logs or errors.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from relay.agents.api.registry import ProviderInfo
from relay.config import Settings
from relay.errors import ErrorCode, RelayError
from relay.secrets import REDACTED as REDACTED
from relay.secrets import redact as redact_text

KEYS_FILE = "api_keys.json"
# Local servers (ollama, vllm...) ignore the key, but the OpenAI SDK needs one; it must never
# fall back to OPENAI_API_KEY from the environment and send that to another host.
LOCAL_PLACEHOLDER_KEY = "relay-local"


@dataclass(frozen=True)
class KeySource:
    """Where a provider's key comes from; `where` names a variable or the file, never the key."""

    key: str
    where: str


def _read_file(settings: Settings) -> dict[str, str]:
    path: Path = settings.home / KEYS_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    try:
        raw = json.loads(text)
    except json.JSONDecodeError:
        raise RelayError(
            ErrorCode.CONFIG_INVALID,
            f"{path} is not valid JSON",
            'write {"XAI_API_KEY": "..."} or remove the file',
        ) from None
    if not isinstance(raw, dict):
        raise RelayError(ErrorCode.CONFIG_INVALID, f"{path} must hold a JSON object", 'write {"XAI_API_KEY": "..."}')
    return {str(k): v.strip() for k, v in raw.items() if isinstance(v, str) and v.strip()}  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType, reportUnknownMemberType]


def find_key(provider: ProviderInfo, settings: Settings) -> KeySource | None:
    """The key for a provider, or None. api_keys.json wins over the environment; aliases in order."""
    file_keys = _read_file(settings)
    for name in provider.key_env:
        if file_keys.get(name):
            return KeySource(file_keys[name], f"{KEYS_FILE}:{name}")
    for name in provider.key_env:
        value = settings.environ.get(name, "").strip()
        if value:
            return KeySource(value, name)
    return None


def require_key(provider: ProviderInfo, settings: Settings) -> str:
    """The key to call a provider with (a placeholder for local servers); AUTH_MISSING when none is set."""
    if not provider.key_env:
        return LOCAL_PLACEHOLDER_KEY
    found = find_key(provider, settings)
    if found is not None:
        return found.key
    if provider.local:
        return LOCAL_PLACEHOLDER_KEY
    names = " or ".join(provider.key_env)
    where = f" (get one at {provider.key_url})" if provider.key_url else ""
    raise RelayError(
        ErrorCode.AUTH_MISSING,
        f"no API key for {provider.name}",
        f"set {names} in relay's environment, or add it to {settings.home / KEYS_FILE}{where}",
    )


def redact(text: str, secrets: Iterable[str]) -> str:
    """Text with every known key, any long fragment of one, and anything shaped like a key removed."""
    return redact_text(text, secrets)
