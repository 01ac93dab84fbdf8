"""A claim on PostgreSQL is one round trip, counted on the wire: the lock, the decision, the take, the worker's
count of what it ran and the commit go to the server together and are read once."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from relay.store import JobStore, WorkerInfo, open_store
from relay.store.pg.store import PgStore
from tests.store.test_round_trips import TripCounter

W = WorkerInfo("w/1", "w", "host-a", 100, 7, "boot-a", None, (), 4, 15.0)


@pytest.fixture
def counted(pg_url: str, relay_home: Path) -> Iterator[tuple[TripCounter, PgStore]]:
    host_port, dbname = pg_url.removeprefix("postgresql://postgres@").split("/", 1)
    host, port = host_port.split(":")
    proxy = TripCounter((host, int(port)))
    store = open_store(proxy.url(dbname), home=relay_home)
    assert isinstance(store, PgStore)
    yield proxy, store
    store.close()
    proxy.close()


def queue(store: JobStore, *jobs: tuple[str, str]) -> None:
    for job_id, agent in jobs:
        store.insert_job(job_id, agent, "cli", {"prompt": job_id}, None, "/w")


def trips_of(proxy: TripCounter, call: Callable[[], object]) -> int:
    """How many round trips `call()` made."""
    before = proxy.trips
    call()
    return proxy.trips - before


def test_a_claim_of_queued_jobs_on_postgresql_is_one_round_trip(counted: tuple[TripCounter, PgStore]) -> None:
    proxy, store = counted
    store.register_worker(W)
    queue(store, ("warm", "claude"), ("j1", "claude"), ("j2", "codex"), ("j3", "claude"), ("j4", "gemini"))
    limits = {"claude": 1}

    def claim(free: int) -> list[tuple[str, str, int]]:
        return store.claim(W, free=free, max_total=10, per_agent=lambda agent: limits.get(agent, 10))

    assert [j for j, _, _ in claim(1)] == ["warm"]  # the connection is open, and the agents seen
    assert store.finish_job(
        "warm", "completed", exit_code=0, result=None, error=None, session_id=None, model=None, epoch=1
    )
    won: list[tuple[str, str, int]] = []
    assert trips_of(proxy, lambda: won.extend(claim(1))) == 1
    assert won == [("j1", "claude", 1)]
    # Several jobs at once, one agent at its limit passed over: still one round trip.
    assert trips_of(proxy, lambda: won.extend(claim(3))) == 1
    assert won[1:] == [("j2", "codex", 1), ("j4", "gemini", 1)]
    worker = store.get_worker("w/1")
    assert worker is not None and (worker.ran, worker.running) == (4, 3)


def test_a_job_read_before_its_claim_is_read_claimed_after_it(store: JobStore) -> None:
    """The claim's statement counts as a write of the jobs it takes (PostgreSQL's copy of a job read is let go)."""
    queue(store, ("j", "claude"))
    before = store.get_job("j")
    assert before is not None and (before.worker, before.epoch) == (None, 0)
    assert store.claim(W, free=1, max_total=4, per_agent=lambda _: 4) == [("j", "claude", 1)]
    after = store.get_job("j")
    assert after is not None and (after.worker, after.epoch) == ("w/1", 1)


def test_a_full_window_of_an_agent_at_its_limit_is_followed_by_the_jobs_behind_it(store: JobStore) -> None:
    queue(store, *[(f"c{i:02d}", "claude") for i in range(30)], ("x1", "codex"), ("x2", "codex"))
    won = store.claim(W, free=4, max_total=10, per_agent=lambda agent: 2 if agent == "claude" else 10)
    assert [j for j, _, _ in won] == ["c00", "c01", "x1", "x2"]


def test_a_claim_says_whether_a_job_its_worker_could_run_may_be_left(store: JobStore) -> None:
    def claim(free: int, total: int = 10) -> tuple[list[str], bool]:
        won, left, _ = store._claim(W, free, total, lambda agent: 1 if agent == "claude" else 10, ())  # pyright: ignore[reportPrivateUsage]
        return [j for j, _, _ in won], left

    queue(store, ("a", "claude"), ("b", "claude"), ("c", "codex"))
    assert claim(1) == (["a"], True)
    assert claim(4) == (["c"], True)  # b waits for claude's slot
    assert claim(4) == ([], True)
    assert end_of(store, "a")
    assert claim(4, total=1) == ([], True)  # c holds the one slot in total
    queue(store, ("d", "gemini"))
    assert claim(4) == (["b", "d"], False)  # every job it could run taken


def end_of(store: JobStore, job_id: str) -> bool:
    return store.finish_job(
        job_id, "completed", exit_code=0, result=None, error=None, session_id=None, model=None, epoch=1
    )
