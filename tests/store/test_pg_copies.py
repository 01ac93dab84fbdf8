"""The PostgreSQL store's copies of jobs (pg/store.py): a copy stays good while nothing that could change that job's
row came since: a write of this process to another job leaves it (the jobs of a burst, each written in turn, keep
theirs), a write that may change any job (a claim, a heartbeat) or another process's change does not."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from relay.store import open_store
from relay.store.body import FINISH_JOB, INSERT_JOB, MARK_RUNNING
from relay.store.pg import PgStore
from relay.store.pg import conn as pg_conn
from relay.store.pg.conn import one_job_at
from tests.store.test_claims import queue


@pytest.mark.parametrize(
    ("sql", "at"),
    [
        (INSERT_JOB, 0),
        (MARK_RUNNING + " AND epoch=?", 8),
        (FINISH_JOB, 8),
        ("UPDATE jobs SET cancel_requested=true WHERE id=?", 0),
        ("UPDATE jobs SET stop_reason=COALESCE(stop_reason, ?) WHERE id=? RETURNING id", 1),
        ("UPDATE jobs SET lease_until=? WHERE worker=? AND status IN ('queued', 'running')", None),
        ("UPDATE jobs SET x=? WHERE id IN (SELECT id FROM jobs WHERE worker=?)", None),
        ("UPDATE jobs SET x=(SELECT y FROM t WHERE id=?) WHERE worker=?", None),
        ("WITH held AS (SELECT 1), taken AS (UPDATE jobs SET worker=? WHERE id=?) SELECT 1", None),
        ("INSERT INTO jobs (id, agent) SELECT id, agent FROM old_jobs", None),
        ("DELETE FROM jobs WHERE finished_at < ?", None),
    ],
)
def test_a_statement_that_writes_one_job_is_told_by_where_its_id_is(sql: str, at: int | None) -> None:
    assert one_job_at(sql) == at


@pytest.fixture
def pg_store(pg_url: str, relay_home: Path) -> Iterator[PgStore]:
    store = open_store(pg_url, home=relay_home)
    assert isinstance(store, PgStore)
    yield store
    store.close()


def reads_of(store: PgStore) -> list[str]:
    """The ids of the jobs `store` reads from the server from now on (its copies' misses)."""
    read: list[str] = []
    real = store._db.exec  # pyright: ignore[reportPrivateUsage]

    def exec_(sql: str, params: Any = ()) -> Any:
        if sql.startswith("SELECT id, agent,") and sql.endswith("FROM jobs WHERE id=?"):
            read.append(params[0])
        return real(sql, params)

    store._db.exec = exec_  # type: ignore[method-assign]  # pyright: ignore[reportPrivateUsage]
    return read


def test_a_write_to_one_job_leaves_the_copies_of_the_others_and_refreshes_its_own(pg_store: PgStore) -> None:
    queue(pg_store, ("a", "claude"), ("b", "claude"))
    reads = reads_of(pg_store)
    assert pg_store.get_job("a") is not None and pg_store.get_job("b") is not None
    reads.clear()
    running = {"pid": 10, "pid_start_ticks": 1, "boot_id": "boot", "owner_pid": 11, "owner_start_ticks": 2}
    assert pg_store.mark_running("a", **running, deadline_at=time.time() + 60, idle_timeout_s=60.0)
    got_a, got_b = pg_store.get_job("a"), pg_store.get_job("b")
    assert reads == []  # neither read again: a's copy is the row its write returned, b's was not touched
    assert got_a is not None and got_a.status == "running" and got_a.pid == 10
    assert got_b is not None and got_b.status == "queued"
    pg_store.set_stop_reason("a", "cancelled")  # a write that returns no row: a's copy goes, b's stays
    got_a, got_b = pg_store.get_job("a"), pg_store.get_job("b")
    assert reads == ["a"]
    assert got_a is not None and got_a.stop_reason == "cancelled" and got_b is not None


def test_a_write_that_may_change_any_job_or_another_processs_change_makes_each_copy_read_again(
    pg_store: PgStore, pg_url: str
) -> None:
    queue(pg_store, ("a", "claude"), ("b", "claude"))
    reads = reads_of(pg_store)
    pg_store.get_job("a"), pg_store.get_job("b")
    reads.clear()
    pg_store._db.exec(  # pyright: ignore[reportPrivateUsage]
        "UPDATE jobs SET stop_reason=? WHERE worker IS NULL AND status='queued'", ("swept",)
    )
    assert [r.stop_reason if r else None for r in (pg_store.get_job("a"), pg_store.get_job("b"))] == ["swept"] * 2
    assert sorted(reads) == ["a", "b"]
    reads.clear()
    version = pg_store.queue_version()
    with psycopg.connect(pg_url, autocommit=True) as other:  # another process's write: heard as a notice
        other.execute("UPDATE jobs SET stop_reason='other' WHERE id='b'")
    assert pg_store.wait_queue_change(version, 10)
    got_b = pg_store.get_job("b")
    assert got_b is not None and got_b.stop_reason == "other" and reads == ["b"]


def test_a_copy_read_while_its_job_was_written_is_not_kept(pg_store: PgStore) -> None:
    # A read whose row left the server before this process's write to the job landed holds the old row: it is
    # answered once, and the next read asks the server again.
    queue(pg_store, ("a", "claude"))
    pg_store._kept.clear()  # pyright: ignore[reportPrivateUsage]
    reads = reads_of(pg_store)
    real_keep = pg_store._keep  # pyright: ignore[reportPrivateUsage]

    def write_then_keep(job_id: str, seen: Any, rec: Any) -> None:
        if len(reads) == 1:  # the first read's row is in hand: the write lands before it is kept
            pg_store.set_stop_reason("a", "late")
        real_keep(job_id, seen, rec)

    pg_store._keep = write_then_keep  # type: ignore[method-assign]  # pyright: ignore[reportPrivateUsage]
    first, again = pg_store.get_job("a"), pg_store.get_job("a")
    assert first is not None and first.stop_reason is None  # read before the write
    assert again is not None and again.stop_reason == "late" and reads == ["a", "a"]


def test_past_the_jobs_whose_writes_are_counted_one_by_one_every_copy_is_read_again(
    pg_store: PgStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg_conn, "WRITTEN_KEPT", 2)
    queue(pg_store, ("a", "claude"), ("b", "claude"))
    reads = reads_of(pg_store)
    pg_store.get_job("a"), pg_store.get_job("b")
    assert reads == []  # the copies their inserts left
    queue(pg_store, ("c", "claude"))  # a third job's write: the counts are forgotten, as a write to every job
    got = [pg_store.get_job(job_id) for job_id in ("a", "b")]
    assert sorted(reads) == ["a", "b"] and all(rec is not None for rec in got)
