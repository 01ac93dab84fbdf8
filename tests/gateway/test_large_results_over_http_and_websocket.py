"""A result far over the cap from an HTTP or WebSocket downstream server is spilled to a file as it arrives and
never held whole in relay's memory: the client gets the cap, the whole text is in the kept file. The servers
are the toy SDK server with a `big` tool (servers/large_server.py) over Streamable HTTP (answers as SSE events
or JSON bodies) and over WebSocket, each in a process of its own. What is asserted is the mechanism, as memory:
the Python allocations of the whole call (tracemalloc's peak) stay a few caps high, where reading the answer
whole holds it at least once (the result alone is 20 MB)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from relay.gateway import Gateway, make_config
from tests.gateway.conftest import HERE, PROJECT, free_port

pytestmark = pytest.mark.anyio

LARGE = HERE / "servers" / "large_server.py"
CHARS = 20_000_000
CAP = 1_000_000  # relay's default
# The call's allocations at their peak: the cap's text a few times over (the scan's window, the capped answer as
# the SDK reads it again: measured 2.5 to 6.1 MB), and half the result, which a whole read holds at least once.
MAX_PEAK_BYTES = 10 * CAP


@contextlib.contextmanager
def large_server(mode: str, state: Path) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(LARGE), mode, str(port)],
        env={**os.environ, "TOY_STATE_DIR": str(state)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the large {mode} server did not start")
            time.sleep(0.05)
        yield f"{'ws' if mode == 'websocket' else 'http'}://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("mode", ["http", "json", "websocket"], ids=["http-sse", "http-json", "websocket"])
async def test_a_result_far_over_the_cap_from_an_http_or_websocket_server_is_spilled_and_never_held_whole(
    gateway: Gateway, tmp_path: Path, mode: str
) -> None:
    assert gateway.limits.result_cap_chars == CAP
    with large_server(mode, tmp_path) as url:
        transport = "websocket" if mode == "websocket" else "http"
        await gateway.add(make_config(name="large", transport=transport, url=url, scope=PROJECT))
        with anyio.fail_after(120):
            small = await gateway.call_tool("large", "big", {"chars": 10})  # connects
            assert [getattr(c, "text", None) for c in small.content] == ["x" * 10]
            tracemalloc.start()
            try:
                result = await gateway.call_tool("large", "big", {"chars": CHARS})
                bounded = gateway.bound("large", result)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
    assert bounded.full_path is not None and bounded.full_text is None  # kept in a file, not as a string
    try:
        assert bounded.total_chars == CHARS
        assert [getattr(c, "text", None) for c in bounded.result.content] == ["x" * CAP]
        assert bounded.full_path.stat().st_size == CHARS
        assert peak < MAX_PEAK_BYTES, f"the call's allocations peaked at {peak / 1e6:.1f} MB"
    finally:
        bounded.full_path.unlink(missing_ok=True)
