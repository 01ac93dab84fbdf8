"""A front's job_wait against a job ending on another host, on PostgreSQL.

The worker host is a network namespace with a pid namespace of its own (tests/cluster/netns.py), reaching
a throwaway PostgreSQL over its veth link only; `relay worker --name host-a` runs there. The front is
relay's MCP server in this process (RELAY_RUN_JOBS=0: it runs no job), called through the official
SDK's in-memory client: `delegate(mode="async")`, then `job_wait` on the job, one job at a time. Each
sample is the time from the job's `finished_at` (written by the worker) to job_wait's answer reaching
the client. Target (issue 23): within 50 ms.

Needs root and `ip` (network namespaces). Run: .venv/bin/python benchmarks/bench_cross_host_wake.py [JOBS]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from _common import REPO, Result, main_for, ms, pg_cluster

NAME = "cross_host_wake"
JOBS = 40
TARGET_MS = 50.0


async def run(jobs: int = JOBS) -> list[Result]:
    import tempfile

    sys.path.insert(0, str(REPO))
    from tests.cluster.forward import Forwarder
    from tests.cluster.netns import Cluster, remove_stale, require
    from tests.cluster.test_pg_hosts import setup, stop_worker_on, worker_on
    from tests.cluster.wake import job_wait_lags

    from bench_pg_store import stats
    from relay.config import load_settings
    from relay.store import open_store

    require()
    remove_stale()
    with pg_cluster() as pg, tempfile.TemporaryDirectory() as tmp:
        hosts = Cluster()
        try:
            host = hosts.add_host()
            forward = Forwarder([host.root_addr], pg.port, pg.port)
            pg_url = pg.new_database()
            env, work, _ = setup(Path(tmp), pg_url, 0.2)
            far = worker_on(hosts, host, env, pg_url, Path(tmp), "--name", "host-a")
            store = open_store(pg_url, home=Path(env["RELAY_HOME"]))
            try:
                lags = await job_wait_lags(load_settings(env | {"RELAY_RUN_JOBS": "0"}, cwd=work), store, work, jobs)
            finally:
                store.close()
                stop_worker_on(far)
                forward.close()
        finally:
            hosts.close()
    details: dict[str, Any] = stats(lags) | {"max_ms": ms(max(lags)), "samples_ms": [ms(lag) for lag in lags]}
    p99 = details["p99_ms"]
    return [
        Result(
            NAME,
            "job ends on another host -> front's job_wait answers, p99",
            p99,
            "ms",
            target=f"≤ {TARGET_MS:g} ms",
            passed=p99 <= TARGET_MS,
            details=details,
        ),
        Result(NAME, "job ends on another host -> front's job_wait answers, median", details["median_ms"], "ms"),
    ]


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else JOBS

    async def _go() -> list[Result]:
        return await run(count)

    sys.exit(main_for(NAME, _go))
