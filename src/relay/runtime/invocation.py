"""What the supervisor launches: a value the agent adapters build and the runtime runs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Invocation:
    """A fully described process launch: argv, env, cwd, and optionally text to feed on stdin.

    `cwd` is a resolved path (no symlink in it): the process starts in the directory at that path
    and nowhere else; found elsewhere once there, it does not start (see launcher.py).
    """

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    stdin_text: str | None = None
