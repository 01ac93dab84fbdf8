"""The audit log: `RELAY_HOME/audit.jsonl`, append-only, one line per job state change, chained by SHA-256.

Each line is canonical JSON ending in its own hash: `{..., "prev": P, "seq": N, ...,"hash":"H"}` where
`H = sha256(the line's text without the hash field)` and `P = sha256(the whole previous line)`
(`GENESIS` for the first). `seq` counts lines from 1. `audit.head` holds the seq and hash of the last
line, so lines cut off the end are found too. Writers in several processes take an exclusive
`flock` on the log while they append, so the chain stays one chain.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from relay.osfiles import lock, private_home, write_all

LOG_FILE = "audit.jsonl"
HEAD_FILE = "audit.head"
GENESIS = "0" * 64
# audit.head is one fixed-size record, rewritten in place under the log's lock.
HEAD_RECORD_BYTES = 128
# Read this much of the log's end at a time when looking for its last line.
TAIL_CHUNK = 64 * 1024
# Failed appends remembered (and reported in a gap entry by the next append that works).
MAX_REMEMBERED_FAILURES = 100

_SEALED = re.compile(rb'^(\{.*),"hash":"([0-9a-f]{64})"\}$', re.DOTALL)

logger = logging.getLogger("relay.audit")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def seal(body: dict[str, Any]) -> bytes:
    """One log line (without its newline): the canonical JSON of `body` plus its own hash."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode("utf-8")
    return text[:-1] + b',"hash":"' + sha256(text).encode() + b'"}'


def unseal(line: bytes) -> dict[str, Any] | None:
    """The entry a line holds, or None when the line is not a sealed entry or its hash does not match."""
    match = _SEALED.match(line)
    if match is None:
        return None
    body = match.group(1) + b"}"
    if sha256(body) != match.group(2).decode():
        return None
    try:
        entry = json.loads(body)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None  # pyright: ignore[reportUnknownVariableType]


def parse_loose(line: bytes) -> dict[str, Any] | None:
    """The JSON object of a line whether or not its hash matches (for views and `show`)."""
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None  # pyright: ignore[reportUnknownVariableType]


class Renderer(Protocol):
    """What renders the log's views (IAC.md, CONTEXT.md): render now, or wait for a pending render."""

    def render(self, now: float | None = None) -> None: ...

    def wait_idle(self, timeout: float) -> bool: ...


@dataclass
class _Tail:
    """The log's end as this process last saw it: its size, the last seq, the hash of the last line."""

    size: int
    seq: int
    line_hash: str


@dataclass
class AuditLog:
    """Appends entries to one RELAY_HOME's audit log; `record` never raises (failures are reported)."""

    home: Path
    listeners: list[Callable[[], None]] = field(default_factory=lambda: [])
    # Told the seq and hash of each entry once it is written (the store keeps the highest: `audit_mark`).
    marks: list[Callable[[int, str], None]] = field(default_factory=lambda: [])
    failures: list[str] = field(default_factory=lambda: [])
    views: Renderer | None = None
    _mu: threading.Lock = field(default_factory=threading.Lock)
    _tail: _Tail | None = None
    _lost: int = 0

    @property
    def path(self) -> Path:
        return self.home / LOG_FILE

    @property
    def head_path(self) -> Path:
        return self.home / HEAD_FILE

    def record(self, event: str, job_id: str | None, data: dict[str, Any]) -> bool:
        """Append an entry; a failure is logged and remembered, and the next append that works notes the gap."""
        try:
            with self._mu:
                if self._lost:
                    gap = {"lost": self._lost, "errors": self.failures[-5:]}
                    self._append("audit.gap", None, gap)
                    self._lost = 0
                self._append(event, job_id, data)
        except Exception as exc:  # the job must go on whatever happens to its audit line
            message = f"{event} of job {job_id}: {type(exc).__name__}: {exc}"
            logger.warning("audit log append failed (%s); the job goes on", message)
            self._lost += 1
            self.failures.append(message)
            del self.failures[:-MAX_REMEMBERED_FAILURES]
            return False
        for listener in list(self.listeners):
            try:
                listener()
            except Exception as exc:
                logger.warning("audit listener failed: %s", exc)
        return True

    def append(self, event: str, job_id: str | None, data: dict[str, Any]) -> dict[str, Any]:
        """Append an entry and return it; raises OSError when the log cannot be written."""
        with self._mu:
            return self._append(event, job_id, data)

    def _append(self, event: str, job_id: str | None, data: dict[str, Any]) -> dict[str, Any]:
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o600)
        except FileNotFoundError:  # no RELAY_HOME yet (or it was removed): make it, once
            private_home(self.home)
            fd = os.open(self.path, flags, 0o600)
        try:
            lock(fd)
            size = os.fstat(fd).st_size
            tail = self._tail if self._tail is not None and self._tail.size == size else _read_tail(fd, size)
            if size and tail.size != size:  # the last line was cut short: close it so the new one stands alone
                os.write(fd, b"\n")
            body: dict[str, Any] = {
                "seq": tail.seq + 1,
                "ts": round(time.time(), 6),
                "event": event,
                "job_id": job_id,
                "data": data,
                "prev": tail.line_hash,
            }
            line = seal(body)
            write_all(fd, line + b"\n")
            line_hash = sha256(line)
            # Under the exclusive lock every writer appends whole lines, so the log now ends here (a size that
            # is somehow off only makes the next append read the tail again).
            self._tail = _Tail(tail.size + len(line) + 1, tail.seq + 1, line_hash)
            _write_head(self.head_path, tail.seq + 1, line_hash)
            for mark in list(self.marks):
                try:
                    mark(tail.seq + 1, line_hash)
                except Exception as exc:  # the entry is written; only the count kept elsewhere lags
                    logger.warning("audit mark failed: %s", exc)
            return body
        finally:
            os.close(fd)  # closing releases the lock


def _write_head(path: Path, seq: int, line_hash: str) -> None:
    """Overwrite the head record in place: one small write at offset 0 (a rename would cost a flush on ext4)."""
    record = json.dumps({"seq": seq, "hash": line_hash}).encode().ljust(HEAD_RECORD_BYTES - 1) + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.pwrite(fd, record, 0)
        if os.fstat(fd).st_size > len(record):
            os.ftruncate(fd, len(record))
    finally:
        os.close(fd)


def read_head(home: Path) -> tuple[int, str] | None:
    try:
        raw = json.loads((home / HEAD_FILE).read_text(encoding="utf-8"))
        return int(raw["seq"]), str(raw["hash"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _read_tail(fd: int, size: int) -> _Tail:
    """The log's last line (its seq and hash), reading backwards from `size`.

    A last line cut short (no newline: a writer died mid-append) is still the previous line of the
    next entry; the returned size then counts the newline the next append writes first.
    """
    if size == 0:
        return _Tail(0, 0, GENESIS)
    data, pos = b"", size
    while True:
        start = max(0, pos - TAIL_CHUNK)
        data = os.pread(fd, pos - start, start) + data
        pos = start
        if pos == 0 or data.count(b"\n") >= 2:
            break
    clean = data.endswith(b"\n")
    last = (data[:-1] if clean else data).split(b"\n")[-1]
    entry = parse_loose(last) if clean else None
    seq = entry.get("seq") if entry else None
    if not isinstance(seq, int):
        whole = os.pread(fd, size, 0)
        seq = whole.count(b"\n") + (0 if clean else 1)  # an intact log's seq is the line number
    return _Tail(size if clean else size + 1, seq, sha256(last))


def iter_lines(path: Path) -> Iterator[bytes]:
    """The log's lines (without newlines), a cut-short last line included."""
    with contextlib.suppress(FileNotFoundError), path.open("rb") as fh:
        for raw in fh:
            yield raw[:-1] if raw.endswith(b"\n") else raw
