"""Reading a job's output files: incremental line reads while it runs, paged reads afterwards."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

# Bytes read per step; bounds memory however much an agent prints.
READ_CHUNK = 1 << 20


class LineReader:
    """Follows a growing file and yields complete lines (and the tail once the writer is done)."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
        self.offset = offset
        self._partial = b""

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
                    yield raw.decode("utf-8", "replace")
        if final and self._partial:
            tail, self._partial = self._partial, b""
            yield tail.decode("utf-8", "replace")


def file_size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def read_text_page(path: Path, offset: int, limit: int) -> tuple[str, int]:
    """Up to `limit` characters of a UTF-8 file from character `offset`; returns (text, total chars).

    Streams the file so a 20 MB output never sits in memory whole.
    """
    total = 0
    parts: list[str] = []
    wanted_end = offset + limit
    try:
        fh = path.open("r", encoding="utf-8", errors="replace", newline="")
    except FileNotFoundError:
        return "", 0
    with fh:
        while True:
            chunk = fh.read(READ_CHUNK)
            if not chunk:
                break
            start, end = total, total + len(chunk)
            if end > offset and start < wanted_end:
                parts.append(chunk[max(0, offset - start) : max(0, min(len(chunk), wanted_end - start))])
            total = end
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
