"""The model registry (`relay/data/models.toml`): which models each agent offers, and its aliases."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any


@dataclass(frozen=True)
class AgentModels:
    """One agent's entry in the registry."""

    models: tuple[str, ...] = ()
    aliases: Mapping[str, str] = field(default_factory=lambda: {})


@cache
def registry() -> dict[str, AgentModels]:
    """Every agent's models and aliases, read once from the packaged TOML file."""
    text = (resources.files("relay") / "data" / "models.toml").read_text(encoding="utf-8")
    raw: dict[str, Any] = tomllib.loads(text)
    out: dict[str, AgentModels] = {}
    for agent, table in raw.items():
        entry: dict[str, Any] = table if isinstance(table, dict) else {}  # pyright: ignore[reportUnknownVariableType]
        models: list[Any] = entry.get("models", [])
        aliases: dict[str, Any] = entry.get("aliases", {})
        out[agent] = AgentModels(
            models=tuple(str(m) for m in models),
            aliases={str(k).lower(): str(v) for k, v in aliases.items()},
        )
    return out


def resolve_model(agent: str, model: str | None, settings_aliases: Mapping[str, str]) -> str | None:
    """The model id to pass: the user's aliases first, then the registry's, else the name as given."""
    if model is None or not model.strip():
        return None
    name = model.strip()
    if name in settings_aliases:
        return settings_aliases[name]
    entry = registry().get(agent, AgentModels())
    return entry.aliases.get(name.lower(), name)


def model_choices(agent: str) -> list[str]:
    """The models an agent offers, then its aliases, without duplicates (for tool descriptions and status)."""
    entry = registry().get(agent, AgentModels())
    return list(dict.fromkeys([*entry.models, *entry.aliases]))
