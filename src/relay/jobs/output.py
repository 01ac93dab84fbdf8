"""Reading a job's output files: incremental line reads while it runs, paged reads afterwards."""

from __future__ import annotations

import codecs
import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import BinaryIO

from relay.audit import KEEP_EACH_END, MAX_TEXT_CHARS, bounded_ends
from relay.osfiles import write_all
from relay.secrets import redact_pieces

# Bytes read per step; bounds memory however much an agent prints.
READ_CHUNK = 1 << 20
# Bytes read per step when a text too large to hold is kept (`keep_text_file`).
KEEP_CHUNK = 1 << 20
# A line longer than this reaches the parser in pieces of this size (each counted in
# `LineReader.split_pieces`), never whole: one 64 MB line must not mean 64 MB in memory.
MAX_LINE_BYTES = 1 << 20


class LineReader:
    """Follows a growing file and yields complete lines (and the tail once the writer is done)."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
        self.offset = offset
        self._partial = b""
        # How many pieces of over-long lines were handed on (a line of 3.5 MB counts 3, its end is a line).
        self.split_pieces = 0

    def read(self, final: bool = False) -> Iterator[str]:
        try:
            fh = self.path.open("rb")
        except FileNotFoundError:
            return
        with fh:
            fh.seek(self.offset)
            while True:
                chunk = fh.read(READ_CHUNK)
                if not chunk:
                    break
                self.offset += len(chunk)
                data = self._partial + chunk
                lines = data.split(b"\n")
                self._partial = lines.pop()
                for raw in lines:
                    yield from self._pieces(raw, whole=True)
                self._partial = yield from self._pieces(self._partial, whole=False)
        if final and self._partial:
            tail, self._partial = self._partial, b""
            yield tail.decode("utf-8", "replace")

    def _pieces(self, data: bytes, *, whole: bool) -> Generator[str, None, bytes]:
        """Yield `data` cut in MAX_LINE_BYTES pieces on UTF-8 character boundaries; return the rest.

        `whole`: data is a complete line, so its last piece is yielded too (and the rest is empty).
        """
        while len(data) > MAX_LINE_BYTES:
            cut = MAX_LINE_BYTES
            while cut > MAX_LINE_BYTES - 4 and (data[cut] & 0xC0) == 0x80:  # never before a continuation byte
                cut -= 1
            self.split_pieces += 1
            yield data[:cut].decode("utf-8", "replace")
            data = data[cut:]
        if whole:
            yield data.decode("utf-8", "replace")
            return b""
        return data


def write_bytes(path: Path, data: bytes, *, append: bool) -> None:
    """Write (or append) `data` with one descriptor and no text layer: a job's result and transcript."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(path, flags, 0o666)
    try:
        write_all(fd, data)
    finally:
        os.close(fd)


# Per file (path, size, mtime): (character, byte) positions at chunk boundaries and the total
# character count, so paging through a large finished output reads each page, not the whole file.
_INDEX: dict[tuple[str, int, int], tuple[list[tuple[int, int]], int]] = {}
_INDEX_MAX = 64


def _char_index(path: Path, fh: BinaryIO, size: int, mtime_ns: int) -> tuple[list[tuple[int, int]], int]:
    key = (str(path), size, mtime_ns)
    cached = _INDEX.get(key)
    if cached is not None:
        return cached
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    checkpoints: list[tuple[int, int]] = [(0, 0)]
    chars = consumed = 0
    fh.seek(0)
    while True:
        chunk = fh.read(READ_CHUNK)
        if not chunk:
            break
        consumed += len(chunk)
        chars += len(decoder.decode(chunk))
        pending = len(decoder.getstate()[0])
        checkpoints.append((chars, consumed - pending))
    chars += len(decoder.decode(b"", final=True))
    if len(_INDEX) >= _INDEX_MAX:
        _INDEX.pop(next(iter(_INDEX)))
    _INDEX[key] = (checkpoints, chars)
    return checkpoints, chars


def read_text_page(path: Path, offset: int, limit: int) -> tuple[str, int]:
    """Up to `limit` characters of a UTF-8 file from character `offset`; returns (text, total chars).

    Streams the file so a 20 MB output never sits in memory whole, and starts each page from the
    nearest indexed position instead of the top of the file.
    """
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        return "", 0
    with fh:
        stat = os.fstat(fh.fileno())
        checkpoints, total = _char_index(path, fh, stat.st_size, stat.st_mtime_ns)
        start_chars, start_bytes = max((c for c in checkpoints if c[0] <= offset), default=(0, 0))
        fh.seek(start_bytes)
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        skip = offset - start_chars
        parts: list[str] = []
        wanted = limit
        while wanted > 0:
            chunk = fh.read(READ_CHUNK)
            text = decoder.decode(chunk, final=not chunk)
            if skip:
                dropped = min(skip, len(text))
                text, skip = text[dropped:], skip - dropped
            parts.append(text[:wanted])
            wanted -= len(parts[-1])
            if not chunk:
                break
    return "".join(parts), total


def read_bytes_page(path: Path, offset: int, limit: int) -> tuple[bytes, int]:
    """Up to `limit` bytes from byte `offset`; returns (bytes, total size)."""
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(min(offset, size))
            return fh.read(limit), size
    except FileNotFoundError:
        return b"", 0


def keep_text_file(src: Path, dst: Path, secrets: tuple[str, ...]) -> tuple[int, str]:
    """Write the UTF-8 text of `src` to `dst` redacted, a window at a time, and remove `src`.

    Returns the text's length in characters and the audit log's view of it (`bounded`).
    """
    decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def pieces() -> Iterator[str]:
        with src.open("rb") as fh:
            while chunk := fh.read(KEEP_CHUNK):
                yield decoder.decode(chunk)
        yield decoder.decode(b"", final=True)

    chars, head, tail = 0, "", ""
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    try:
        for text in redact_pieces(pieces(), secrets):
            write_all(fd, text.encode("utf-8", "replace"))
            chars += len(text)
            if len(head) < MAX_TEXT_CHARS:
                head += text[: MAX_TEXT_CHARS - len(head)]
            tail = (tail + text[-KEEP_EACH_END:])[-KEEP_EACH_END:]
    finally:
        os.close(fd)
    src.unlink(missing_ok=True)
    return chars, head if chars <= MAX_TEXT_CHARS else bounded_ends(head[:KEEP_EACH_END], tail, chars)
