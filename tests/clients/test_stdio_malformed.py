"""Over real stdio, every line that is not a JSON-RPC message gets its standard error reply (-32700 / -32600)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from relay.server.stdio_wire import parse_line

pytestmark = pytest.mark.anyio

RELAY = str(Path(sys.executable).with_name("relay"))

PARSE = {"code": -32700, "message": "Parse error"}
INVALID = {"code": -32600, "message": "Invalid Request"}
PARAMS = {"code": -32602, "message": "Invalid params"}

# (raw line, the id the reply carries, the error without its "data").
MALFORMED: list[tuple[bytes, Any, dict[str, Any]]] = [
    (b"{not json", None, PARSE),
    (b'{"jsonrpc":"2.0","id":1,"method":"ping"', 1, PARSE),  # cut short: its id can still be read
    (b"\xff\xfe\x00garbage", None, PARSE),  # not UTF-8
    (b'{"jsonrpc":"1.0","id":2,"method":"ping"}', 2, INVALID),
    (b'{"id":3,"method":"ping"}', 3, INVALID),  # no "jsonrpc"
    (b'{"jsonrpc":"2.0","id":null,"method":"ping"}', None, INVALID),
    (b'{"jsonrpc":"2.0","id":true,"method":"ping"}', None, INVALID),
    (b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}', None, INVALID),
    (b'[{"jsonrpc":"2.0","id":4,"method":"ping"},{"jsonrpc":"2.0","id":5,"method":"ping"}]', None, INVALID),
    (b"[]", None, INVALID),
    (b"42", None, INVALID),
    (b'"ping"', None, INVALID),
    (b'{"jsonrpc":"2.0","id":6,"method":7}', 6, INVALID),
    (b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":"x"}', 7, PARAMS),
    (b'{"jsonrpc":"2.0","id":8}', 8, INVALID),  # neither request nor response
    (b'{"jsonrpc":"2.0","method":1}', None, INVALID),  # a broken notification is answered too
    (b'{"jsonrpc":"2.0","method":"ping","id":9,"params":' + b"[" * 5000 + b"]" * 5000 + b"}", 9, PARSE),  # too deep
    (b'{"params":{"id":1},"id":10,"method":"tools/call","jsonrpc":"2.0","x":[', 10, PARSE),  # the top-level id
    (b'{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"a\xff"}}', 11, PARAMS),  # bytes, not UTF-8
    (b'{"jsonrpc":"2.0","id":12.5,"method":"ping"', None, PARSE),  # an id that is no valid id is not recovered
]


def test_a_well_formed_message_passes_and_a_blank_line_is_ignored() -> None:
    ping = {"jsonrpc": "2.0", "id": "a", "method": "ping"}
    assert parse_line(json.dumps(ping).encode()) == (ping, None)
    assert parse_line(b'{"jsonrpc":"2.0","method":"notifications/initialized"}') == (
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        None,
    )
    assert parse_line(b'{"jsonrpc":"2.0","id":3,"result":{}}') == ({"jsonrpc": "2.0", "id": 3, "result": {}}, None)
    assert parse_line(b"  \r\n") == (None, None)


def test_a_notification_with_bytes_that_are_not_utf8_passes_on_with_replacement_characters() -> None:
    message, reply = parse_line(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"reason":"a\xffb"}}')
    assert reply is None and message == {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"reason": "a\ufffdb"},
    }


@pytest.mark.parametrize(("line", "reply_id", "error"), MALFORMED)
def test_each_malformed_line_has_its_standard_error(line: bytes, reply_id: Any, error: dict[str, Any]) -> None:
    message, reply = parse_line(line)
    assert message is None and reply is not None
    assert isinstance(reply["error"].pop("data"), str)
    assert reply == {"jsonrpc": "2.0", "id": reply_id, "error": error}


async def _readline(stdout: anyio.abc.ByteReceiveStream, buf: bytearray) -> dict[str, Any]:
    while b"\n" not in buf:
        buf.extend(await stdout.receive())
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return json.loads(line)


async def test_relay_serve_answers_every_malformed_line_over_stdio_and_keeps_serving(relay_home: Path) -> None:
    env = {**os.environ, "RELAY_HOME": str(relay_home)}
    async with await anyio.open_process([RELAY, "serve"], env=env, stderr=subprocess.DEVNULL) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        buf = bytearray()
        with anyio.fail_after(120):  # the first reply waits for relay to start, slow on a loaded machine
            for line, reply_id, error in MALFORMED:
                await proc.stdin.send(line + b"\n")
                reply = await _readline(proc.stdout, buf)
                assert isinstance(reply["error"].pop("data"), str), reply
                assert reply == {"jsonrpc": "2.0", "id": reply_id, "error": error}
            await proc.stdin.send(b'{"jsonrpc":"2.0","id":"still-there","method":"ping"}\n')
            assert await _readline(proc.stdout, buf) == {"jsonrpc": "2.0", "id": "still-there", "result": {}}
            await proc.stdin.aclose()
            assert await proc.wait() == 0
