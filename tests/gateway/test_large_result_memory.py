"""A tool result far larger than the cap passes through relay (a real `relay serve` over stdio, the real
unruly stdio server) without ever sitting in relay's memory whole: its peak RSS during the call stays
well under the result's own size, and every character of it still pages back."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from mcp import Client, StdioServerParameters

from relay.gateway import ServerRegistry, make_config

pytestmark = pytest.mark.anyio

RELAY = Path(sys.executable).parent / "relay"
UNRULY = Path(__file__).resolve().parent / "servers" / "unruly_server.py"
# 32 MB of text: held whole even once, it alone would be twice the bound.
TOTAL_CHARS = 32_000_000
# The growth allowed during the call: the capped reply (1 MB of text, carried twice, serialized) and the
# spilled line's read buffers, with room for a loaded machine. Before the spill: about 5.7 x 32 MB.
MAX_GROWTH_MB = 16.0


def _kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    raise AssertionError(f"{key} missing from /proc/{pid}/status")


def _reset_peak(pid: int) -> bool:
    """Start VmHWM afresh (Linux: `5` to clear_refs); False where that is not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc (Linux)")
async def test_a_result_far_over_the_cap_never_sits_in_relays_memory_whole_and_still_pages_back(
    relay_home: Path, tmp_path: Path
) -> None:
    registry = ServerRegistry(relay_home / "relay.db", relay_home)
    try:
        config = make_config(name="unruly", transport="stdio", command=sys.executable, args=[str(UNRULY)], scope="")
        registry.put(config)
    finally:
        registry.close()
    env = {
        "RELAY_HOME": str(relay_home),
        "HOME": str(relay_home),
        "PATH": os.environ.get("PATH", ""),
        "RELAY_TOOLSETS": "core,gateway",
        "RELAY_STDIO_FRONT": "0",
    }
    params = StdioServerParameters(command=str(RELAY), args=["serve"], env=env, cwd=tmp_path)
    with anyio.fail_after(240):
        async with Client(params, mode="legacy", cache=None) as relay:

            async def big(chars: int) -> dict[str, Any]:
                args = {"server_name": "unruly", "tool_name": "big", "arguments": {"chars": chars}}
                reply = await relay.call_tool("call_tool", args)
                assert not reply.is_error and reply.structured_content is not None
                return reply.structured_content

            await big(10)  # starts the downstream server
            [pid] = [p.pid for p in psutil.Process().children() if "serve" in p.cmdline()]
            before = _kb(pid, "VmRSS")
            if not _reset_peak(pid):
                before = max(before, _kb(pid, "VmHWM"))
            body = await big(TOTAL_CHARS)
            growth_mb = (_kb(pid, "VmHWM") - before) / 1024
            rest: dict[str, Any] = body["truncated"]
            assert (rest["returned_chars"], rest["total_chars"]) == (1_000_000, TOTAL_CHARS)
            assert growth_mb < MAX_GROWTH_MB, f"relay grew {growth_mb:.1f} MB while a 32 MB result passed"
            pages: list[dict[str, Any]] = []
            for offset in (rest["next_offset"], TOTAL_CHARS - 150_000):
                page = await relay.call_tool("job_result", {"job_id": rest["job_id"], "offset": offset})
                assert page.structured_content is not None
                pages.append(page.structured_content)
            assert [(p["total_chars"], p["next_offset"], set(p["text"])) for p in pages] == [
                (TOTAL_CHARS, 1_020_000, {"x"}),  # the default page: 20,000 characters
                (TOTAL_CHARS, TOTAL_CHARS - 130_000, {"x"}),
            ]
    spill = [p for p in (relay_home / "gateway").rglob("*") if p.is_file() and "spill" in p.parts]
    assert spill == []  # the kept text became the job's result; nothing was left behind
