"""A JSON-RPC line too large to hold, read from its file as a stream: a tool result's text goes to a file.

The line is scanned once, in pieces of `READ_CHUNK` bytes. Only what a capped reply needs is kept in
memory (the id, `isError`, where each content block and `structuredContent` lie in the line); the
text of the content blocks is decoded piece by piece straight into `TextOut`'s file, joined by a
newline, a block without a `text` string giving its JSON as it stands in the line. No string of the
line is ever held whole, however long.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from relay.text import mend_surrogates

# Bytes read per step. A few copies of one step are what the scan holds; at 1 MiB each gets a mapping
# of its own (relay.memory), handed back the moment it is freed, where smaller steps taken in a worker
# thread leave their heap larger for good (measured: +0.8 MB at the peak with steps of 256 KiB).
READ_CHUNK = 1 << 20
# A token other than a string (a number, true, false, null) longer than this is not JSON worth reading.
MAX_TOKEN_BYTES = 1 << 16
# Strings the reply needs (the id, jsonrpc, a block's type, keys) are kept up to this many characters.
MAX_SMALL_CHARS = 1000
# Nesting deeper than this is refused (the scanner is recursive).
MAX_DEPTH = 256

_WS = re.compile(rb"[ \t\r\n]*")
_LITERAL = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null")
# A run of complete string pieces: plain bytes and whole escapes; stops at the closing quote, at a
# broken escape, or where the buffer ends (an escape cut by the end is left for the next read).
_BODY = re.compile(rb'(?:[^"\\]+|\\u[0-9a-fA-F]{4}|\\["\\/bfnrt])*')

# What a value is to the reply, by where it stands.
_OTHER, _TOP, _ID, _JSONRPC, _RESULT, _CONTENT, _BLOCK, _TEXT, _TYPE, _IS_ERROR, _STRUCTURED = range(11)
_CHILD = {
    _TOP: {"id": _ID, "jsonrpc": _JSONRPC, "result": _RESULT},
    _RESULT: {"content": _CONTENT, "isError": _IS_ERROR, "structuredContent": _STRUCTURED},
    _BLOCK: {"text": _TEXT, "type": _TYPE},
}


def _end(pattern: re.Pattern[bytes], buf: bytes, pos: int) -> int:
    """Where a run of `pattern` (which also matches nothing) starting at `pos` ends."""
    match = pattern.match(buf, pos)
    return match.end() if match is not None else pos


class NotJson(ValueError):
    """The line is not one JSON value."""


class TextOut:
    """A UTF-8 text file written piece by piece: its length in characters and its first `keep` characters."""

    def __init__(self, fh: BinaryIO, keep: int) -> None:
        self._fh = fh
        self.keep = keep
        self._head: list[str] = []
        self._held = 0
        self.chars = 0

    def write(self, text: str) -> None:
        if not text:
            return
        if self._held < self.keep:
            part = text[: self.keep - self._held]
            self._head.append(part)
            self._held += len(part)
        self.chars += len(text)
        self._fh.write(text.encode("utf-8", "replace"))

    def copy(self, src: BinaryIO, start: int, end: int) -> None:
        """Bytes `start`..`end` of `src`, as text (bytes that are not UTF-8 become U+FFFD)."""
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        src.seek(start)
        left = end - start
        while left > 0:
            data = src.read(min(READ_CHUNK, left))
            if not data:
                break
            left -= len(data)
            self.write(decoder.decode(data))
        self.write(decoder.decode(b"", final=True))

    def head(self) -> str:
        return "".join(self._head)


@dataclass
class Scan:
    """What the line holds that a capped reply needs."""

    jsonrpc: object = None
    id: object = None
    # Top-level members other than jsonrpc, id and result (a request, a notification or an error has them).
    others: set[str] = field(default_factory=lambda: set[str]())
    content: bool = False  # result.content is an array
    is_error: bool = False
    blocks: int = 0
    structured: tuple[int, int] | None = None  # byte range of result.structuredContent in the line
    size: int = 0  # bytes of the line

    @property
    def tool_result(self) -> bool:
        return self.jsonrpc == "2.0" and isinstance(self.id, int | str) and self.content and not self.others


class _Source:
    """The line's bytes through a window that slides forward; `base` is the window's offset in the line."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh = fh
        self.buf = b""
        self.pos = 0
        self.base = 0
        self.eof = False

    def more(self) -> bool:
        if self.eof:
            return False
        chunk = self.fh.read(READ_CHUNK)
        if not chunk:
            self.eof = True
            return False
        self.base += self.pos
        self.buf = self.buf[self.pos :] + chunk
        self.pos = 0
        return True

    @property
    def offset(self) -> int:
        return self.base + self.pos

    def peek(self) -> int:
        """The next byte that is not whitespace (-1 at the end)."""
        while True:
            self.pos = _end(_WS, self.buf, self.pos)
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.more():
                return -1

    def expect(self, byte: bytes) -> None:
        if self.peek() != byte[0]:
            raise NotJson(f"expected {byte.decode()} at byte {self.offset}")
        self.pos += 1

    def literal(self) -> bytes:
        while True:
            match = _LITERAL.match(self.buf, self.pos)
            at_end = match is None or match.end() == len(self.buf)
            if at_end and not self.eof and len(self.buf) - self.pos < MAX_TOKEN_BYTES and self.more():
                continue
            if match is None:
                raise NotJson(f"unexpected {self.buf[self.pos : self.pos + 20]!r} at byte {self.offset}")
            self.pos = match.end()
            return match.group()

    def string(self, sink: Callable[[str], None] | None) -> None:
        """Read a string (the opening quote is next), its decoded text handed to `sink` in pieces."""
        self.pos += 1
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        held = ""  # a high surrogate whose low half is in the next piece
        while True:
            end = _end(_BODY, self.buf, self.pos)
            if sink is not None and end > self.pos:
                text = decoder.decode(self.buf[self.pos : end])
                if "\\" in text:
                    text = json.loads(f'"{text}"', strict=False)
                if held:
                    text = mend_surrogates(held + text)
                    held = ""
                if text and "\ud800" <= text[-1] <= "\udbff":
                    text, held = text[:-1], text[-1]
                sink(text)
            self.pos = end
            if end < len(self.buf) and self.buf[end] == 0x22:  # the closing quote
                self.pos += 1
                if sink is not None:
                    sink(decoder.decode(b"", final=True) + ("\ufffd" if held else ""))
                return
            if end < len(self.buf) and len(self.buf) - end >= 6:
                raise NotJson(f"a broken escape at byte {self.offset}")
            if not self.more():
                raise NotJson("a string that never ends")


class _Scanner:
    def __init__(self, src: _Source, out: TextOut, line: BinaryIO) -> None:
        self.src = src
        self.out = out
        self.line = line  # the same file, read again to copy a block that has no text
        self.scan = Scan()
        self._block_text = False  # the content block being read has a `text` string

    def value(self, role: int, depth: int) -> object:
        """Read one value; returns it when the reply needs it (ids, flags, short strings), else None."""
        if depth > MAX_DEPTH:
            raise NotJson(f"nested deeper than {MAX_DEPTH}")
        src = self.src
        first = src.peek()
        start = src.offset
        if role == _BLOCK:
            self._block_start()
        kept: object = None
        if first == 0x7B:  # {
            self._object(role, depth)
        elif first == 0x5B:  # [
            self._array(role, depth)
        elif first == 0x22:  # "
            kept = self._string(role)
        elif first == -1:
            raise NotJson("the line ended where a value was expected")
        else:
            kept = json.loads(src.literal())
        if role == _STRUCTURED:
            self.scan.structured = (start, src.offset)
        elif role == _BLOCK and not self._block_text:
            self.out.copy(self.line, start, src.offset)
        elif role == _CONTENT:
            self.scan.content = first == 0x5B
        elif role == _IS_ERROR:
            self.scan.is_error = kept is True
        return kept

    def _block_start(self) -> None:
        if self.scan.blocks:
            self.out.write("\n")
        self.scan.blocks += 1
        self._block_text = False

    def _string(self, role: int) -> str | None:
        if role == _TEXT:
            self._block_text = True
            self.src.string(self.out.write)
            return None
        if role in (_OTHER, _BLOCK, _CONTENT, _STRUCTURED, _RESULT):
            self.src.string(None)
            return None
        return self._small()

    def _small(self) -> str | None:
        pieces: list[str] = []
        size = [0]

        def keep(text: str) -> None:
            if size[0] <= MAX_SMALL_CHARS:
                pieces.append(text)
                size[0] += len(text)

        self.src.string(keep)
        return "".join(pieces) if size[0] <= MAX_SMALL_CHARS else None

    def _object(self, role: int, depth: int) -> None:
        src = self.src
        src.pos += 1
        children = _CHILD.get(role, {})
        if src.peek() == 0x7D:  # }
            src.pos += 1
            return
        while True:
            if src.peek() != 0x22:
                raise NotJson(f"expected a key at byte {src.offset}")
            key = self._small()
            src.expect(b":")
            child = children.get(key or "", _OTHER)
            if role == _BLOCK and child == _TEXT and src.peek() != 0x22:
                child = _OTHER  # a `text` that is not a string: the block is copied as JSON
            value = self.value(child, depth + 1)
            if role == _TOP:
                if child == _ID:
                    self.scan.id = value if not isinstance(value, bool | float) else None
                elif child == _JSONRPC:
                    self.scan.jsonrpc = value
                elif child == _OTHER:
                    self.scan.others.add(key or "")
            if src.peek() == 0x2C:  # ,
                src.pos += 1
                continue
            src.expect(b"}")
            return

    def _array(self, role: int, depth: int) -> None:
        src = self.src
        src.pos += 1
        item = _BLOCK if role == _CONTENT else _OTHER
        if src.peek() == 0x5D:  # ]
            src.pos += 1
            return
        while True:
            self.value(item, depth + 1)
            if src.peek() == 0x2C:
                src.pos += 1
                continue
            src.expect(b"]")
            return


def scan_line(path: Path, out: TextOut) -> Scan:
    """Scan the JSON-RPC line in `path`, writing a tool result's content text to `out`; NotJson if it is not JSON."""
    with path.open("rb") as fh, path.open("rb") as again:
        scanner = _Scanner(_Source(fh), out, again)
        scanner.value(_TOP, 0)
        if scanner.src.peek() != -1:
            raise NotJson(f"more after the JSON value at byte {scanner.src.offset}")
        scanner.scan.size = scanner.src.offset
        return scanner.scan
