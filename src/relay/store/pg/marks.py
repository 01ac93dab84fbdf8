"""The audit mark of a front's log, written to PostgreSQL off the job's path: the newest one, in a thread.

Each audit entry tells the store its seq and hash (`relay audit verify` checks the log's end against the
highest). On SQLite that is a local write; on PostgreSQL it is a round trip, three per job, each on the
way to the caller's answer. A mark is a lower bound (verify only asks whether the log reaches it), so a
mark written a moment later, or one skipped for a newer one, loses nothing: this thread writes the
newest mark it was given, and `close` writes the last one before the store closes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

logger = logging.getLogger("relay.audit")

# After a failed write (the server away), the next try waits this long.
RETRY_S = 1.0
# How long `close` waits for the last mark to be written.
CLOSE_WAIT_S = 5.0


class LatestMark:
    """Hands the newest (seq, hash) given to `put` to `write`, in a thread of its own."""

    def __init__(self, write: Callable[[int, str], None]) -> None:
        self._write = write
        self._cv = threading.Condition()
        self._pending: tuple[int, str] | None = None
        self._closed = False
        self._thread: threading.Thread | None = None

    def put(self, seq: int, line_hash: str) -> None:
        with self._cv:
            if self._pending is None or seq > self._pending[0]:
                self._pending = (seq, line_hash)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="relay-audit-mark", daemon=True)
                self._thread.start()
            self._cv.notify()

    def close(self) -> None:
        """Write the last mark given (waiting up to CLOSE_WAIT_S), then stop."""
        with self._cv:
            self._closed = True
            self._cv.notify()
            thread = self._thread
        if thread is not None:
            thread.join(CLOSE_WAIT_S)

    def _run(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._pending is not None or self._closed)
                mark, self._pending = self._pending, None
                if mark is None:
                    return  # closed, and nothing left to write
            try:
                self._write(*mark)
            except Exception as exc:  # the entry is in the log; only the store's count lags: try again
                logger.warning("audit mark failed: %s", exc)
                with self._cv:
                    if self._pending is None:
                        self._pending = mark
                    if self._closed:
                        return
                    self._cv.wait(RETRY_S)
