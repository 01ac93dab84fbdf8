"""Computing glossaries, read from dictd files when they are installed: what a jargon word or acronym means.

FOLDOC (the Free On-line Dictionary of Computing: "chmod", "cron", "du", "grep", "TZ") and VERA (computer
acronyms: "CVE", "WIP", "SSH") are published in the dictd format; Debian and Ubuntu install them as
`dict-foldoc` and `dict-vera` under /usr/share/dictd, and `RELAY_GLOSSARY_DIR` names any other folder
that holds `foldoc.index` + `foldoc.dict.dz` (or `.dict`) and the same for `vera`. A query word no tool
uses is looked up here, and the words of its definition's first sentence stand in for it at a low
weight. Nothing is read until the first such word: then the indexes (a few hundred kilobytes) are read,
and each definition is inflated on its own from the dictzip chunk that holds it. Without the files
`meaning` returns nothing and the search ranks as it would without them.
"""

from __future__ import annotations

import functools
import gzip
import os
import re
import struct
import threading
import zlib
from pathlib import Path

from relay.gateway._words import STOP

DICTIONARIES = ("foldoc", "vera")
_DIRS = ("/usr/share/dictd", "/usr/local/share/dictd", "/opt/homebrew/share/dictd")
# How many words of a definition stand in for the looked-up word.
MEANING_WORDS = 12
_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_MARKUP = re.compile(r"<[^>]*>")
_SENTENCE_END = re.compile(r"(?<=[.])\s")
_WORD = re.compile(r"[a-z]{2,}")


def _number(text: str) -> int:
    """A dictd index number (base 64, most significant digit first)."""
    value = 0
    for ch in text:
        value = value * 64 + _B64.index(ch)
    return value


class DictdFile:
    """One dictd dictionary: its index (headword → where the entry is) and its data, plain or dictzip."""

    def __init__(self, index: Path, data: Path) -> None:
        self._data_path = data
        # Headword → "offset<TAB>length" as written (decoded on lookup: most entries are never looked up).
        self.entries: dict[str, str] = {}
        for line in index.read_text(encoding="utf-8", errors="replace").splitlines():
            head, _, where = line.partition("\t")
            if head and where and not head.startswith("00database"):
                self.entries.setdefault(head.lower(), where)
        self._chunks: tuple[int, list[int], int] | None = None  # (chunk length, compressed sizes, data start)
        self._plain: bytes | None = None
        if data.suffix == ".dz":
            self._chunks = _dictzip_chunks(data)
            if self._chunks is None:  # gzip without dictzip's chunk table: inflate it whole once
                self._plain = gzip.decompress(data.read_bytes())
        else:
            self._plain = data.read_bytes()

    def define(self, word: str) -> str | None:
        """The entry for `word` (any case), or None."""
        where = self.entries.get(word.lower())
        if where is None:
            return None
        offset, length, *_ = (_number(field) for field in where.split("\t"))
        if self._plain is not None:
            return self._plain[offset : offset + length].decode("utf-8", errors="replace")
        assert self._chunks is not None
        chunk_len, sizes, start = self._chunks
        first, last = offset // chunk_len, (offset + length - 1) // chunk_len
        out = bytearray()
        with open(self._data_path, "rb") as f:
            f.seek(start + sum(sizes[:first]))
            for size in sizes[first : last + 1]:
                out += zlib.decompressobj(-zlib.MAX_WBITS).decompress(f.read(size))
        skip = offset - first * chunk_len
        return bytes(out[skip : skip + length]).decode("utf-8", errors="replace")


def _dictzip_chunks(path: Path) -> tuple[int, list[int], int] | None:
    """A dictzip file's chunk length, the compressed size of each chunk and where the first starts."""
    with open(path, "rb") as f:
        head = f.read(12)
        if len(head) < 12 or head[:2] != b"\x1f\x8b" or not head[3] & 4:
            return None
        flags = head[3]
        (extra_len,) = struct.unpack("<H", head[10:12])
        extra = f.read(extra_len)
        found: tuple[int, list[int]] | None = None
        at = 0
        while at + 4 <= len(extra):
            (size,) = struct.unpack("<H", extra[at + 2 : at + 4])
            if extra[at : at + 2] == b"RA":
                _, chunk_len, count = struct.unpack("<HHH", extra[at + 4 : at + 10])
                found = (chunk_len, list(struct.unpack(f"<{count}H", extra[at + 10 : at + 10 + 2 * count])))
            at += 4 + size
        for flag in (8, 16):  # the original file name, a comment: zero-terminated
            if flags & flag:
                while f.read(1) not in (b"\0", b""):
                    pass
        if flags & 2:
            f.read(2)
        return (found[0], found[1], f.tell()) if found else None


def find_glossaries() -> list[tuple[Path, Path]]:
    """(index, data) of each glossary found: RELAY_GLOSSARY_DIR, else the system's dictd folders."""
    named = os.environ.get("RELAY_GLOSSARY_DIR")
    folders = [Path(named)] if named else [Path(d) for d in _DIRS]
    found: list[tuple[Path, Path]] = []
    for name in DICTIONARIES:
        for folder in folders:
            data = next((p for p in (folder / f"{name}.dict.dz", folder / f"{name}.dict") if p.is_file()), None)
            if data is not None and (folder / f"{name}.index").is_file():
                found.append((folder / f"{name}.index", data))
                break
    return found


class Glossary:
    """The glossaries found, opened on the first lookup."""

    def __init__(self, files: list[tuple[Path, Path]]) -> None:
        self._files = files
        self._lock = threading.Lock()
        self._opened: list[DictdFile] | None = None

    def _dictionaries(self) -> list[DictdFile]:
        with self._lock:
            if self._opened is None:
                opened: list[DictdFile] = []
                for index, data in self._files:
                    try:
                        opened.append(DictdFile(index, data))
                    except (OSError, ValueError, EOFError, zlib.error, struct.error):
                        continue  # an unreadable glossary is skipped, the others still count
                self._opened = opened
            return self._opened

    @functools.lru_cache(maxsize=2048)  # noqa: B019 - one glossary per process; lookups repeat across queries
    def meaning(self, word: str) -> tuple[str, ...]:
        """The words of the first sentence of each definition of `word` (lower case; markup, stop words and
        the word itself left out), at most MEANING_WORDS; empty when no glossary has it."""
        words: list[str] = []
        for dictionary in self._dictionaries():
            try:
                entry = dictionary.define(word)
            except (OSError, zlib.error, ValueError):
                entry = None
            parts = (entry or "").split(None, 1)  # the entry starts with its headword
            if len(parts) < 2:
                continue
            first = _SENTENCE_END.split(_MARKUP.sub(" ", parts[1]).strip(), maxsplit=1)[0]
            words += [w for w in _WORD.findall(first.lower()) if w != word.lower() and w not in STOP]
        return tuple(dict.fromkeys(words))[:MEANING_WORDS]


@functools.cache
def glossary() -> Glossary | None:
    """The installed glossaries, or None when there are none."""
    files = find_glossaries()
    return Glossary(files) if files else None
