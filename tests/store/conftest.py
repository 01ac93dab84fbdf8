"""The store's tests run on both backends: a SQLite file on disk and a throwaway PostgreSQL (tests/postgres.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.store import JobStore, open_store

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
