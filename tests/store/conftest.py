"""The store's tests run on both backends: a SQLite file on disk and a throwaway PostgreSQL (tests/postgres.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from relay.store import JobStore, open_store
from relay.threads import Threads, ThreadSettings, ThreadStore

BACKENDS = ["sqlite", "postgresql"]


def target_of(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str | Path:
    """Where a store of `backend` is: a file under `tmp_path`, or a new database of the session's cluster."""
    return tmp_path / "relay.db" if backend == "sqlite" else str(request.getfixturevalue("pg_url"))


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path, relay_home: Path) -> Iterator[JobStore]:
    """An open store of each backend in turn, closed after the test."""
    opened = open_store(target_of(request.param, request, tmp_path), home=relay_home)
    yield opened
    opened.close()


def threads_of(
    backend: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    config: ThreadSettings | None = None,
    clock: Callable[[], float] = time.time,
) -> ThreadStore:
    """A thread store of `backend`: relay.db under `tmp_path`, or the test's PostgreSQL database (the same one
    each time within a test, as a second front of one store would open it)."""
    if backend == "sqlite":
        return Threads(tmp_path / "relay.db", config, clock=clock)
    from relay.threads.pg import PgThreads

    return PgThreads(str(request.getfixturevalue("pg_url")), config, clock=clock)
