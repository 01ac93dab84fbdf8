"""A reply carrying megabytes of text (a gateway result at its cap) goes out over stdio in pieces that make
the very line `encode` makes, its long strings never escaped or encoded whole."""

from __future__ import annotations

import json
from typing import Any

import pytest

from relay.server import stdio_wire
from relay.server.stdio_wire import encode, encode_pieces

TEXT = 'quotes " backslashes \\ new\nlines\ttabs \x00 NUL, é € 😀 and </script> ' * 40


def reply(text: str) -> dict[str, Any]:
    result = {
        "content": [{"type": "text", "text": json.dumps({"result": text})}],
        "structuredContent": {"result": text},
    }
    return {"jsonrpc": "2.0", "id": 7, "result": result | {"isError": False, "n": [1, 2.5, None, True]}}


def test_a_reply_written_in_pieces_is_byte_for_byte_the_line_encode_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stdio_wire, "PIECE_CHARS", 100)
    message = reply(TEXT)
    pieces = list(encode_pieces(message))
    assert b"".join(pieces) == encode(message)
    assert max(len(p) for p in pieces) < 100 * 6 + 200  # a piece of text, escaped, plus the keys around it
    assert len(pieces) > 2 * len(TEXT) // 100


def test_a_lone_surrogate_in_a_long_string_goes_as_its_escape_and_a_nan_is_refused_before_any_piece(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stdio_wire, "PIECE_CHARS", 100)
    message = reply(TEXT + "\ud800" + TEXT)
    line = b"".join(encode_pieces(message))
    assert line.endswith(b"\n") and b"\\ud800" in line
    assert json.loads(line.decode("utf-8")) == message  # strict UTF-8: nothing UTF-8 cannot carry
    with pytest.raises(ValueError):
        encode_pieces(reply(TEXT) | {"extra": float("nan")})
