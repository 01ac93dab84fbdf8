"""A PostgreSQL transaction of relay's is one pipeline (BEGIN, its statements, COMMIT): one round trip when nothing
is read before its end, all or nothing when a statement fails, and no connection left inside it."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from relay.errors import ErrorCode, RelayError
from relay.store.dialect import Conflict, Step
from relay.store.pg.conn import OneConn, PgConn, PoolConn
from tests.store.test_round_trips import TripCounter


@pytest.fixture
def table(pg_url: str) -> Iterator[str]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL)")
    yield pg_url


@pytest.fixture(params=["pool", "one"])
def conn(request: pytest.FixtureRequest, table: str) -> Iterator[PgConn]:
    db: PgConn = PoolConn(table, size=2, wait_s=5, name="test") if request.param == "pool" else OneConn(table)
    yield db
    db.close()


def values(db: PgConn) -> list[tuple[int, int]]:
    return [(int(r[0]), int(r[1])) for r in db.exec("SELECT id, v FROM t ORDER BY id")]


def test_a_batch_with_a_failing_statement_keeps_nothing_and_leaves_the_connection_usable(conn: PgConn) -> None:
    conn.exec("INSERT INTO t VALUES (1, 0)")
    with pytest.raises(Conflict):
        conn.batch([Step("UPDATE t SET v = 5 WHERE id = 1"), Step("INSERT INTO t VALUES (1, 1)")])
    assert values(conn) == [(1, 0)]
    conn.batch([Step("UPDATE t SET v = 6 WHERE id = 1"), Step("INSERT INTO t VALUES (2, 2)")])
    assert values(conn) == [(1, 6), (2, 2)]


def test_a_transaction_that_fails_half_way_keeps_nothing_and_the_next_one_commits(conn: PgConn) -> None:
    with pytest.raises(Conflict), conn.tx() as tx:
        tx.exec("INSERT INTO t VALUES (1, 1)")
        tx.exec("INSERT INTO t VALUES (1, 2)")
        assert tx.exec("SELECT count(*) FROM t").fetchall()  # the read waits on the failure
    with conn.tx(snapshot=True) as tx:
        tx.exec("INSERT INTO t VALUES (3, 3)")
    assert values(conn) == [(3, 3)]


def test_a_transaction_that_reads_nothing_before_its_end_is_one_round_trip(table: str) -> None:
    host_port, dbname = table.removeprefix("postgresql://postgres@").split("/", 1)
    host, port = host_port.split(":")
    proxy = TripCounter((host, int(port)))
    db = OneConn(proxy.url(dbname))
    try:
        db.exec("SELECT 1")  # connected and checked
        before = proxy.trips
        with db.tx() as tx:
            tx.exec("INSERT INTO t VALUES (1, 1)")
            tx.exec("UPDATE t SET v = v + 1 WHERE id = 1")
        db.batch([Step("INSERT INTO t VALUES (2, 2)"), Step("UPDATE t SET v = v + 1 WHERE id = 2")])
        assert proxy.trips - before == 2
        assert values(db) == [(1, 2), (2, 3)]
    finally:
        db.close()
        proxy.close()


def test_a_statement_the_server_refuses_inside_a_transaction_fails_the_read_with_its_own_error(conn: PgConn) -> None:
    with pytest.raises(RelayError) as refused, conn.tx() as tx:
        tx.exec("INSERT INTO t VALUES (1, 1)")
        tx.exec("SELECT v FROM no_such_table WHERE id = ?", (1,)).fetchall()
    assert refused.value.code is ErrorCode.INTERNAL and "no_such_table" in refused.value.message
    assert not conn.away.is_away  # a refusal is not a store out of reach
    assert values(conn) == []


def test_a_batchs_values_reach_the_server_and_come_back_as_the_same_python_types(conn: PgConn) -> None:
    conn.exec("CREATE TABLE kinds (i BIGINT, small INT, f DOUBLE PRECISION, s TEXT, b BYTEA, yes BOOLEAN, j TEXT)")
    row = (2**40, 7, 1.5, "it's \u00e9t\u00e9 \U0001f600", b"\x00\x01'\xff", True, '{"a": [1, null]}')
    got = conn.batch([Step("INSERT INTO kinds VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING *", row)])[0].fetchall()
    assert got == [row]
    nulls = conn.batch([Step("INSERT INTO kinds VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING *", (None,) * 7)])
    assert nulls[0].fetchall() == [(None,) * 7] and nulls[0].rowcount == 1
    assert conn.exec("SELECT * FROM kinds WHERE i IS ?", (2**40,)).fetchall() == [row]  # as psycopg reads them
    assert conn.batch([Step("SELECT i FROM kinds WHERE s IS ?", (None,))])[0].fetchall() == [(None,)]


def test_a_batchs_rows_and_counts_are_each_statements_own(conn: PgConn) -> None:
    done = conn.batch(
        [
            Step("INSERT INTO t VALUES (?, ?)", [(1, 1), (2, 2), (3, 3)], many=True),
            Step("UPDATE t SET v = v + 10 WHERE id >= ?", (2,)),
            Step("SELECT id, v FROM t ORDER BY id"),
            Step("DELETE FROM t WHERE id = ?", (99,)),
        ]
    )
    assert [d.rowcount for d in done] == [3, 2, 3, 0]
    assert done[2].fetchall() == [(1, 1), (2, 12), (3, 13)] and done[0].fetchall() == []


def test_a_statement_first_sent_in_a_failed_batch_runs_in_the_next_one(conn: PgConn) -> None:
    # Each statement is prepared on its connection the first time it is sent; one sent after a failure was never
    # prepared (the server skipped it), and is prepared again the next time rather than named and not found.
    conn.exec("INSERT INTO t VALUES (1, 0)")
    later = Step("UPDATE t SET v = v + ? WHERE id = ?", (5, 1))
    for _ in range(2):
        with pytest.raises(Conflict):
            conn.batch([Step("INSERT INTO t VALUES (?, ?)", (1, 1)), later])
    assert conn.batch([later])[0].rowcount == 1
    assert conn.batch([later, Step("INSERT INTO t VALUES (?, ?)", (2, 2))])[0].rowcount == 1
    assert values(conn) == [(1, 10), (2, 2)]


def test_statements_the_server_forgot_are_prepared_again_and_the_batch_runs_once(table: str) -> None:
    # A DEALLOCATE ALL on the connection (a pooler's reset, psycopg's own after a rollback) drops what it prepared:
    # the batch fails before anything of it runs, and is sent again with its statements prepared anew.
    db = OneConn(table)
    try:
        step = Step("INSERT INTO t VALUES (?, ?)", (1, 1))
        db.batch([step])
        db.exec("DEALLOCATE ALL")
        db.batch([Step("INSERT INTO t VALUES (?, ?)", (2, 2)), Step("UPDATE t SET v = v + 1 WHERE id = ?", (1,))])
        with pytest.raises(RelayError), db.tx() as tx:  # psycopg's rollback: no DEALLOCATE ALL of its own now
            tx.exec("INSERT INTO t VALUES (3, 3)")
            tx.exec("SELECT v FROM no_such_table").fetchall()
        assert db.batch([Step("UPDATE t SET v = v + 1 WHERE id = ?", (2,))])[0].rowcount == 1
        assert values(db) == [(1, 2), (2, 3)]
    finally:
        db.close()
