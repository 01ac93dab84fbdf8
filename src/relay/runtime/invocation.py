"""What the supervisor launches: a value the agent adapters build and the runtime runs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Invocation:
    """A fully described process launch: argv, env, cwd, and optionally text to feed on stdin."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    stdin_text: str | None = None
