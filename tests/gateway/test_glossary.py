"""Computing glossaries in tool search: a word no tool uses stands for the words of its definition."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from relay.gateway import _glossary
from relay.gateway._glossary import DictdFile, Glossary, find_glossaries, glossary
from relay.gateway.search import ToolDoc, ToolIndex

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

ENTRIES = {
    "du": 'du\n   <tool, storage> ("disk usage") The Unix command to list the amount of disk space used by a '
    "directory and its subdirectories.  See also df.\n",
    "cron": "cron\n   <operating system> The Unix clock daemon that executes commands at specified dates and times.\n",
    "file": "file\n   Banana orchard giraffe.\n",
}

DOCS = [
    ToolDoc("filesystem", "list_directory_with_sizes", "List files and directories with their sizes", ["path"]),
    ToolDoc("filesystem", "read_text_file", "Read the complete contents of a file as text", ["path"]),
    ToolDoc("scheduler", "schedule_job", "Run a command at given times and dates", ["when", "command"]),
    ToolDoc("zoo", "feed_animals", "Feed the giraffe and plant a banana orchard", ["animal"]),
]


def _b64(n: int) -> str:
    out = ""
    while True:
        out = _B64[n % 64] + out
        n //= 64
        if not n:
            return out


def write_dictd(folder: Path, name: str, entries: dict[str, str], chunk: int | None = None) -> None:
    """A dictd dictionary: plain `.dict`, or dictzip (`.dict.dz`, deflated in chunks of `chunk` bytes)."""
    folder.mkdir(parents=True, exist_ok=True)
    data = b""
    index: list[str] = []
    for head, text in sorted(entries.items()):
        body = text.encode()
        index.append(f"{head}\t{_b64(len(data))}\t{_b64(len(body))}")
        data += body
    (folder / f"{name}.index").write_text("\n".join(index) + "\n")
    if chunk is None:
        (folder / f"{name}.dict").write_bytes(data)
        return
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    blobs = [
        deflate.compress(data[i : i + chunk]) + deflate.flush(zlib.Z_FULL_FLUSH) for i in range(0, len(data), chunk)
    ]
    blobs[-1] += deflate.flush(zlib.Z_FINISH)
    table = struct.pack(f"<HHH{len(blobs)}H", 1, chunk, len(blobs), *map(len, blobs))
    extra = b"RA" + struct.pack("<H", len(table)) + table
    header = b"\x1f\x8b\x08\x04" + b"\0" * 4 + b"\x02\x03" + struct.pack("<H", len(extra)) + extra
    trailer = struct.pack("<II", zlib.crc32(data), len(data))
    (folder / f"{name}.dict.dz").write_bytes(header + b"".join(blobs) + trailer)


@pytest.fixture
def glossary_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "dictd"
    write_dictd(folder, "foldoc", ENTRIES, chunk=64)
    monkeypatch.setenv("RELAY_GLOSSARY_DIR", str(folder))
    _glossary.glossary.cache_clear()
    return folder


def top(query: str) -> list[str]:
    return [f"{r.doc.server}/{r.doc.name}" for r in ToolIndex(DOCS).search(query, 3)]


def test_a_word_no_tool_uses_finds_the_tool_its_glossary_definition_describes(glossary_dir: Path) -> None:
    assert top("du")[0] == "filesystem/list_directory_with_sizes"
    assert top("add a cron entry")[0] == "scheduler/schedule_job"


def test_without_a_glossary_such_a_word_finds_nothing() -> None:
    assert glossary() is None
    assert top("du") == []


def test_a_word_the_tools_use_is_not_replaced_by_its_definition(glossary_dir: Path) -> None:
    assert top("read a file")[0] == "filesystem/read_text_file"
    assert "zoo/feed_animals" not in top("read a file")


def test_a_definition_gives_its_first_sentence_without_markup_stop_words_or_the_word_itself(
    glossary_dir: Path,
) -> None:
    lookup = glossary()
    assert lookup is not None
    meaning = lookup.meaning("du")
    assert meaning[:4] == ("disk", "usage", "unix", "command")
    assert "df" not in meaning and "tool" not in meaning and "the" not in meaning and "du" not in meaning
    assert lookup.meaning("DU") == meaning
    assert lookup.meaning("xyzzy") == ()


def test_a_dictzip_entry_reads_the_same_as_the_plain_file_whatever_chunks_it_spans(tmp_path: Path) -> None:
    long = {f"w{i}": f"w{i}\n   entry number {i} " + "padding " * (i % 7) + "\n" for i in range(40)}
    write_dictd(tmp_path / "plain", "vera", long)
    write_dictd(tmp_path / "zip", "vera", long, chunk=50)
    plain = DictdFile(tmp_path / "plain" / "vera.index", tmp_path / "plain" / "vera.dict")
    zipped = DictdFile(tmp_path / "zip" / "vera.index", tmp_path / "zip" / "vera.dict.dz")
    for word, text in long.items():
        assert plain.define(word) == text
        assert zipped.define(word) == text
    assert zipped.define("missing") is None


def test_an_unreadable_glossary_is_skipped_and_the_others_still_count(tmp_path: Path) -> None:
    write_dictd(tmp_path, "vera", {"wip": "WIP\n   Work In Progress (slang)\n"})
    (tmp_path / "foldoc.index").write_text("du\tA\tZZZZ\n")
    (tmp_path / "foldoc.dict.dz").write_bytes(b"not a gzip file")
    lookup = Glossary(find_glossaries_in(tmp_path))
    assert lookup.meaning("wip") == ("work", "progress", "slang")
    assert lookup.meaning("du") == ()


def find_glossaries_in(folder: Path) -> list[tuple[Path, Path]]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RELAY_GLOSSARY_DIR", str(folder))
        return find_glossaries()
