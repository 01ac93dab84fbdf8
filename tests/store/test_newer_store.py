"""A relay refuses a store that a newer relay migrated (steps it does not know), with a hint, on both backends."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest

from relay.errors import ErrorCode, RelayError
from relay.store import open_store


def test_a_relay_refuses_a_sqlite_store_migrated_by_a_newer_relay_and_says_to_upgrade(tmp_path: Path) -> None:
    open_store(tmp_path / "relay.db", home=tmp_path).close()
    with sqlite3.connect(tmp_path / "relay.db") as db:
        db.execute("INSERT INTO migrations (name, applied_at) VALUES ('m999_from_the_future', 0)")
    db.close()
    with pytest.raises(RelayError) as refused:
        open_store(tmp_path / "relay.db", home=tmp_path)
    assert refused.value.code is ErrorCode.CONFIG_INVALID
    assert "m999_from_the_future" in refused.value.message and "newer relay" in refused.value.message
    assert "upgrade relay" in refused.value.hint


def test_a_relay_refuses_a_postgresql_store_migrated_by_a_newer_relay_and_says_to_upgrade(
    pg_url: str, tmp_path: Path
) -> None:
    open_store(pg_url, home=tmp_path).close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO migrations (name, applied_at) VALUES ('m999_from_the_future', 0)")
    with pytest.raises(RelayError) as refused:
        open_store(pg_url, home=tmp_path)
    assert refused.value.code is ErrorCode.CONFIG_INVALID
    assert "m999_from_the_future" in refused.value.message and "upgrade relay" in refused.value.hint
