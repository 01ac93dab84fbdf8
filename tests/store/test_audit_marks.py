"""The audit mark on PostgreSQL (store/marks.py): written off the job's path, paced, and current when asked."""

from __future__ import annotations

import threading
import time
import weakref
from pathlib import Path

import pytest

from relay.audit import open_audit, read_head
from relay.store.marks import MARK_PACE_S, LatestMark
from relay.store.pg.store import PgStore, audit_expectation

# Far below the pace: a mark given now is not written within it, however the machine is loaded.
WITHIN_PACE_S = MARK_PACE_S / 3
# How long a write that is due may take to come.
DUE_S = 5.0


class Written:
    def __init__(self) -> None:
        self.marks: list[int] = []
        self.came = threading.Event()

    def __call__(self, seq: int, line_hash: str) -> None:
        self.marks.append(seq)
        self.came.set()


def test_marks_given_within_the_pace_are_written_once_and_a_flush_writes_the_newest_at_once() -> None:
    written = Written()
    marks = LatestMark(written)
    try:
        marks.put(1, "h1")
        assert written.came.wait(MARK_PACE_S + DUE_S)
        written.came.clear()
        marks.put(2, "h2")
        marks.put(3, "h3")
        assert not written.came.wait(WITHIN_PACE_S)  # a job's later entries wait for the pace
        marks.flush()  # a worker stopping: the newest now
        assert written.marks == [1, 3]
    finally:
        marks.close()


def test_the_newest_mark_is_written_when_the_pace_has_passed_and_at_close() -> None:
    written = Written()
    marks = LatestMark(written)
    marks.put(1, "h1")
    assert written.came.wait(MARK_PACE_S + DUE_S)
    written.came.clear()
    marks.put(2, "h2")
    assert written.came.wait(MARK_PACE_S + DUE_S)  # not lost: written once the pace has passed
    marks.put(3, "h3")
    marks.close()
    assert written.marks == [1, 2, 3]


def test_a_jobs_write_carries_the_newest_audit_mark_to_postgresql(pg_url: str, relay_home: Path) -> None:
    store = PgStore(pg_url, open_audit(relay_home))
    try:
        store.insert_job("a", "claude", "cli", {"prompt": "p"}, None, "/w")
        store.flush_marks()  # the mark of `queued a` written: the next one waits for the pace
        assert audit_expectation(pg_url, relay_home).mark == read_head(relay_home)
        store.finish_job("a", "cancelled", exit_code=None, result=None, error=None, session_id=None, model=None)
        ended = read_head(relay_home)
        store.insert_job("b", "claude", "cli", {"prompt": "p"}, None, "/w")  # takes `cancelled a`'s mark along
        assert audit_expectation(pg_url, relay_home).mark == ended
    finally:
        store.close()
    assert audit_expectation(pg_url, relay_home).mark == read_head(relay_home)  # `queued b`'s: written at close


def test_sqlite_stores_left_open_by_their_callers_are_let_go_once_their_marks_are_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A store nobody closes (a test's, a short command's) must not be held by its marks' thread for the life of the
    # process: with its connection it would hold a file descriptor, and a process's descriptors run out.
    import gc
    import os

    from relay.store import marks
    from relay.store.db import Store

    monkeypatch.setattr(marks, "MARK_PACE_S", 0.01)
    monkeypatch.setattr(marks.LatestMark, "pace_s", 0.01)
    monkeypatch.setattr(marks, "LINGER_S", 0.05)
    fds_before = len(os.listdir("/proc/self/fd"))
    seen: list[weakref.ref[Store]] = []
    for i in range(40):
        store = Store(tmp_path / f"h{i}" / "relay.db")
        store.audit.record("queued", f"job{i}", {"n": i})  # a mark to write: the thread starts
        seen.append(weakref.ref(store))
        del store
    deadline = time.monotonic() + DUE_S
    while time.monotonic() < deadline and any(ref() is not None for ref in seen):
        gc.collect()
        time.sleep(0.05)
    assert [ref for ref in seen if ref() is not None] == []
    assert len(os.listdir("/proc/self/fd")) <= fds_before + 2
    assert not [t for t in threading.enumerate() if t.name == marks.LatestMark.name]
