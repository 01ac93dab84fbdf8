"""How soon a front hears of a job's end on another host: from the end the worker wrote to job_wait's answer.

The front is relay's MCP server (the official SDK's in-memory client calling `delegate` then `job_wait`)
in this process, running no jobs; the worker is `relay worker` on another host. Shared by the cluster
tier (a few jobs) and benchmarks/bench_cross_host_wake.py (many).
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
from mcp import Client

from relay.config import Settings
from relay.server.app import build_server
from relay.store import JobStore


async def job_wait_lags(settings: Settings, store: JobStore, work: Path, jobs: int) -> list[float]:
    """Seconds from each job's `finished_at` (the worker's write) to job_wait returning it to the client."""
    lags: list[float] = []
    async with Client(build_server(settings)) as client:
        for n in range(jobs):
            with anyio.fail_after(60):
                sent = await client.call_tool("delegate", {"prompt": f"job-{n}", "mode": "async", "cwd": str(work)})
                job_id = str((sent.structured_content or {})["job_id"])
                waited = await client.call_tool("job_wait", {"job_ids": [job_id], "timeout_s": 50})
            answered = time.time()
            assert not waited.is_error and (waited.structured_content or {}).get("done"), waited.structured_content
            rec = store.get_job(job_id)
            assert rec is not None and rec.status == "completed" and rec.finished_at is not None
            assert (rec.worker or "").startswith("host-a/")  # run on the other host, not by this front
            lags.append(answered - rec.finished_at)
    return lags
