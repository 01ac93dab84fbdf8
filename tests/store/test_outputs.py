"""A large output in the store: appended as it comes and paged back, with memory that stays flat (both backends)."""

from __future__ import annotations

import hashlib
import threading
import tracemalloc
from collections.abc import Iterator

from relay.store import JobStore
from relay.store.outputs import CHUNK_BYTES

OUTPUT_BYTES = 64 << 20
PIECE_BYTES = 1 << 20
PAGE_BYTES = 4 << 20
# What appending and paging 64 MB may hold at once: a page, its parts, a piece and a chunk (far below 64 MB).
MEMORY_BOUND = 24 << 20


def output_pieces() -> Iterator[bytes]:
    """64 MB of output, made a piece at a time (no piece is like the one before it)."""
    block = hashlib.sha256(b"relay").digest() * (PIECE_BYTES // 32)
    for i in range(OUTPUT_BYTES // PIECE_BYTES):
        yield i.to_bytes(4, "big") + block[4:]


def test_a_64_mb_output_is_appended_and_paged_back_whole_with_bounded_memory(store: JobStore) -> None:
    store.insert_job("big", "claude", "cli", {"prompt": "p"}, None, "/w")
    written = hashlib.sha256()
    tracemalloc.start()
    try:
        for piece in output_pieces():
            written.update(piece)
            store.append_output("big", "stdout", piece)
        read = hashlib.sha256()
        offset, total = 0, None
        while total is None or offset < total:
            page, total = store.read_output_page("big", "stdout", offset, PAGE_BYTES)
            assert page, f"an empty page at {offset} of {total}"
            read.update(page)
            offset += len(page)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (total, offset) == (OUTPUT_BYTES, OUTPUT_BYTES)
    assert read.hexdigest() == written.hexdigest()
    assert peak < MEMORY_BOUND, f"peak {peak / 2**20:.1f} MiB while moving {OUTPUT_BYTES >> 20} MiB"


def test_one_large_append_is_cut_into_chunks_and_read_back_across_them(store: JobStore) -> None:
    store.insert_job("j", "claude", "cli", {"prompt": "p"}, None, "/w")
    data = bytes(range(251)) * ((3 * CHUNK_BYTES) // 251 + 1)
    assert store.append_output("j", "transcript", data) == len(data)
    at = CHUNK_BYTES - 100
    assert store.read_output_page("j", "transcript", at, 2 * CHUNK_BYTES + 200) == (
        data[at : at + 2 * CHUNK_BYTES + 200],
        len(data),
    )


def test_appenders_racing_on_one_stream_leave_it_whole_and_in_order(store: JobStore) -> None:
    store.insert_job("j", "claude", "cli", {"prompt": "p"}, None, "/w")
    errors: list[BaseException] = []

    def append(tag: bytes) -> None:
        try:
            for _ in range(20):
                store.append_output("j", "stderr", tag * 1000)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=append, args=(bytes([65 + i]),)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    data, total = store.read_output_page("j", "stderr", 0, 1 << 20)
    assert total == len(data) == 4 * 20 * 1000
    # every append landed whole: the stream is runs of 1000 equal bytes
    assert all(len(set(data[i : i + 1000])) == 1 for i in range(0, total, 1000))
