"""The stdio front's routing, in process: what it answers itself, what it forwards (in order), what it records."""

from __future__ import annotations

import io
import json
import os
import threading
from pathlib import Path
from typing import Any

from relay.server.stdio_front import INIT_ID, TOOLS_ID, Front, Snapshot

INIT = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}},
}
INIT_RESULT = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {"name": "relay"}}
TOOLS_RESULT = {"tools": [{"name": "delegate", "inputSchema": {"type": "object"}}]}


def lines(*messages: Any) -> bytes:
    return b"".join((m if isinstance(m, bytes) else json.dumps(m).encode()) + b"\n" for m in messages)


def run_front(snapshot: Snapshot, *messages: Any) -> tuple[Front, list[dict[str, Any]], list[dict[str, Any]]]:
    """Feed the client's lines through a front; return what the client got and what reached the server."""
    out = io.BytesIO()
    front = Front(io.BytesIO(lines(*messages)), out, snapshot)
    forwarded: list[bytes] = []
    drain = threading.Thread(target=lambda: forwarded.append(front.reader.read()))
    drain.start()
    front.read_client()
    drain.join(10)
    to_client = [json.loads(x) for x in out.getvalue().splitlines()]
    to_server = [json.loads(x) for x in b"".join(forwarded).splitlines()]
    return front, to_client, to_server


def warm(tmp_path: Path) -> Snapshot:
    snapshot = Snapshot(tmp_path / "s.json", "k")
    snapshot.initialize = {"2025-11-25": INIT_RESULT}
    snapshot.tools = TOOLS_RESULT
    return snapshot


def test_with_a_snapshot_initialize_and_tools_list_are_answered_without_the_server(tmp_path: Path) -> None:
    _, to_client, to_server = run_front(
        warm(tmp_path),
        INIT,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 8, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "delegate", "arguments": {}}},
        b"{oops",
    )
    assert to_client == [
        {"jsonrpc": "2.0", "id": 7, "result": INIT_RESULT},
        {"jsonrpc": "2.0", "id": 8, "result": TOOLS_RESULT},
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32700, "message": "Parse error", "data": to_client[2]["error"]["data"]},
        },
    ]
    assert to_server == [
        {**INIT, "id": INIT_ID},  # the server learns the client, under a private id
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": TOOLS_ID, "method": "tools/list", "params": {}},  # to check the snapshot
        {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "delegate", "arguments": {}}},
    ]


def test_private_answers_are_consumed_and_a_changed_tool_list_is_announced(tmp_path: Path) -> None:
    out = io.BytesIO()
    snapshot = warm(tmp_path)
    front = Front(io.BytesIO(b""), out, snapshot)
    front.writer.write(
        json.dumps({"jsonrpc": "2.0", "id": INIT_ID, "result": INIT_RESULT}, separators=(",", ":")).encode() + b"\n"
    )
    new_tools = {"tools": []}
    front.writer.write(
        json.dumps({"jsonrpc": "2.0", "id": TOOLS_ID, "result": new_tools}, separators=(",", ":")).encode() + b"\n"
    )
    front.writer.write(b'{"jsonrpc":"2.0","id":9,"result":{}}\n')
    os.close(front._pipe_w)  # pyright: ignore[reportPrivateUsage]
    front.reader.close()
    assert front.ready
    assert [json.loads(x) for x in out.getvalue().splitlines()] == [
        {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"},
        {"jsonrpc": "2.0", "id": 9, "result": {}},
    ]
    assert Snapshot(tmp_path / "s.json", "k").tools == new_tools


def test_without_a_snapshot_everything_is_forwarded_and_the_answers_are_recorded(tmp_path: Path) -> None:
    snapshot = Snapshot(tmp_path / "s.json", "k")
    front, to_client, to_server = run_front(snapshot, INIT, {"jsonrpc": "2.0", "id": 8, "method": "tools/list"})
    assert to_client == [] and [m["id"] for m in to_server] == [7, 8]
    front.writer.write(
        json.dumps({"jsonrpc": "2.0", "id": 7, "result": INIT_RESULT}, separators=(",", ":")).encode() + b"\n"
    )
    front.writer.write(
        json.dumps({"jsonrpc": "2.0", "id": 8, "result": TOOLS_RESULT}, separators=(",", ":")).encode() + b"\n"
    )
    stored = Snapshot(tmp_path / "s.json", "k")
    assert (stored.initialize, stored.tools) == ({"2025-11-25": INIT_RESULT}, TOOLS_RESULT)
    assert Snapshot(tmp_path / "s.json", "another key").tools is None  # a new version or config starts over


def test_a_changed_initialize_answer_replaces_the_snapshots_for_the_next_start(tmp_path: Path) -> None:
    snapshot = warm(tmp_path)
    front, to_client, _ = run_front(snapshot, INIT)
    assert to_client == [{"jsonrpc": "2.0", "id": 7, "result": INIT_RESULT}]  # this start: the snapshot's answer
    newer = {**INIT_RESULT, "instructions": "new words"}
    front.writer.write(
        json.dumps({"jsonrpc": "2.0", "id": INIT_ID, "result": newer}, separators=(",", ":")).encode() + b"\n"
    )
    assert front.ready
    assert Snapshot(tmp_path / "s.json", "k").initialize == {"2025-11-25": newer}
    assert Snapshot(tmp_path / "s.json", "k").tools == TOOLS_RESULT  # the tool list kept
