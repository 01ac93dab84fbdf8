"""A job's outputs in the store, in chunks: stdout, stderr, transcript and result, appended and read in pages.

Each append adds rows of at most CHUNK_BYTES (`outputs`: job, stream, seq, byte offset, size, data),
so a 256 MB output is written and read a chunk at a time and no process holds more than a page and
a chunk of it in memory. Both backends keep the same table; the statements are store/body.py's, the
checks and the page arithmetic here.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from relay.errors import ErrorCode, RelayError

STREAMS = ("stdout", "stderr", "transcript", "result")
# The largest row of `outputs`: big enough that a 256 MB output is 256 rows, small enough to hold one.
CHUNK_BYTES = 1 << 20
# The largest page `read_output_page` returns at once.
MAX_PAGE_BYTES = 16 << 20


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


def sizes(rows: Sequence[Sequence[object]]) -> dict[str, int]:
    """Each stream's length from (stream, length) rows: 0 for a stream with nothing stored yet."""
    found = {str(r[0]): int(str(r[1])) for r in rows}
    return {stream: found.get(stream, 0) for stream in STREAMS}
