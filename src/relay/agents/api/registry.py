"""The model registry: providers (endpoint, key variables) and models (context window, prices, aliases).

Built from `relay/data/api_models.toml`, then `[providers.NAME]` in config.toml, then
`RELAY_<PROVIDER>_BASE_URL` in the environment (which wins).
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, Literal, cast

from relay.config import Settings
from relay.errors import ErrorCode, RelayError
from relay.events import Usage

Kind = Literal["anthropic", "openai"]

# A model the registry does not list gets this context window unless its provider sets one.
DEFAULT_CONTEXT_WINDOW = 128_000
# ... and this output limit (Anthropic requires max_tokens on every request).
DEFAULT_MAX_OUTPUT = 8192
THINKING_MODES = ("minimal", "low", "medium", "high", "max")

# Bare model names are routed by their prefix when the registry does not list them.
_PREFIX_PROVIDERS = (
    ("claude-", "anthropic"),
    ("gpt-", "openai"),
    ("o1", "openai"),
    ("o3", "openai"),
    ("o4", "openai"),
    ("grok-", "xai"),
    ("gemini-", "gemini-api"),
    ("mistral-", "mistral"),
    ("codestral", "mistral"),
    ("devstral", "mistral"),
    ("magistral", "mistral"),
    ("open-mistral", "mistral"),
    ("open-mixtral", "mistral"),
)


@dataclass(frozen=True)
class ProviderInfo:
    """One API endpoint and how to authenticate to it."""

    name: str
    kind: Kind
    base_url: str
    key_env: tuple[str, ...] = ()
    key_url: str = ""
    local: bool = False
    efforts: tuple[str, ...] = ()
    stream_usage: bool = True
    context_window: int = DEFAULT_CONTEXT_WINDOW
    fallback_model: str | None = None
    models: tuple[str, ...] = ()

    @property
    def needs_key(self) -> bool:
        return not self.local

    @property
    def base_url_env(self) -> str:
        return f"RELAY_{self.name.upper().replace('-', '_')}_BASE_URL"


@dataclass(frozen=True)
class ModelInfo:
    """A model of a provider, with what relay knows about it (prices in USD per million tokens)."""

    provider: str
    name: str
    context_window: int = DEFAULT_CONTEXT_WINDOW
    max_output: int = DEFAULT_MAX_OUTPUT
    input_price: float | None = None
    output_price: float | None = None
    cached_price: float | None = None
    aliases: tuple[str, ...] = ()
    reasoning: bool = False
    temperature: bool = True
    known: bool = True

    @property
    def id(self) -> str:
        return f"{self.provider}:{self.name}"

    def cost(self, usage: Usage) -> float | None:
        """Cost of a call; `usage.input` counts uncached input tokens, `usage.cached` cache reads."""
        if self.input_price is None or self.output_price is None:
            return None
        cached_price = self.cached_price if self.cached_price is not None else self.input_price
        total = usage.input * self.input_price + usage.cached * cached_price + usage.output * self.output_price
        return round(total / 1_000_000, 8)


@dataclass(frozen=True)
class Registry:
    """All providers and models, with alias lookup."""

    providers: Mapping[str, ProviderInfo]
    models: Mapping[str, ModelInfo]  # by id, in preference order
    aliases: Mapping[str, str] = field(default_factory=lambda: {})

    def provider(self, name: str) -> ProviderInfo:
        try:
            return self.providers[name]
        except KeyError:
            raise RelayError(
                ErrorCode.MODEL_NOT_FOUND,
                f"unknown provider {name!r}",
                f"use one of: {', '.join(sorted(self.providers))}; or add [providers.{name}] base_url=... to config.toml",
            ) from None

    def resolve(self, name: str) -> ModelInfo:
        """A model by `provider:model`, alias, or bare model name."""
        raw = name.strip()
        if not raw:
            raise RelayError(ErrorCode.INVALID_ARGUMENT, "model is empty", "pass a model such as sonnet or xai:grok-4")
        key = raw.lower()
        if key in self.aliases:
            return self.models[self.aliases[key]]
        if raw in self.models:
            return self.models[raw]
        provider_name, sep, model_name = raw.partition(":")
        if sep and provider_name in self.providers:
            if not model_name:
                raise RelayError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"model {raw!r} names no model",
                    f"write {provider_name}:MODEL",
                )
            return self._unlisted(self.providers[provider_name], model_name)
        if sep and "/" not in provider_name:
            self.provider(provider_name)  # raises with the list of providers
        matches = [m for m in self.models.values() if m.name == raw]
        if matches:
            return matches[0]
        for prefix, provider in _PREFIX_PROVIDERS:
            if key.startswith(prefix) and provider in self.providers:
                return self._unlisted(self.providers[provider], raw)
        raise RelayError(
            ErrorCode.MODEL_NOT_FOUND,
            f"unknown model {raw!r}",
            "name it provider:model (e.g. xai:grok-4, ollama:llama3.1) or use an alias from list_models",
        )

    def _unlisted(self, provider: ProviderInfo, name: str) -> ModelInfo:
        return self.models.get(f"{provider.name}:{name}") or unlisted_model(provider, name)


def unlisted_model(provider: ProviderInfo, name: str) -> ModelInfo:
    """A model the registry does not list: the provider's defaults, free when local, price unknown otherwise."""
    free = 0.0 if provider.local else None
    return ModelInfo(
        provider=provider.name,
        name=name,
        context_window=provider.context_window,
        input_price=free,
        output_price=free,
        cached_price=free,
        reasoning=bool(provider.efforts) or provider.kind == "anthropic",
        known=False,
    )


def read_config_table(settings: Settings, table: str) -> dict[str, Any]:
    """One top-level table of config.toml (relay.config does not parse the API sections yet)."""
    env = settings.environ
    path = Path(env["RELAY_CONFIG"]) if env.get("RELAY_CONFIG") else settings.home / "config.toml"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RelayError(
            ErrorCode.CONFIG_INVALID, f"{path} is not valid TOML: {exc}", "fix or remove the file"
        ) from None
    value = raw.get(table, {})
    return dict(value) if isinstance(value, dict) else {}  # pyright: ignore[reportUnknownArgumentType]


@functools.cache
def _builtin() -> dict[str, Any]:
    text = resources.files("relay").joinpath("data", "api_models.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def _strs(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, list):
        items = cast(list[Any], value)
        if all(isinstance(v, str) for v in items):
            return tuple(str(v) for v in items)
    raise RelayError(ErrorCode.CONFIG_INVALID, f"{where} must be a list of strings", "fix config.toml")


def _provider(name: str, table: dict[str, Any], base: ProviderInfo | None) -> ProviderInfo:
    where = f"providers.{name}"
    kind = str(table.get("kind", base.kind if base else "openai"))
    if kind not in ("anthropic", "openai"):
        raise RelayError(
            ErrorCode.CONFIG_INVALID,
            f"{where}.kind={kind!r}",
            "use kind = 'openai' (any compatible server) or 'anthropic'",
        )
    base_url = table.get("base_url", base.base_url if base else None)
    if not isinstance(base_url, str) or not base_url:
        raise RelayError(
            ErrorCode.CONFIG_INVALID,
            f"[{where}] has no base_url",
            f"add base_url = 'http://host:port/v1' to [{where}]",
        )
    # A provider only config.toml declares is a local server unless it names key variables.
    start = base or ProviderInfo(name=name, kind="openai", base_url=base_url, local="key_env" not in table)
    fallback = table.get("fallback_model", start.fallback_model)
    return replace(
        start,
        kind=kind,  # pyright: ignore[reportArgumentType]
        base_url=base_url,
        key_env=_strs(table["key_env"], f"{where}.key_env") if "key_env" in table else start.key_env,
        key_url=str(table.get("key_url", start.key_url)),
        local=bool(table.get("local", start.local)),
        efforts=_strs(table["efforts"], f"{where}.efforts") if "efforts" in table else start.efforts,
        stream_usage=bool(table.get("stream_usage", start.stream_usage)),
        context_window=int(table.get("context_window", start.context_window)),
        fallback_model=str(fallback) if fallback else None,
        models=_strs(table["models"], f"{where}.models") if "models" in table else start.models,
    )


def _model(table: dict[str, Any], providers: Mapping[str, ProviderInfo]) -> ModelInfo:
    model_id = str(table["id"])
    provider, _, name = model_id.partition(":")
    if provider not in providers or not name:
        raise RelayError(
            ErrorCode.CONFIG_INVALID, f"model {model_id!r} has an unknown provider", "write provider:model"
        )
    price: list[float] = [float(p) for p in table.get("price", [])]
    return ModelInfo(
        provider=provider,
        name=name,
        context_window=int(table.get("context_window", providers[provider].context_window)),
        max_output=int(table.get("max_output", DEFAULT_MAX_OUTPUT)),
        input_price=price[0] if len(price) > 0 else None,
        output_price=price[1] if len(price) > 1 else None,
        cached_price=price[2] if len(price) > 2 else None,
        aliases=tuple(a.lower() for a in _strs(table.get("aliases"), f"{model_id}.aliases")),
        reasoning=bool(table.get("reasoning", False)),
        temperature=bool(table.get("temperature", True)),
    )


def load_registry(settings: Settings) -> Registry:
    """The registry for these settings: built-in data, config.toml overrides, env base URLs."""
    data = _builtin()
    providers: dict[str, ProviderInfo] = {
        name: _provider(name, dict(table), None) for name, table in data["providers"].items()
    }
    for name, table in read_config_table(settings, "providers").items():
        if not isinstance(table, dict):
            raise RelayError(ErrorCode.CONFIG_INVALID, f"[providers.{name}] must be a table", "fix config.toml")
        providers[name] = _provider(name, dict(table), providers.get(name))  # pyright: ignore[reportUnknownArgumentType]
    for name, info in providers.items():
        override = settings.environ.get(info.base_url_env)
        if override:
            providers[name] = replace(info, base_url=override)
    models: dict[str, ModelInfo] = {}
    for table in data["models"]:
        model = _model(dict(table), providers)
        models[model.id] = model
    for info in providers.values():
        for name in info.models:
            model_id = f"{info.name}:{name}"
            if model_id not in models:
                models[model_id] = replace(unlisted_model(info, name), known=True)
    aliases = {alias: m.id for m in models.values() for alias in m.aliases}
    return Registry(providers=providers, models=models, aliases=aliases)
