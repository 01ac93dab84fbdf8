"""Benchmark: the task tracker's ready-work query on a large project.

A project of 10,000 tasks and 20,000 `blocks` dependencies is loaded the way a clone loads it:
from a `.gobby/tasks.jsonl` file, through the import. Each task waits for up to four older tasks
(so the graph is acyclic); 30% are closed, 10% in progress, priorities 0..4 at random. Then
`list_ready_tasks` (limit 10, the tool's default) is timed: the core query (`TaskStore.ready`) and
the whole MCP call through the SDK's in-memory client (`relay serve --toolsets tasks`).
Target: median ≤ 10 ms for both. Also reported: list_blocked_tasks, check_dependency_cycles,
create_task, and a full sync export.

Run alone: .venv/bin/python benchmarks/bench_tracker.py
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from _common import Result, bench_env, main_for, median, ms, percentile

NAME = "tracker"
TASKS = 10_000
DEPENDENCIES = 20_000
RUNS = 200
TARGET_MS = 10.0
CALL_TIMEOUT_S = 30.0
SEED = 20261123


def graph_jsonl(rng: random.Random) -> tuple[str, int]:
    """The JSONL text of the project and the number of dependencies in it."""
    ids = [f"gt-{i:06x}" for i in range(TASKS)]
    deps: dict[str, set[str]] = {i: set() for i in ids}
    count = 0
    while count < DEPENDENCIES:
        later = rng.randrange(1, TASKS)
        earlier = rng.randrange(max(0, later - 2000), later)
        if ids[earlier] not in deps[ids[later]]:
            deps[ids[later]].add(ids[earlier])
            count += 1
    lines: list[str] = []
    for n, task_id in enumerate(ids):
        roll = rng.random()
        status = "closed" if roll < 0.3 else "in_progress" if roll < 0.4 else "open"
        stamp = f"2026-01-01T00:00:00.{n:06d}+00:00"
        record = {
            "id": task_id,
            "title": f"task {n}",
            "description": None,
            "status": status,
            "created_at": stamp,
            "updated_at": stamp,
            "project_id": "bench",
            "parent_id": None,
            "deps_on": sorted(deps[task_id]),
            "priority": rng.randint(0, 4),
            "type": "task",
            "labels": [],
        }
        lines.append(json.dumps(record, sort_keys=True))
    return "".join(line + "\n" for line in lines), count


def timed(fn: Callable[[], Any], runs: int = RUNS) -> list[float]:
    fn()  # warm the page cache and SQLite's statement cache
    samples: list[float] = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def stats(samples: list[float]) -> dict[str, float]:
    return {
        "median_ms": ms(median(samples)),
        "p95_ms": ms(percentile(samples, 95)),
        "min_ms": ms(min(samples)),
        "runs": len(samples),
    }


async def run() -> list[Result]:
    from relay.server.app import build_server
    from relay.tracker import TaskStore, resolve_project
    from relay.tracker.sync import TaskSync, merge_records

    rng = random.Random(SEED)
    text, dep_count = graph_jsonl(rng)
    with bench_env() as env:
        proj_dir = env.work / "proj"
        proj_dir.mkdir()
        project = resolve_project(proj_dir)
        store = TaskStore(env.home / "relay.db")
        start = time.perf_counter()
        imported = merge_records(store, project, text)
        load_s = time.perf_counter() - start
        ready_ids = [t.id for t in store.ready(project, limit=10)]
        blocked_total = len(store.blocked(project, limit=1000))
        core = timed(lambda: store.ready(project, limit=10))
        ready_all = timed(lambda: store.ready(project, limit=1000), runs=20)
        blocked = timed(lambda: store.blocked(project, limit=20), runs=20)
        cycles = timed(lambda: store.cycles(project), runs=10)
        creates = timed(lambda: store.create(project, "new work", session_id="bench"), runs=100)
        export = timed(lambda: TaskSync(store).export_file(project), runs=5)
        store.close()

        settings = env.settings().with_(toolsets=("tasks",), profile=None)
        mcp_samples: list[float] = []
        async with Client(build_server(settings)) as client:
            args = {"limit": 10, "project": str(proj_dir)}
            for i in range(RUNS + 1):
                with anyio.fail_after(CALL_TIMEOUT_S):
                    start = time.perf_counter()
                    result = await client.call_tool("list_ready_tasks", args)
                    elapsed = time.perf_counter() - start
                assert not result.is_error, result
                if i:
                    mcp_samples.append(elapsed)
            assert result.structured_content is not None
            assert [t["id"] for t in result.structured_content["tasks"]] == ready_ids

    core_median = ms(median(core))
    mcp_median = ms(median(mcp_samples))
    graph = {
        "tasks": TASKS,
        "dependencies": dep_count,
        "import_s": round(load_s, 2),
        "imported": imported.created,
        "ready_first_10": ready_ids,
        "blocked_tasks_seen": blocked_total,
    }
    return [
        Result(
            NAME,
            "list_ready_tasks core query (10k tasks, 20k deps), median",
            core_median,
            "ms",
            target=f"≤ {TARGET_MS:g} ms",
            passed=core_median <= TARGET_MS,
            details={**stats(core), **graph},
        ),
        Result(
            NAME,
            "list_ready_tasks MCP call (in-memory client), median",
            mcp_median,
            "ms",
            target=f"≤ {TARGET_MS:g} ms",
            passed=mcp_median <= TARGET_MS,
            details=stats(mcp_samples),
        ),
        Result(
            NAME,
            "list_ready_tasks core, limit 1000 (all ready), median",
            ms(median(ready_all)),
            "ms",
            details=stats(ready_all),
        ),
        Result(NAME, "list_blocked_tasks core, median", ms(median(blocked)), "ms", details=stats(blocked)),
        Result(NAME, "check_dependency_cycles core, median", ms(median(cycles)), "ms", details=stats(cycles)),
        Result(NAME, "create_task core, median", ms(median(creates)), "ms", details=stats(creates)),
        Result(NAME, "sync export of 10k tasks, median", ms(median(export)), "ms", details=stats(export)),
        Result(NAME, "JSONL import of 10k tasks + 20k deps", round(load_s * 1000), "ms"),
    ]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main_for(NAME, run))
