"""A job's outputs in the store, in chunks: stdout, stderr, transcript and result, appended and read in pages.

Each append adds rows of at most CHUNK_BYTES (`outputs`: job, stream, seq, byte offset, size, data),
so a 256 MB output is written and read a chunk at a time and no process holds more than a page and
a chunk of it in memory. Both backends keep the same table and the same page arithmetic; this module
holds the SQLite side and what the two share.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

from relay.errors import ErrorCode, RelayError

STREAMS = ("stdout", "stderr", "transcript", "result")
# The largest row of `outputs`: big enough that a 256 MB output is 256 rows, small enough to hold one.
CHUNK_BYTES = 1 << 20
# The largest page `read_output_page` returns at once.
MAX_PAGE_BYTES = 16 << 20

# The last chunk of a stream: the next seq, and the stream's length so far.
LAST_CHUNK = "SELECT seq + 1, byte_offset + size FROM outputs WHERE job_id=? AND stream=? ORDER BY seq DESC LIMIT 1"
INSERT_CHUNK = "INSERT INTO outputs (job_id, stream, seq, byte_offset, size, data) VALUES (?, ?, ?, ?, ?, ?)"
# The part of each chunk inside [start, end): chunks that end after `start` and begin before `end` (and so
# after `start - CHUNK_BYTES`: the bound the offset index seeks to). Parameters: start, end, start, job_id,
# stream, start, start - CHUNK_BYTES, end.
READ_PAGE = (
    "SELECT substr(data, max(? - byte_offset, 0) + 1, min(byte_offset + size, ?) - max(byte_offset, ?))"
    " FROM outputs WHERE job_id=? AND stream=? AND byte_offset + size > ? AND byte_offset > ? AND byte_offset < ?"
    " ORDER BY byte_offset"
)
TOTAL = "SELECT COALESCE(MAX(byte_offset + size), 0) FROM outputs WHERE job_id=? AND stream=?"
# Every stream's length so far (the streams with no chunk yet are left out).
SIZES = "SELECT stream, MAX(byte_offset + size) FROM outputs WHERE job_id=? GROUP BY stream"


def check_stream(stream: str) -> None:
    if stream not in STREAMS:
        raise RelayError(
            ErrorCode.INVALID_ARGUMENT,
            f"unknown output stream {stream!r}",
            f"use one of: {', '.join(STREAMS)}",
        )


def check_page(offset: int, limit: int) -> None:
    if offset < 0 or limit < 0:
        raise RelayError(
            ErrorCode.INVALID_ARGUMENT,
            f"a page needs offset >= 0 and limit >= 0 (got offset={offset}, limit={limit})",
            "start at offset 0; the total in each answer says where the output ends",
        )


def pieces(data: bytes, total: int) -> Iterator[tuple[int, bytes]]:
    """`data` cut into chunks of at most CHUNK_BYTES, each with its byte offset in the stream (after `total`)."""
    view = memoryview(data)
    for at in range(0, len(view), CHUNK_BYTES):
        yield total + at, bytes(view[at : at + CHUNK_BYTES])


def page_end(offset: int, limit: int) -> int:
    """Where a page that starts at `offset` ends (exclusive), bounded by MAX_PAGE_BYTES."""
    return offset + min(limit, MAX_PAGE_BYTES)


# The job is still under the claim of an epoch (the one parameter besides the job's id): an append carrying it lands.
UNDER_EPOCH = "SELECT 1 FROM jobs WHERE id=? AND epoch=? AND status IN ('queued', 'running')"


def append(db: sqlite3.Connection, job_id: str, stream: str, data: bytes, epoch: int | None = None) -> int:
    """Append `data` to a stream of a job in one transaction; the stream's length after it. Under `epoch`: only
    while the job's claim is still that one (else nothing is appended and -1 is returned)."""
    check_stream(stream)
    db.execute("BEGIN IMMEDIATE")
    try:
        if epoch is not None and db.execute(UNDER_EPOCH, (job_id, epoch)).fetchone() is None:
            db.execute("ROLLBACK")
            return -1
        row = db.execute(LAST_CHUNK, (job_id, stream)).fetchone()
        seq, total = (int(row[0]), int(row[1])) if row else (0, 0)
        for at, piece in pieces(data, total):
            db.execute(INSERT_CHUNK, (job_id, stream, seq, at, len(piece), piece))
            seq += 1
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return total + len(data)


def read_page(db: sqlite3.Connection, job_id: str, stream: str, offset: int, limit: int) -> tuple[bytes, int]:
    """Up to `limit` bytes of a stream from `offset` (at most MAX_PAGE_BYTES), and the stream's length."""
    check_stream(stream)
    check_page(offset, limit)
    end = page_end(offset, limit)
    db.execute("BEGIN")  # one snapshot for the page and the total
    try:
        low = offset - CHUNK_BYTES
        parts = [bytes(r[0]) for r in db.execute(READ_PAGE, (offset, end, offset, job_id, stream, offset, low, end))]
        total = int(db.execute(TOTAL, (job_id, stream)).fetchone()[0])
    finally:
        db.execute("COMMIT")
    return b"".join(parts), total


def sizes(rows: list[tuple[object, ...]]) -> dict[str, int]:
    """Each stream's length from the rows of SIZES: 0 for a stream with nothing stored yet."""
    found = {str(r[0]): int(str(r[1])) for r in rows}
    return {stream: found.get(stream, 0) for stream in STREAMS}
