"""Making a worktree blocks nothing: while git checks it out (slowly), another client's calls answer at once."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.server.app import build_server
from tests.conftest import SettingsFactory
from tests.workspaces.slow import slow_checkout_repo

pytestmark = pytest.mark.anyio

CHECKOUT_S = 3
# What a call answered while a worktree is made may take (idle, job_list answers in a few ms).
ANSWER_S = 0.1


async def test_other_calls_answer_within_100_ms_while_a_worktree_takes_3_s_to_check_out(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    repo = slow_checkout_repo(workdir, CHECKOUT_S)
    server = build_server(make_settings())
    latencies: list[float] = []
    delegated: dict[str, Any] = {}
    async with Client(server) as maker, Client(server) as other:
        await other.call_tool("job_list", {})  # both sessions up, the engine running

        async def make() -> None:
            args = {"prompt": "look", "cwd": str(repo), "workspace": "worktree", "mode": "async"}
            started = time.monotonic()
            result = await maker.call_tool("delegate", args)
            delegated.update(result.structured_content or {}, took=time.monotonic() - started)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(make)
                while not (Path(make_settings().worktrees_dir)).is_dir():  # git has started on it
                    await anyio.sleep(0.01)
                while "took" not in delegated:
                    started = time.monotonic()
                    await other.call_tool("job_list", {"limit": 5})
                    latencies.append(time.monotonic() - started)
                    await anyio.sleep(0.05)
    assert delegated["took"] >= CHECKOUT_S - 0.5, delegated  # the checkout did take its time
    assert len(latencies) >= 10, latencies  # calls were answered all along, not once the worktree was made
    assert max(latencies) < ANSWER_S, sorted(latencies)[-5:]
