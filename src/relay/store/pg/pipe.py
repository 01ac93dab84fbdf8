"""A batch's transaction over libpq's own pipeline: BEGIN, the statements and COMMIT sent with one flush and one
sync, their results read as they come.

psycopg's pipeline looks at the socket after every statement it queues (about ten waits for a job's batch, most of
the client's CPU per round trip); this sends the whole transaction, then waits for its results, with psycopg's own
adapters (`Transformer`) for the values both ways, so the rows and errors are psycopg's. Each statement is prepared
on a connection the first time it runs there (its Parse goes in the same pipeline), up to PREPARED_KEPT per
connection. Every wait has a deadline: a server that does not answer within it costs the connection (closed, so its
pool drops it) and raises STORE_UNAVAILABLE.
"""

from __future__ import annotations

import itertools
import select
import time
import weakref
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import psycopg
from psycopg import abc, pq
from psycopg.adapt import PyFormat, Transformer
from psycopg.pq.abc import PGconn, PGresult

from relay.store.dialect import Rows, Step, pg_is

Conn = psycopg.Connection[tuple[Any, ...]]

# The statements a connection keeps prepared (by text and parameter types); past it, a statement is planned each time.
PREPARED_KEPT = 256

_OK = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK, pq.ExecStatus.EMPTY_QUERY)
_names = itertools.count()
_prepared: weakref.WeakKeyDictionary[Conn, dict[tuple[bytes, tuple[int, ...]], bytes]] = weakref.WeakKeyDictionary()


@lru_cache(maxsize=1024)
def numbered(sql: str) -> bytes:
    """`sql` with `?` marks as libpq takes it: `$1`, `$2`, ... (`IS ?` as `IS NOT DISTINCT FROM`: dialect.pg_is)."""
    parts = pg_is(sql).split("?")
    out = [parts[0]]
    for index, part in enumerate(parts[1:], start=1):
        out.append(f"${index}{part}")
    return "".join(out).encode()


class _Sent:
    """What one step sent, in order: True for a statement's Parse (a result of its own), False for a statement."""

    __slots__ = ("keys", "many", "order")

    def __init__(self, many: bool) -> None:
        self.many = many
        self.order: list[bool] = []
        self.keys: list[tuple[bytes, tuple[int, ...]]] = []  # the statements this batch prepared


def run_one(conn: Conn, step: Step, *, deadline: float) -> Rows:
    """One statement on its own (its own transaction, as with autocommit), one round trip: its rows."""
    return run_batch(conn, [step], deadline=deadline, block=False)[0]


def run_batch(
    conn: Conn, steps: Sequence[Step], *, deadline: float, snapshot: bool = False, block: bool = True
) -> list[Rows]:
    """The steps in one transaction, one round trip; each step's rows (a `many` step's: none, its rows counted).
    A statement's failure is psycopg's error, after the transaction's rollback. (`block=False`: no BEGIN and
    COMMIT, the pipeline's sync ends the statements' implicit transaction.) Statements this connection prepared
    that the server no longer knows (a DEALLOCATE ALL sent on it) are prepared again, and the batch sent again:
    nothing of it ran."""
    try:
        return _run_batch(conn, steps, deadline, snapshot, block)
    except psycopg.errors.InvalidSqlStatementName:
        _prepared.pop(conn, None)
        return _run_batch(conn, steps, deadline, snapshot, block)


def _run_batch(conn: Conn, steps: Sequence[Step], deadline: float, snapshot: bool, block: bool) -> list[Rows]:
    pg = conn.pgconn
    tx: abc.Transformer = Transformer.from_context(conn)
    kept = _prepared.get(conn)
    if kept is None:
        kept = _prepared[conn] = {}
    sent: list[_Sent] = []
    pg.enter_pipeline_mode()
    try:
        if block:
            pg.send_query_params(b"BEGIN ISOLATION LEVEL REPEATABLE READ" if snapshot else b"BEGIN", None)
        sent.extend(_send(pg, tx, kept, step) for step in steps)
        if block:
            pg.send_query_params(b"COMMIT", None)
        pg.pipeline_sync()
        results = _results(pg, deadline)
        pg.exit_pipeline_mode()
    except BaseException:
        conn.close()  # mid-pipeline: unusable, and its pool drops a closed connection
        for step in sent:
            for key in step.keys:
                kept.pop(key, None)
        raise
    return _rows(conn, tx, kept, results, sent, 1 if block else 0)


def _send(pg: PGconn, tx: abc.Transformer, kept: dict[tuple[bytes, tuple[int, ...]], bytes], step: Step) -> _Sent:
    query = numbered(step.sql)
    sent = _Sent(step.many)
    for params in step.params if step.many else (step.params,):
        values = tx.dump_sequence(params, [PyFormat.AUTO] * len(params))
        types, formats = tx.types or (), tx.formats
        key = (query, types)
        name = kept.get(key)
        if name is None and len(kept) < PREPARED_KEPT:
            name = kept[key] = f"relay_{next(_names)}".encode()
            pg.send_prepare(name, query, param_types=types)
            sent.order.append(True)
            sent.keys.append(key)
        if name is None:
            pg.send_query_params(query, values, param_types=types, param_formats=formats)
        else:
            pg.send_query_prepared(name, values, param_formats=formats)
        sent.order.append(False)
    return sent


def _results(pg: PGconn, deadline: float) -> list[PGresult]:
    """Each request's last result, up to the sync: BEGIN's, each Parse's and statement's, COMMIT's."""
    results: list[PGresult] = []
    last: PGresult | None = None
    flushing = True
    while True:
        if flushing:
            flushing = pg.flush() != 0
        _wait(pg, deadline, write=flushing)
        pg.consume_input()
        while not pg.is_busy():
            res = pg.get_result()
            if res is None:  # a request's results end
                if last is not None:
                    results.append(last)
                    last = None
                continue
            if res.status == pq.ExecStatus.PIPELINE_SYNC:
                return results
            last = res


def _wait(pg: PGconn, deadline: float, *, write: bool) -> None:
    left = deadline - time.monotonic()
    poll = select.poll()
    poll.register(pg.socket, select.POLLIN | (select.POLLOUT if write else 0))
    if left <= 0 or not poll.poll(left * 1000):
        raise psycopg.OperationalError(f"no answer from the server within {left:.1f} s")


def _rows(
    conn: Conn,
    tx: abc.Transformer,
    kept: dict[tuple[bytes, tuple[int, ...]], bytes],
    results: list[PGresult],
    sent: list[_Sent],
    at: int,  # the first statement's result (after BEGIN's)
) -> list[Rows]:
    out: list[Rows] = []
    failed: PGresult | None = None
    block = (results[0], results[-1]) if at else ()
    for step in sent:
        ran: list[PGresult] = []
        keys = iter(step.keys)
        for parse in step.order:
            res = results[at]
            at += 1
            if res.status not in _OK:
                failed = failed or res
                if parse:  # never prepared: prepared again next time
                    kept.pop(next(keys), None)
            elif parse:
                next(keys)
            else:
                ran.append(res)
        if failed is not None:
            continue
        if step.many:
            out.append(Rows([], sum(res.command_tuples or 0 for res in ran)))
            continue
        res = ran[-1]
        rows: list[Any] = []
        if res.status == pq.ExecStatus.TUPLES_OK:
            tx.set_pgresult(res)
            rows = tx.load_rows(0, res.ntuples, tuple)
        count = res.command_tuples
        out.append(Rows(rows, count if count is not None else -1))
    failed = failed or next((res for res in block if res.status not in _OK), None)
    if failed is not None:
        if conn.pgconn.transaction_status != pq.TransactionStatus.IDLE:
            conn.rollback()
        if failed.status == pq.ExecStatus.FATAL_ERROR:
            raise psycopg.errors.error_from_result(failed, encoding=conn.info.encoding)
        raise psycopg.OperationalError(f"a statement ended as {pq.ExecStatus(failed.status).name}")
    return out
