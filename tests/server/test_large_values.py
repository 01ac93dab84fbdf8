"""relay's other SQLite connections keep no copy of a large value once its statement ran: conversation threads
(a 10 MB prompt or answer is a turn), MCP tasks (a call's whole result; a task id as long as a client sends)
and hook sessions (a summary). Each connection is kept open, as a long-lived service keeps it."""

from __future__ import annotations

import ctypes
import gc
import sys
import uuid
from pathlib import Path

import pytest

from relay.hooks.store import HookStore
from relay.server.tasks_ext import TaskStore
from relay.store import Store
from relay.threads import NewTurn, Threads
from tests.server.test_large_request import MallInfo2

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads glibc's allocator statistics")

BIG = 10_000_000
# Each statement kept a 10 MB copy of its last large value; SQLite's page cache is bounded (2 MB).
ROOM = 4_000_000


def c_heap_in_use() -> int:
    """Bytes the C allocator has handed out (heap and mapped blocks): what SQLite allocates is counted too."""
    gc.collect()
    mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    mallinfo2.restype = MallInfo2
    info = mallinfo2()
    return int(info.uordblks + info.hblkhd)


def test_threads_keep_no_copy_of_a_large_turn(tmp_path: Path) -> None:
    threads = Threads(tmp_path / "relay.db")
    try:
        warm = str(uuid.uuid4())
        threads.add_turns(warm, [NewTurn("user", "hi"), NewTurn("assistant", "hello")], tool="ask")
        assert threads.find(warm) is not None
        before = c_heap_in_use()
        big = str(uuid.uuid4())
        added = threads.add_turns(
            big, [NewTurn("user", "x" * BIG), NewTurn("assistant", "y" * BIG)], tool="ask", title="x" * BIG
        )
        assert [len(t.content) for t in added.turns] == [BIG, BIG]
        del added
        found = threads.find(big)
        assert found is not None and found.turns[1].content == "y" * BIG
        del found
        assert c_heap_in_use() - before < ROOM
        # The thread was written once, and the connection still writes.
        threads.add_turns(big, [NewTurn("user", "more")], tool="ask")
        again = threads.get(big)
        assert [t.role for t in again.turns] == ["user", "assistant", "user"] and again.turn_count == 3
    finally:
        threads.close()


def test_the_tasks_store_keeps_no_copy_of_a_large_result_or_task_id(tmp_path: Path) -> None:
    path = tmp_path / "relay.db"
    Store(path)  # creates mcp_tasks
    tasks = TaskStore(path)
    try:
        tasks.add("t1", "j1", "chat", "call", 1.0)
        assert tasks.get("t1") is not None
        before = c_heap_in_use()
        tasks.set_outcome("t1", {"result": {"content": [{"type": "text", "text": "y" * BIG}]}})
        assert tasks.get("x" * BIG) is None
        found = tasks.get("t1")
        assert found is not None and found[4] is not None
        assert len(found[4]["result"]["content"][0]["text"]) == BIG
        del found
        assert c_heap_in_use() - before < ROOM
        tasks.add("t2", "j2", "chat", "call", 2.0)
        assert tasks.get("t2") == ("j2", "chat", "call", 2.0, None)
    finally:
        tasks.close()


def test_the_hooks_store_keeps_no_copy_of_a_large_summary(tmp_path: Path) -> None:
    hooks = HookStore(tmp_path / "relay.db")
    try:
        fields = {
            "principal": "local",
            "source": "claude",
            "start_source": None,
            "machine_id": "m",
            "cwd": "/w",
            "project": "p",
            "project_id": "p1",
            "parent_session_id": None,
            "transcript_path": None,
        }
        hooks.start("s1", **fields)
        before = c_heap_in_use()
        ended = hooks.set_summary("s1", "y" * BIG, "model", "local")
        assert ended is not None and len(ended.summary or "") == BIG
        del ended
        assert c_heap_in_use() - before < ROOM
        hooks.start("s2", **fields)
        assert hooks.get("s2", "local") is not None
    finally:
        hooks.close()
