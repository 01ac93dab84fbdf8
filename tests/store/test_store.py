"""The SQLite store: WAL, recorded migrations, job lifecycle and sessions."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path
from typing import Any

from relay.events import Event
from relay.store import Store
from relay.store.migrations import MIGRATIONS


def test_a_new_store_uses_wal_and_records_every_migration(tmp_path: Path) -> None:
    store = Store(tmp_path / "relay.db")
    assert store.applied_migrations() == sorted(name for name, _ in MIGRATIONS)
    mode = sqlite3.connect(tmp_path / "relay.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_reopening_a_store_applies_nothing_twice(tmp_path: Path) -> None:
    Store(tmp_path / "relay.db").close()
    again = Store(tmp_path / "relay.db")
    rows = again._exec("SELECT COUNT(*) FROM migrations").fetchone()[0]  # pyright: ignore[reportPrivateUsage]
    assert rows == len(MIGRATIONS)


def test_a_job_is_finished_once_only(tmp_path: Path) -> None:
    store = Store(tmp_path / "relay.db")
    store.insert_job("j1", "claude", "cli", {"prompt": "p"}, None, "/w")
    assert store.get_job("j1") is not None and store.get_job("j1").status == "queued"  # type: ignore[union-attr]
    assert store.finish_job("j1", "completed", exit_code=0, result={"usage": {}}, error=None, session_id="s", model="m")
    assert not store.finish_job("j1", "failed", exit_code=1, result=None, error=None, session_id=None, model=None)
    job = store.get_job("j1")
    assert job is not None and job.status == "completed" and job.session_id == "s" and job.is_final


def test_events_are_stored_in_order_and_deduplicated_by_sequence(tmp_path: Path) -> None:
    store = Store(tmp_path / "relay.db")
    store.insert_job("j1", "claude", "cli", {"prompt": "p"}, None, "/w")
    store.add_events("j1", 0, [Event("message", {"text": "a"}), Event("message", {"text": "b"})])
    store.add_events("j1", 1, [Event("message", {"text": "b"}), Event("message", {"text": "c"})])
    assert [(s, e.data["text"]) for s, _, e in store.events("j1")] == [(0, "a"), (1, "b"), (2, "c")]
    assert store.max_event_seq("j1") == 2


def test_sessions_accumulate_turns_and_cost(tmp_path: Path) -> None:
    store = Store(tmp_path / "relay.db")
    for _ in range(2):
        store.upsert_session("claude", "s1", cwd="/w", model="m", permission="edit", title="t", cost=0.5)
    session = store.get_session("s1", "claude")
    assert session is not None and session.turns == 2 and session.total_cost_usd == 1.0 and session.permission == "edit"
    assert [s.session_id for s in store.list_sessions()] == ["s1"]


def _open_at_once(path: str, barrier: Any, out: Any) -> None:
    from relay.store import Store

    barrier.wait()
    try:
        Store(Path(path)).close()
        out.put("ok")
    except Exception as exc:
        out.put(f"{type(exc).__name__}: {exc}")


def test_relays_starting_at_once_on_a_new_home_each_find_every_migration_applied_once(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    for round_ in range(3):
        path = tmp_path / f"round{round_}" / "relay.db"
        barrier, out = ctx.Barrier(RACERS), ctx.Queue()
        procs = [ctx.Process(target=_open_at_once, args=(str(path), barrier, out)) for _ in range(RACERS)]
        for p in procs:
            p.start()
        answers = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(60)
        assert answers == ["ok"] * RACERS
        assert Store(path).applied_migrations() == sorted(name for name, _ in MIGRATIONS)


# How many processes open one new relay.db at the same instant.
RACERS = 5
