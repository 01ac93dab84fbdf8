"""Flat memory: a line longer than MAX_LINE_BYTES is read in pieces, never whole; an answer is kept to its tail."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from relay.agents.base import TextTail
from relay.agents.claude import ClaudeParser
from relay.jobs.output import MAX_LINE_BYTES, LineReader


def test_a_single_huge_line_reaches_the_parser_in_pieces_with_its_characters_intact(tmp_path: Path) -> None:
    path = tmp_path / "stdout"
    line = "é€" * (3 * MAX_LINE_BYTES // 5) + "end"  # multi-byte characters across every cut
    path.write_text(f"first\n{line}\nlast\n", encoding="utf-8")
    reader = LineReader(path)
    got = list(reader.read(final=True))
    assert got[0] == "first" and got[-1] == "last"
    pieces = got[1:-1]
    assert "".join(pieces) == line
    assert all(len(p.encode()) <= MAX_LINE_BYTES for p in pieces)
    assert reader.split_pieces == len(pieces) - 1 > 0


def test_reading_a_64_mb_line_never_holds_it_whole(tmp_path: Path) -> None:
    path = tmp_path / "stdout"
    with path.open("wb") as fh:
        for _ in range(64):
            fh.write(b"x" * (1 << 20))
        fh.write(b"\n")
    reader = LineReader(path)
    tracemalloc.start()
    try:
        total = sum(len(piece) for piece in reader.read(final=True))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert total == 64 << 20
    assert peak < 16 << 20, f"peak {peak / 2**20:.1f} MB"


def test_an_answer_longer_than_the_limit_keeps_its_end_and_says_where_the_rest_is() -> None:
    tail = TextTail(keep=100)
    for i in range(50):
        tail.append(f"line {i:03d}")
    text = tail.join()
    assert text.startswith("[") and "transcript" in text.splitlines()[0]
    assert text.endswith("line 049") and "line 000" not in text
    assert len(text.split("\n", 1)[1]) <= 100
    parser = ClaudeParser()
    assert parser.texts.keep > 1 << 20  # the real bound is megabytes, not the test's 100
