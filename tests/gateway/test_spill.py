"""A downstream line too large to hold is read back from its file as a stream (`_spill.py`, `_scan.py`):
the text kept is the text a whole parse would keep, the session gets only the cap, and every other
line is parsed whole as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp.shared.message import SessionMessage
from mcp.types import CallToolResult

from relay.gateway import _scan
from relay.gateway._spill import MAX_UNCLAIMED, SPILL_META, Spiller, UnreadableLine, parse
from relay.gateway._stream import answered_id, line_of
from relay.gateway.bounded import bound

CAP = 40


@pytest.fixture(autouse=True)
def tiny_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reads of 7 bytes: every escape, UTF-8 character and surrogate pair gets cut between two reads somewhere."""
    monkeypatch.setattr(_scan, "READ_CHUNK", 7)


def spill(tmp_path: Path, message: dict[str, Any], *, ensure_ascii: bool = False) -> tuple[Spiller, Any]:
    spiller = Spiller(tmp_path / "spill", CAP)
    path, fh = spiller.open()
    with fh:
        fh.write(json.dumps(message, ensure_ascii=ensure_ascii).encode())
    got = spiller.read(path)
    assert not path.exists()
    return spiller, got


def answer(result: dict[str, Any], request_id: int | str = 7) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def capped(spiller: Spiller, got: Any) -> tuple[CallToolResult, str, int]:
    """The result the session gets, and the whole text the caller claims with it."""
    assert isinstance(got, SessionMessage)
    result = CallToolResult.model_validate(got.message.model_dump(by_alias=True)["result"])
    spilled = spiller.claim(result)
    assert spilled is not None
    return result, spilled.path.read_text(encoding="utf-8"), spilled.total_chars


TEXTS = [
    ['quotes " and \\ back\\slashes, tabs\t and\nnew lines', "a second block, then the long one", "x" * 300],
    # Escaped (ensure_ascii), the emoji is a surrogate pair: \ud83d\ude00.
    ["accents é, a euro €, an emoji 😀 " * 5, "then \u0000 a NUL and \u001f"],
]


@pytest.mark.parametrize("ensure_ascii", [False, True], ids=["utf8", "escaped"])
@pytest.mark.parametrize("texts", TEXTS, ids=["escapes", "unicode"])
def test_a_spilled_result_keeps_the_text_a_whole_parse_keeps_and_hands_the_session_only_the_cap(
    tmp_path: Path, texts: list[str], ensure_ascii: bool
) -> None:
    content = [{"type": "text", "text": t} for t in texts]
    message = answer({"content": content, "isError": True})
    whole = parse(json.dumps(message).encode())
    assert isinstance(whole, SessionMessage)
    expected = bound(CallToolResult.model_validate(whole.message.model_dump(by_alias=True)["result"]), CAP)
    assert expected.full_text is not None

    spiller, got = spill(tmp_path, message, ensure_ascii=ensure_ascii)
    result, text, total = capped(spiller, got)
    assert (text, total) == (expected.full_text, len(expected.full_text))
    assert [c.model_dump(exclude_none=True) for c in result.content] == [{"type": "text", "text": text[:CAP]}]
    assert result.is_error is True
    assert got.message.model_dump()["id"] == 7
    assert spiller.claim(result) is None  # claimed once


def test_a_block_without_text_is_kept_as_its_json_and_structured_content_that_says_more_wins(
    tmp_path: Path,
) -> None:
    image = {"type": "image", "data": "QUJD" * 40, "mimeType": "image/png"}
    spiller, got = spill(tmp_path, answer({"content": [{"type": "text", "text": "see the image"}, image]}))
    _, text, _ = capped(spiller, got)
    head, _, rest = text.partition("\n")
    assert (head, json.loads(rest)) == ("see the image", image)

    structured = {"rows": [{"n": n, "name": f"row {n}"} for n in range(20)]}
    message = answer({"content": [{"type": "text", "text": "20 rows"}], "structuredContent": structured})
    spiller, got = spill(tmp_path, message)
    _, text, total = capped(spiller, got)
    assert (json.loads(text), total) == (structured, len(text))


def test_a_spilled_line_that_is_not_json_is_skipped_and_still_names_the_request_it_answered(
    tmp_path: Path,
) -> None:
    spiller = Spiller(tmp_path / "spill", CAP)
    path, fh = spiller.open()
    with fh:
        fh.write(b'{"jsonrpc": "2.0", "id": 12, "result": {"content": [{"type": "text", "text": "' + b"y" * 500)
        fh.write(b'"}], "isError": nope}')
    got = spiller.read(path)
    assert isinstance(got, UnreadableLine)
    assert answered_id(line_of(got)) == 12
    assert not any(spiller.folder.iterdir())  # neither the line nor a half-written text is left


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "id": 3, "result": {"tools": [{"name": f"t{n}", "inputSchema": {}} for n in range(9)]}},
        {"jsonrpc": "2.0", "id": 3, "error": {"code": -1, "message": "e" * 200}},
        {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "d" * 200}},
        answer({"content": [{"type": "text", "text": "é" * (CAP // 2)}]}),  # over the cap in bytes, not in text
    ],
    ids=["tools-list", "error", "notification", "text-that-fits"],
)
def test_a_long_line_that_is_not_a_result_too_large_for_the_cap_is_parsed_whole(
    tmp_path: Path, message: dict[str, Any]
) -> None:
    spiller, got = spill(tmp_path, message, ensure_ascii=True)
    assert isinstance(got, SessionMessage)
    whole = parse(json.dumps(message).encode())
    assert isinstance(whole, SessionMessage)
    assert got.message == whole.message
    assert SPILL_META not in json.dumps(got.message.model_dump(by_alias=True))
    assert not any(spiller.folder.iterdir())


def test_results_never_claimed_are_bounded_in_number_and_removed_when_the_connection_closes(
    tmp_path: Path,
) -> None:
    spiller = Spiller(tmp_path / "spill", CAP)
    for n in range(MAX_UNCLAIMED + 3):
        path, fh = spiller.open()
        with fh:
            fh.write(json.dumps(answer({"content": [{"type": "text", "text": "z" * 100}]}, n)).encode())
        assert isinstance(spiller.read(path), SessionMessage)
    assert len(list(spiller.folder.iterdir())) == MAX_UNCLAIMED
    spiller.clear()
    assert not spiller.folder.exists()


def test_the_spill_folders_of_relay_processes_that_ended_are_removed_when_the_next_connection_is_made(
    tmp_path: Path,
) -> None:
    root = tmp_path / "spill"
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    stale, ours, other = root / f"{int(ended.stdout)}-unruly", root / f"{os.getpid()}-toy", root / "notes"
    for folder in (stale, ours, other):
        folder.mkdir(parents=True)
        (folder / "line-1.jsonl").write_text("{}")
    Spiller(root / f"{os.getpid()}-unruly", CAP)
    assert sorted(p.name for p in root.iterdir()) == sorted([ours.name, other.name])
