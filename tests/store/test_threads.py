"""Conversation threads on both backends: relay.db, and the PostgreSQL store every front of it shares."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg
import pytest

from relay.config import load_settings
from relay.errors import ErrorCode, RelayError
from relay.store import open_store
from relay.store.pg import schema
from relay.threads import NewTurn, Threads, ThreadSettings, new_thread_id, open_threads
from relay.threads.pg import IDLE_KEPT, PgThreads
from tests.postgres import Cluster, free_port
from tests.store.conftest import BACKENDS, threads_of


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_thread_survives_a_restart_and_expires_after_its_lifetime(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    now = [1000.0]
    config = ThreadSettings(ttl_s=60, max_turns=4)
    threads = threads_of(backend, request, tmp_path, config, clock=lambda: now[0])
    thread_id = new_thread_id()
    threads.add_turns(
        thread_id, [NewTurn("user", "q"), NewTurn("assistant", "a", model="xai:grok-4")], tool="ask", title="q"
    )
    threads.close()

    reopened = threads_of(backend, request, tmp_path, config, clock=lambda: now[0])
    thread = reopened.get(thread_id)
    assert [(t.role, t.content) for t in thread.turns] == [("user", "q"), ("assistant", "a")]
    assert thread.last_model == "xai:grok-4"
    assert [t.id for t in reopened.list()] == [thread_id]
    with pytest.raises(RelayError) as caught:
        reopened.add_turns(
            thread_id, [NewTurn("user", "1"), NewTurn("assistant", "2"), NewTurn("user", "3")], tool="ask"
        )
    assert caught.value.code == ErrorCode.MAX_TURNS
    assert reopened.get(thread_id).turn_count == 2  # the refused turns left nothing behind
    now[0] += 61
    assert reopened.find(thread_id) is None
    assert reopened.list() == []
    assert [t.id for t in reopened.list(include_expired=True)] == [thread_id]
    with pytest.raises(RelayError) as gone:
        reopened.add_turns(thread_id, [NewTurn("user", "late")], tool="ask")
    assert gone.value.code == ErrorCode.SESSION_NOT_FOUND
    assert reopened.purge_expired() == 1
    assert reopened.list(include_expired=True) == []
    reopened.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_thread_keeps_its_turns_files_metadata_title_and_cost(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    threads = threads_of(backend, request, tmp_path)
    parent, thread_id = new_thread_id(), new_thread_id()
    first = NewTurn("user", "look at this", files=("/w/a.py",), images=("/w/shot.png",), metadata={"step": 1})
    answer = NewTurn("assistant", "done", provider="xai", model="xai:grok-4", job_id="j1")
    threads.add_turns(
        thread_id, [first, answer], tool="chat", title="  look\n at   this ", parent_id=parent, cost_usd=0.25
    )
    thread = threads.add_turns(thread_id, [NewTurn("user", "and?")], tool="ask", cost_usd=0.5)
    assert (thread.tool, thread.title, thread.parent_id, thread.turn_count) == ("chat", "look at this", parent, 3)
    assert thread.total_cost_usd == pytest.approx(0.75)
    assert thread.expires_at == thread.updated_at + threads.config.ttl_s
    got = [(t.seq, t.role, t.tool, t.files, t.images, t.provider, t.model, t.job_id, t.metadata) for t in thread.turns]
    assert got == [
        (0, "user", "chat", ("/w/a.py",), ("/w/shot.png",), None, None, None, {"step": 1}),
        (1, "assistant", "chat", (), (), "xai", "xai:grok-4", "j1", {}),
        (2, "user", "ask", (), (), None, None, None, {}),
    ]
    assert threads.find("not-a-uuid") is None and threads.find(new_thread_id()) is None
    with pytest.raises(RelayError) as bad:
        threads.add_turns("not-a-uuid", [NewTurn("user", "x")], tool="ask")
    assert bad.value.code == ErrorCode.INVALID_ARGUMENT
    threads.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_turn_holding_nul_and_any_unicode_is_kept_whole(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    threads = threads_of(backend, request, tmp_path)
    thread_id = new_thread_id()
    text = "a\x00b — 日本語 \U0001f600 end"  # NUL: PostgreSQL's text refuses it
    lone = "half a pair: \ud800, the other half: \udfff"  # valid JSON ("\\ud800"), not UTF-8: both stores refuse it as text
    thread = threads.add_turns(
        thread_id, [NewTurn("user", text), NewTurn("assistant", lone)], tool="ask", title="nul\x00title \ud800"
    )
    assert thread.title == "nul title \ufffd"
    found = threads.find(thread_id)
    assert found is not None and [t.content for t in found.turns] == [text, lone]
    assert [t.content for t in threads.add_turns(thread_id, [NewTurn("user", "next")], tool="ask").turns] == [
        text,
        lone,
        "next",
    ]
    threads.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_fronts_adding_to_one_new_thread_at_once_number_every_turn_once_in_whole_exchanges(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    fronts = [threads_of(backend, request, tmp_path, ThreadSettings(max_turns=200)) for _ in range(2)]
    thread_id = new_thread_id()
    rounds = 20
    start = threading.Barrier(len(fronts))
    failures: list[BaseException] = []

    def talk(index: int) -> None:
        start.wait()
        try:
            for n in range(rounds):
                exchange = [NewTurn("user", f"{index}:{n}:q"), NewTurn("assistant", f"{index}:{n}:a")]
                fronts[index].add_turns(thread_id, exchange, tool="chat", title=f"front {index}")
        except BaseException as exc:
            failures.append(exc)

    workers = [threading.Thread(target=talk, args=(i,)) for i in range(len(fronts))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert failures == []
    thread = fronts[1].get(thread_id)
    assert thread.turn_count == len(thread.turns) == 2 * rounds * len(fronts)
    assert [t.seq for t in thread.turns] == list(range(2 * rounds * len(fronts)))
    # each exchange kept together, each front's exchanges in its own order
    pairs = [(q.content, a.content) for q, a in zip(thread.turns[::2], thread.turns[1::2], strict=True)]
    assert all(q.removesuffix(":q") == a.removesuffix(":a") for q, a in pairs)
    for index in range(len(fronts)):
        assert [q for q, _ in pairs if q.startswith(f"{index}:")] == [f"{index}:{n}:q" for n in range(rounds)]
    for front in fronts:
        front.close()


def test_the_settings_store_decides_where_threads_are(pg_url: str, tmp_path: Path) -> None:
    home = {"RELAY_HOME": str(tmp_path)}
    local = open_threads(load_settings(home))
    assert isinstance(local, Threads)
    local.close()
    shared = open_threads(load_settings(home | {"RELAY_STORE": pg_url, "RELAY_THREAD_MAX_TURNS": "6"}))
    assert isinstance(shared, PgThreads) and shared.config.max_turns == 6
    thread_id = new_thread_id()
    shared.add_turns(thread_id, [NewTurn("user", "kept in PostgreSQL")], tool="ask")
    shared.close()
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(
            "SELECT convert_from(content, 'UTF8') FROM thread_turns WHERE thread_id=%s", (thread_id,)
        ).fetchone()
    assert row == ("kept in PostgreSQL",)
    home_db = Threads(tmp_path / "relay.db")
    assert home_db.find(thread_id) is None  # not in the front's own relay.db
    home_db.close()


def test_a_postgresql_store_made_before_threads_were_there_gets_them_on_its_next_start(
    pg_url: str, relay_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = [(name, ddl) for name, ddl in schema.MIGRATIONS if name != "m004_threads"]
    with monkeypatch.context() as m:
        m.setattr(schema, "MIGRATIONS", before)
        old = open_store(pg_url, home=relay_home)
        old.insert_job("j-old", "claude", "cli", {"prompt": "p"}, None, "/w")
        assert "m016_outputs" in old.applied_migrations() and "m004_threads" not in old.applied_migrations()
        old.close()
    store = open_store(pg_url, home=relay_home)
    assert sorted(store.applied_migrations()) == sorted(name for name, _ in schema.MIGRATIONS)
    assert store.get_job("j-old") is not None
    store.close()
    threads = PgThreads(pg_url)
    thread_id = new_thread_id()
    threads.add_turns(thread_id, [NewTurn("user", "after the upgrade")], tool="ask")
    assert [t.content for t in threads.get(thread_id).turns] == ["after the upgrade"]
    threads.close()


def test_a_postgresql_thread_store_reconnects_after_the_server_restarts_and_says_when_it_is_away(
    pg_cluster: Cluster, pg_url: str
) -> None:
    threads, closed = PgThreads(pg_url), PgThreads(pg_url)
    thread_id = new_thread_id()
    threads.add_turns(thread_id, [NewTurn("user", "before")], tool="ask")
    closed.close()  # its connection is kept for the next store to open
    pg_cluster.restart()  # both connections are now closed by the server
    threads.add_turns(thread_id, [NewTurn("assistant", "after")], tool="ask")
    assert [t.content for t in threads.get(thread_id).turns] == ["before", "after"]
    threads.close()
    reopened = PgThreads(pg_url)
    assert reopened.get(thread_id).turn_count == 2
    reopened.close()
    with pytest.raises(RelayError) as away:
        PgThreads(f"postgresql://relay:s3cret@127.0.0.1:{free_port()}/queue")
    assert away.value.code is ErrorCode.STORE_UNAVAILABLE and "s3cret" not in away.value.message


def test_thread_stores_opened_one_after_another_share_one_connection_and_keep_few_idle(pg_url: str) -> None:
    def connections(at_most: int) -> int:
        """How many connections the server holds to the database once no more than `at_most` are left (a closed
        connection's server process ends a moment after the client closed it)."""
        deadline = time.monotonic() + 10
        with psycopg.connect(pg_url, autocommit=True) as conn:
            while True:
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND pid <> pg_backend_pid()"
                ).fetchone()
                count = int(row[0]) if row else -1
                if count <= at_most or time.monotonic() > deadline:
                    return count
                time.sleep(0.05)

    thread_id = new_thread_id()
    for n in range(10):  # as the thread tools do: a store per call
        threads = PgThreads(pg_url)
        threads.add_turns(thread_id, [NewTurn("user", f"turn {n}")], tool="ask")
        threads.close()
    assert connections(at_most=1) == 1
    at_once = [PgThreads(pg_url) for _ in range(IDLE_KEPT + 2)]
    assert all(t.get(thread_id).turn_count == 10 for t in at_once)
    for threads in at_once:
        threads.close()
    assert connections(at_most=IDLE_KEPT) == IDLE_KEPT
