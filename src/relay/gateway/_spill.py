"""Downstream stdout lines too large to hold: written to a file as they arrive, read back as a stream.

A line of more than the result cap's worth of bytes is not gathered in memory: the transport writes
it to a file in the gateway's folder (`Spiller.open`). Once it has ended, `Spiller.read` scans it
(`_scan.py`): a tool result's text goes to a second file, and the session gets a result holding only
its first `cap` characters, whose `_meta` names a token; `claim` turns that token back into the file
(relay keeps it as a job's output, paged with `job_result`). Memory stays about one cap, whatever the
line's length. A line that turns out small enough, or is not a tool result (a long tools/list, an
error), is parsed whole as before; one that is not JSON is skipped like any broken line, from its
first and last characters. Unclaimed files (a call that timed out) are removed past `MAX_UNCLAIMED`
and when the connection closes; the folders of relay processes that ended without closing (`<pid>-<server>`)
when the next connection is made.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import anyio
import mcp_types as types
from mcp.shared.message import SessionMessage
from mcp.types import CallToolResult

from relay.gateway._scan import NotJson, TextOut, scan_line
from relay.memory import release_freed_memory

# The `_meta` key of a capped result: the token that claims the file holding the whole of it.
SPILL_META = "relay/spilled"
# A line whose content fits in the cap is still parsed whole if it is at most this many caps of bytes
# (escapes make a line longer than its text: six bytes for a `\uXXXX`).
FIT_FACTOR = 8
# Results kept for a call that never claimed them (it timed out): the oldest beyond this are removed.
MAX_UNCLAIMED = 8
# How much of the start and end of a spilled line that is not JSON the skip note shows (ids are looked
# for in a line's first and last characters).
ENDS_CHARS = 256


def parse(line: bytes | bytearray) -> SessionMessage | Exception:
    """One stdout line as a message, or the error that says why it is not one (the session skips it)."""
    try:
        return SessionMessage(
            types.jsonrpc_message_adapter.validate_json(line.decode("utf-8", "replace"), by_name=False)
        )
    except ValueError as exc:
        return exc


@dataclass(frozen=True)
class Spilled:
    """A tool result too large to hold: the whole of it as text in `path`, `total_chars` long."""

    path: Path
    total_chars: int


class UnreadableLine(ValueError):
    """A spilled line that is not JSON; `line` is its start and its end."""

    def __init__(self, line: str, reason: str) -> None:
        super().__init__(reason)
        self.line = line


def _private(path: Path) -> BinaryIO:
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600), "wb")


class Spiller:
    """The spilled lines and kept results of one downstream connection, in a folder of their own."""

    def __init__(self, folder: Path, cap: int) -> None:
        self.folder = folder
        self.cap = cap
        _sweep(folder.parent)
        self._kept: OrderedDict[str, Spilled] = OrderedDict()
        self._lock = threading.Lock()  # `read` runs in a worker thread, `claim` in the event loop

    @property
    def threshold(self) -> int:
        """A line longer than this many bytes is spilled."""
        return self.cap

    def open(self) -> tuple[Path, BinaryIO]:
        """A new private file for a line that has grown past the threshold."""
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self.folder / f"line-{secrets.token_hex(8)}.jsonl"
        return path, _private(path)

    def read(self, line: Path) -> SessionMessage | Exception:
        """The spilled line as the session's message (a capped tool result, or the line parsed whole); removes it."""
        token = secrets.token_hex(16)
        text = self.folder / f"{token}.txt"
        try:
            with _private(text) as fh:
                out = TextOut(fh, self.cap)
                scan = scan_line(line, out)
            if scan.structured is not None and scan.structured[1] - scan.structured[0] > out.chars:
                out = self._structured(line, scan.structured, out, text)
            small = out.chars <= self.cap and scan.size <= FIT_FACTOR * self.cap
            if not scan.tool_result or small:
                text.unlink(missing_ok=True)
                return parse(line.read_bytes())
            self._keep(token, Spilled(text, out.chars))
            result: dict[str, Any] = {
                "content": [{"type": "text", "text": out.head()}],
                "_meta": {SPILL_META: token},
            }
            if scan.is_error:
                result["isError"] = True
            response = types.JSONRPCResponse(jsonrpc="2.0", id=scan.id, result=result)  # pyright: ignore[reportArgumentType]
            return SessionMessage(response)
        except NotJson as exc:
            text.unlink(missing_ok=True)
            return UnreadableLine(_ends(line), str(exc))
        except Exception as exc:  # the disk, or a line no scan foresaw: skipped like any broken line, never fatal
            text.unlink(missing_ok=True)
            return exc
        finally:
            line.unlink(missing_ok=True)
            release_freed_memory()  # the scan's buffers were freed in a worker thread's heap, which keeps them

    def _structured(self, line: Path, span: tuple[int, int], content: TextOut, text: Path) -> TextOut:
        """The structured content as text, when it says more than the content's text (which it usually repeats)."""
        other = text.with_suffix(".json")
        with _private(other) as fh, line.open("rb") as src:
            out = TextOut(fh, self.cap)
            out.copy(src, *span)
        if out.chars > content.chars:
            other.replace(text)
            return out
        other.unlink()
        return content

    def _keep(self, token: str, spilled: Spilled) -> None:
        with self._lock:
            self._kept[token] = spilled
            while len(self._kept) > MAX_UNCLAIMED:
                _, old = self._kept.popitem(last=False)
                old.path.unlink(missing_ok=True)

    def claim(self, result: CallToolResult) -> Spilled | None:
        """The kept whole of a result this connection capped (None for any other result); the caller owns its file."""
        meta = result.meta or {}
        token = meta.get(SPILL_META)
        if not isinstance(token, str):
            return None
        with self._lock:
            return self._kept.pop(token, None)

    def clear(self) -> None:
        """Remove every file not claimed (the connection is closing); a claimed one is its caller's to remove."""
        with self._lock:
            kept, self._kept = list(self._kept.values()), OrderedDict()
        for spilled in kept:
            spilled.path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.folder.rmdir()  # only once empty: a claimed file may still be being kept


class Gathered:
    """One message as its bytes arrive (a stdout line, a websocket message, an HTTP body or SSE data line): in a
    byte buffer, or in a spill file once it outgrows the spiller's threshold. Every transport reads through one,
    so no downstream message over the cap is ever held whole."""

    def __init__(self, spiller: Spiller | None) -> None:
        self._spiller = spiller
        self._pending = bytearray()
        self._spill: tuple[Path, BinaryIO] | None = None
        # Why the spill file of this message could not be written (the disk filled): the message is skipped.
        self._lost: OSError | None = None

    @property
    def spilled(self) -> bool:
        """The message so far went to a file (or was lost trying to)."""
        return self._spill is not None or self._lost is not None

    def add(self, data: bytes | bytearray | memoryview) -> None:
        if self._lost is not None or not data:
            return
        try:
            if self._spill is not None:
                self._spill[1].write(data)
                return
            self._pending += data
            if self._spiller is not None and len(self._pending) > self._spiller.threshold:
                self._spill = self._spiller.open()
                self._spill[1].write(self._pending)
                self._pending = bytearray()
        except OSError as exc:
            self.drop()
            self._lost = exc

    def take(self) -> bytearray:
        """The bytes of a message that was not spilled; the next message starts empty."""
        pending, self._pending = self._pending, bytearray()
        return pending

    async def message(self) -> SessionMessage | Exception:
        """The message now ended, as the session's message; the next one starts empty."""
        lost, self._lost = self._lost, None
        if lost is not None:
            return lost
        if self._spill is None or self._spiller is None:
            return parse(self.take())
        (path, fh), self._spill = self._spill, None
        try:
            fh.close()
        except OSError as exc:
            path.unlink(missing_ok=True)
            return exc
        return await anyio.to_thread.run_sync(self._spiller.read, path)

    def drop(self) -> None:
        """Forget the message so far (its spill file goes): the stream ended inside it, or its file could not be written."""
        self._pending = bytearray()
        if self._spill is not None:
            path, fh = self._spill
            self._spill = None
            with contextlib.suppress(OSError):
                fh.close()
            path.unlink(missing_ok=True)


def encoded(message: SessionMessage | Exception) -> bytes:
    """A message read from a spill, as bytes again for a transport that parses its own (HTTP): a message that
    could not be read becomes its start and end, which that transport reports as a broken message."""
    if isinstance(message, SessionMessage):
        return types.jsonrpc_message_adapter.dump_json(message.message, by_alias=True, exclude_unset=True)
    line = message.line if isinstance(message, UnreadableLine) else f"{type(message).__name__}: {message}"
    return line.replace("\n", " ").replace("\r", " ").encode("utf-8", "replace")


def _sweep(root: Path) -> None:
    """Remove the folders (named `<pid>-<server>`) that relay processes no longer running left behind."""
    try:
        folders = [p for p in root.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return
    for folder in folders:
        pid, _, _ = folder.name.partition("-")
        if pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process: alive
    return True


def _ends(line: Path) -> str:
    """The first and last characters of a file too large to read whole."""
    with line.open("rb") as fh:
        head = fh.read(ENDS_CHARS * 4).decode("utf-8", "replace")[:ENDS_CHARS]
        size = fh.seek(0, os.SEEK_END)
        fh.seek(max(0, size - ENDS_CHARS * 4))
        tail = fh.read().decode("utf-8", "replace")[-ENDS_CHARS:]
    return f"{head} ... [{size} bytes] ... {tail}"
