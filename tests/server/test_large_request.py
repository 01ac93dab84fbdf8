"""A large request is not kept once it has been answered: not by the stdio front, the stdio transport, the SDK's
read loops nor SQLite's cached statements (each held the last 10 MB request until the next one came)."""

from __future__ import annotations

import ctypes
import gc
import io
import json
import subprocess
import sys
import threading
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import anyio
import anyio.from_thread
import pytest

from relay.server.app import build_server
from relay.server.stdio import serve_stdio
from relay.server.stdio_front import Front, Snapshot
from relay.store import Store
from tests.conftest import SettingsFactory

SIZE = 4_000_000  # characters in the large argument (lines of 1 MB or more count as large)


def line(msg_id: int | None, method: str, params: dict[str, Any] | None = None) -> bytes:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if msg_id is not None:
        msg["id"] = msg_id
    if params is not None:
        msg["params"] = params
    return json.dumps(msg).encode() + b"\n"


def large_call(msg_id: int) -> bytes:
    return line(msg_id, "tools/call", {"name": "job_status", "arguments": {"job_id": "x" * SIZE}})


@contextmanager
def tracing() -> Iterator[None]:
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


def live_large_blocks() -> list[int]:
    """Sizes of the blocks of SIZE bytes or more allocated since tracing began that are still referenced."""
    gc.collect()
    return [trace.size for trace in tracemalloc.take_snapshot().traces if trace.size >= SIZE]


class ClientLines:
    """The client's side of stdin: `lines`, then, when asked for the next one, `waiting()` runs and stdin ends."""

    def __init__(self, lines: list[bytes], waiting: Any) -> None:
        self.lines = lines
        self.waiting = waiting

    def readline(self) -> bytes:
        if self.lines:
            return self.lines.pop(0)
        self.waiting()
        return b""


def test_the_front_keeps_no_large_line_while_it_waits_for_the_next(tmp_path: Path) -> None:
    seen: list[list[int]] = []
    with tracing():
        client = ClientLines([large_call(1)], lambda: seen.append(live_large_blocks()))
        front = Front(cast(Any, client), io.BytesIO(), Snapshot(tmp_path / "s.json", "k"))
        forwarded = [0]

        def drain() -> None:
            while chunk := front.reader.read(1 << 16):
                forwarded[0] += len(chunk)

        drainer = threading.Thread(target=drain)
        drainer.start()
        front.read_client()
        drainer.join(30)
    assert forwarded[0] > SIZE  # the call did go through to the server
    assert seen == [[]]


@pytest.mark.anyio
async def test_a_large_request_is_not_kept_once_answered(make_settings: SettingsFactory) -> None:
    server = build_server(make_settings())
    answered = threading.Event()
    replies: list[dict[str, Any]] = []
    seen: list[list[int]] = []

    class ServerOut:
        def write(self, data: bytes) -> int:
            replies.append(json.loads(data))
            if replies[-1].get("id") == 2:
                answered.set()
            return len(data)

        def flush(self) -> None:
            return

    async def settled_blocks() -> list[int]:
        await anyio.wait_all_tasks_blocked()  # the call's handler has finished, the read loops wait
        return live_large_blocks()

    def waiting() -> None:  # in the transport's reader thread: the client sends nothing more for now
        assert answered.wait(60)
        seen.append(anyio.from_thread.run(settled_blocks))

    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    with tracing():
        client = ClientLines(
            [line(1, "initialize", init), line(None, "notifications/initialized"), large_call(2)], waiting
        )
        front = SimpleNamespace(reader=client, writer=ServerOut())
        with anyio.fail_after(120):
            await serve_stdio(server, cast(Front, front))
    error = next(r for r in replies if r.get("id") == 2)["result"]["structuredContent"]["error"]
    assert error["code"] == "JOB_NOT_FOUND"
    assert seen == [[]]


MALLINFO2_FIELDS = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in MALLINFO2_FIELDS.split()]


def _mallinfo() -> Any:
    mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    mallinfo2.restype = MallInfo2
    return mallinfo2()


def _c_heap_in_use() -> int:
    """Bytes the C allocator has handed out (heap and mapped blocks): what SQLite allocates is counted too."""
    info = _mallinfo()
    return int(info.uordblks + info.hblkhd)


MAPPED_BYTES = f"""
import ctypes, json
from relay.memory import map_large_blocks
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in "{MALLINFO2_FIELDS}".split()]
mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
mallinfo2.restype = MallInfo2
freed = bytearray(8_000_000)  # freeing it raises glibc's own threshold to 8 MB
del freed
asked = map_large_blocks()
before = mallinfo2().hblkhd
block = bytearray(3_000_000)
during = mallinfo2().hblkhd
del block
print(json.dumps([asked, before, during, mallinfo2().hblkhd]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads glibc's allocator statistics")
def test_once_asked_glibc_maps_large_blocks_on_their_own() -> None:
    # A fresh process: in this one, blocks freed by other tests could serve the block from a heap.
    out = subprocess.run([sys.executable, "-c", MAPPED_BYTES], capture_output=True, text=True, check=True).stdout
    asked, before, during, after = json.loads(out)
    assert asked is True
    assert during - before >= 3_000_000  # its own mapping, not carved from a heap
    assert after == before  # and handed back when freed


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads glibc's allocator statistics")
def test_sqlite_keeps_no_copy_of_a_large_value_once_its_statement_ran(tmp_path: Path) -> None:
    store = Store(tmp_path / "relay.db")
    store.insert_job("j0", "claude", "cli", {"prompt": "p"}, None, "/w")
    assert store.get_job("j0") is not None
    gc.collect()
    before = _c_heap_in_use()
    assert store.get_job("x" * 10_000_000) is None
    store.insert_job("j1", "claude", "cli", {"prompt": "y" * 10_000_000}, None, "/w")
    gc.collect()
    # Each statement held a 10 MB copy of its last value; SQLite's page cache is bounded (2 MB).
    assert _c_heap_in_use() - before < 4_000_000
    # Unbinding ran the insert once more, read-only: nothing was written twice, and writing still works.
    store.insert_job("j2", "claude", "cli", {"prompt": "p"}, None, "/w")
    rows = store._exec("SELECT id FROM jobs ORDER BY id").fetchall()  # pyright: ignore[reportPrivateUsage]
    assert [r[0] for r in rows] == ["j0", "j1", "j2"]
    job = store.get_job("j1")
    assert job is not None and job.request["prompt"] == "y" * 10_000_000
