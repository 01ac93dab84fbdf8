"""The job engine as the CLI's reading commands use it: settings from the environment, dead relays' jobs finalized."""

from __future__ import annotations

from typing import Any


def reading_engine() -> Any:
    """An engine that runs nothing itself; jobs whose relay died and whose process ended are finalized first."""
    from relay.config import load_settings
    from relay.jobs.engine import Engine

    engine = Engine(load_settings())
    engine.reconcile()
    return engine
