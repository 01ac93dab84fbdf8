"""Any front can do anything to any job (issue 40): queued jobs cancelled through a front that did not queue them.

Two fronts with homes of their own (relay's MCP server through the official SDK's in-memory client, in this process,
running no jobs) and one worker host (a network and a pid namespace, one slot, kept busy by a long job) share
PostgreSQL. Front A queues jobs; front B cancels them, waits on them and reads their results: every answer is the
job's, none `INTERNAL` (it was FileNotFoundError on B's own jobs/<id>/result.txt), and once the busy job is
cancelled too nothing is left queued or running, the slot free.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.config import load_settings
from relay.server.app import build_server
from relay.store import open_store
from tests.cluster.faults import Hosts, base_env, fleet, home_for, ticking_agent, ticks

pytestmark = pytest.mark.anyio

__all__ = ["fleet"]  # the fixture, used by name

LEASE_S = 3.0
QUEUED = 4


def content(result: Any) -> dict[str, Any]:
    """A tool's answer: the job's (a cancelled job's envelope is isError, by design), never a relay failure."""
    answer = dict(result.structured_content or {})
    assert ("job_id" in answer or "jobs" in answer) and "INTERNAL" not in str(answer), result.content
    return answer


async def test_queued_jobs_cancelled_through_a_front_that_did_not_queue_them_end_cancelled_with_every_slot_busy_and_none_stuck(
    fleet: Hosts, pg_url: str, tmp_path: Path
) -> None:
    work, log = tmp_path / "work", tmp_path / "ticks.log"
    work.mkdir()
    agent = ticking_agent(tmp_path / "bin", log, 60)
    env = base_env(work, pg_url, LEASE_S)
    fleet.add("host-a")
    fleet.start("host-a", home_for(tmp_path, "a", agent, env), work, "--slots", "1")
    fronts = [load_settings(home_for(tmp_path, name, agent, env) | {"RELAY_RUN_JOBS": "0"}, cwd=work) for name in "AB"]
    async with Client(build_server(fronts[0])) as a, Client(build_server(fronts[1])) as b:
        busy = content(await a.call_tool("delegate", {"prompt": "job-busy", "mode": "async", "cwd": str(work)}))
        with anyio.fail_after(60):
            while not ticks(log).get("job-busy"):
                await anyio.sleep(0.05)
        queued = [
            content(await a.call_tool("delegate", {"prompt": f"job-q{n}", "mode": "async", "cwd": str(work)}))["job_id"]
            for n in range(QUEUED)
        ]
        for job_id in queued:
            cancelled = content(await b.call_tool("job_cancel", {"job_id": job_id}))
            assert cancelled.get("status") == "cancelled", cancelled
        waited = content(await b.call_tool("job_wait", {"job_ids": queued, "timeout_s": 10}))
        assert [j["status"] for j in waited["jobs"]] == ["cancelled"] * QUEUED
        for job_id in queued:
            result = content(await b.call_tool("job_result", {"job_id": job_id}))
            assert result["status"] == "cancelled", result
        ended = content(await b.call_tool("job_cancel", {"job_id": busy["job_id"]}))
        assert ended.get("status") == "cancelled", ended
    await anyio.sleep(LEASE_S)  # time for the worker to have claimed (and started) a cancelled job, were it to
    assert set(ticks(log)) == {"job-busy"}  # no cancelled job's agent ever started
    store = open_store(pg_url, home=tmp_path)
    try:
        active = [j for j in store.list_jobs(limit=50) if j.status in ("queued", "running")]
        assert active == []
        [worker] = store.list_workers()
        assert worker.running == 0  # its slot is free
    finally:
        store.close()
