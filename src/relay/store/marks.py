"""The audit mark of a front's log, written to the store off the job's path: the newest one, in a thread, paced.

Each audit entry tells the store its seq and hash (`relay audit verify` checks the log's end against the
highest). Written with each entry, that is three more writes a job: on PostgreSQL three round trips, on SQLite
three more commits. A mark is a
lower bound (verify only asks whether the log reaches it), so a mark written a moment later, or one
skipped for a newer one, loses nothing: a job's write takes the newest along (`ride`: one more statement
in its transaction, no round trip), this thread writes one that waited MARK_PACE_S with no write to take
it (a front gone idle), `flush` writes the newest now (a worker stopping), and `close` writes the last one
before the store closes.
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from relay.audit import AuditLog

logger = logging.getLogger("relay.audit")

T = TypeVar("T")

# After a failed write (the server away), the next try waits this long.
RETRY_S = 1.0
# How long `close` waits for the last mark to be written.
CLOSE_WAIT_S = 5.0
# How long a mark waits to be written by the thread (a job's write takes it along meanwhile, and a newer one given
# meanwhile replaces it): a mark read by `relay audit verify` while a front runs is at most this old.
MARK_PACE_S = 1.0
# How long the thread waits for more once nothing is left to write, before it ends (the next `put` starts another):
# a thread that never ended would hold its store, and the store's connection, for the life of the process.
LINGER_S = 5.0

# Every Behind with something that may still wait to be written, for the flush at the process's exit (weakly: an
# object no one holds any more is not kept for it).
_live: weakref.WeakSet[Behind[Any]] = weakref.WeakSet()


def _flush_all() -> None:
    """At exit: what each Behind still holds written (a process that ends without closing its store: a CLI command)."""
    for behind in list(_live):
        behind.flush()


atexit.register(_flush_all)


class Behind(Generic[T]):
    """What `put` is given, handed to `write` in a thread of its own: started by the first `put`, tried again
    every RETRY_S while the server is away, and written before `close` returns (it waits up to CLOSE_WAIT_S).

    A subclass says how a put joins what waits (`_add`), whether anything waits (`_ready`), what one write
    takes (`_take`) and how a failed write's items wait again (`_give_back`), all four under the lock, and
    what a failed write logs (`_warn`).
    """

    name = "relay-behind"
    pace_s = 0.0  # how long what is given waits before it is written

    def __init__(self, write: Callable[[T], None]) -> None:
        self._write = write
        self._cv = threading.Condition()
        self._closed = False
        self._hurry = False  # a flush waits: the pace does not
        self._writing = False
        self._idle = True  # the thread waits for something to write (not out its pace)
        self._thread: threading.Thread | None = None

    def _add(self, seq: int, line_hash: str) -> None:
        raise NotImplementedError

    def _ready(self) -> bool:
        raise NotImplementedError

    def _take(self) -> T:
        raise NotImplementedError

    def _give_back(self, taken: T) -> None:
        raise NotImplementedError

    def _warn(self, taken: T, exc: Exception) -> None:
        raise NotImplementedError

    def put(self, seq: int, line_hash: str) -> None:
        with self._cv:
            self._add(seq, line_hash)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
                _live.add(self)
            if self._idle:  # waiting out its pace, the thread needs no wake: what it waits for is not a put
                self._cv.notify()

    def flush(self) -> None:
        """Write what is waiting now, whatever the pace (waiting up to CLOSE_WAIT_S for it)."""
        with self._cv:
            if self._thread is None:
                return
            self._hurry = True
            self._cv.notify_all()
            self._cv.wait_for(lambda: not (self._ready() or self._writing), CLOSE_WAIT_S)
            self._hurry = False

    def close(self) -> None:
        """Write what is still waiting (waiting up to CLOSE_WAIT_S), then stop."""
        with self._cv:
            self._closed = True
            self._cv.notify()
            thread = self._thread
        if thread is not None:
            thread.join(CLOSE_WAIT_S)

    def _run(self) -> None:
        while True:
            with self._cv:
                self._idle = True
                self._cv.wait_for(lambda: self._ready() or self._closed, LINGER_S)
                self._idle = False
                if not self._ready():  # closed, or nothing given for a while: the next put starts another thread
                    self._thread = None
                    self._cv.notify_all()
                    return
                if self.pace_s:  # a job's write may take it along meanwhile; a flush or the close cut the wait short
                    self._cv.wait_for(lambda: self._closed or self._hurry or not self._ready(), self.pace_s)
                    if not self._ready():
                        continue
                taken = self._take()
                self._writing = True
            try:
                self._write(taken)
            except Exception as exc:  # what it carries is in the log already; only the store lags: try again
                self._warn(taken, exc)
                with self._cv:
                    self._give_back(taken)
                    self._writing = False
                    self._cv.notify_all()
                    if self._closed:
                        return
                    self._cv.wait(RETRY_S)
                continue
            with self._cv:
                self._writing = False
                self._cv.notify_all()


class LatestMark(Behind[tuple[int, str]]):
    """Hands the newest (seq, hash) given to `put` to `write`, in a thread of its own."""

    name = "relay-audit-mark"
    pace_s = MARK_PACE_S

    def __init__(self, write: Callable[[int, str], None]) -> None:
        super().__init__(lambda mark: write(*mark))
        self._pending: tuple[int, str] | None = None

    def _add(self, seq: int, line_hash: str) -> None:
        if self._pending is None or seq > self._pending[0]:
            self._pending = (seq, line_hash)

    def _ready(self) -> bool:
        return self._pending is not None

    def _take(self) -> tuple[int, str]:
        mark, self._pending = self._pending, None
        assert mark is not None
        return mark

    def _warn(self, taken: tuple[int, str], exc: Exception) -> None:
        logger.warning("audit mark failed: %s", exc)

    def _give_back(self, taken: tuple[int, str]) -> None:
        if self._pending is None:  # a newer mark given meanwhile wins
            self._pending = taken

    def ride(self) -> tuple[int, str] | None:
        """The newest mark not yet written, taken to go with a job's write (`give_back` if that write failed)."""
        with self._cv:
            mark, self._pending = self._pending, None
            return mark

    def give_back(self, mark: tuple[int, str]) -> None:
        """A mark taken by `ride` whose write failed: this thread writes it (unless a newer one waits)."""
        with self._cv:
            self._give_back(mark)
            self._cv.notify()


class Riding:
    """A store's audit marks (mixed into the job store): the newest goes with a job's next write (`_riding_mark`), or
    is written by a LatestMark's thread once it waited MARK_PACE_S with no write to take it."""

    audit: AuditLog
    _marks: LatestMark
    # Whether a mark rides with a one-statement write (PostgreSQL: one statement more in its round trip; SQLite: it
    # would make a transaction of four statements of one autocommit: its marks ride with the job's end).
    _rides_alone = True

    def _mark_audit(self, seq: int, line_hash: str) -> None:
        raise NotImplementedError

    def _start_marks(self) -> None:
        self._marks = LatestMark(self._mark_audit)
        self.audit.marks.append(self._marks.put)

    def _stop_marks(self) -> None:
        """The last mark written (waiting for it a moment), and no more."""
        with suppress(ValueError):
            self.audit.marks.remove(self._marks.put)
        self._marks.close()

    def _riding_mark(self) -> tuple[int, str] | None:
        return self._marks.ride()

    def _mark_back(self, mark: tuple[int, str]) -> None:
        """A riding mark whose transaction failed."""
        self._marks.give_back(mark)

    def flush_marks(self) -> None:
        """Write the newest audit mark now, whatever its pace."""
        self._marks.flush()
