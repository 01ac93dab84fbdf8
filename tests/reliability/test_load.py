"""Load: fifty jobs at once with CLI readers on the same store, and a soak of short jobs (1,000 in the suite,
`RELAY_SOAK_JOBS=10000` for the long run) whose memory, descriptors, threads and folders stay bounded."""

from __future__ import annotations

import gc
import json
import os
import time
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from mcp import Client

from relay.agents.claude import ClaudeParser
from relay.jobs.bounds import growth_bound, pools
from relay.jobs.engine import Engine, JobRequest
from relay.jobs.envelope import clip_event
from relay.jobs.output import LineReader
from relay.runtime.folders import SPARE_PREFIX
from relay.server.app import build_server
from relay.store import Store
from tests.reliability.conftest import RELAY, AdvSettings, quick_agent, record, relay_env

pytestmark = pytest.mark.anyio

CONCURRENT_JOBS = 50
# The suite's soak stays well under a minute; RELAY_SOAK_JOBS=10000 runs the long one on demand.
SOAK_JOBS = int(os.environ.get("RELAY_SOAK_JOBS") or 1000)
SOAK_WAVE = 50
# RSS may grow this much over the soak (allocator arenas, SQLite page cache); a leak per job would exceed it.
SOAK_RSS_GROWTH_LIMIT = 30 * 1024 * 1024
LOCKED = "database is locked"


def normalized(data: dict[str, Any]) -> Any:
    return json.loads(json.dumps(data, default=str))


def events_from_stream(stdout: Path) -> list[tuple[str, Any]]:
    parser = ClaudeParser()
    out: list[tuple[str, Any]] = []
    for line in LineReader(stdout).read(final=True):
        for event in parser.feed(line):
            clipped = clip_event(event)
            out.append((clipped.type, normalized(clipped.data)))
    return out


async def test_fifty_concurrent_jobs_with_cli_readers_lose_no_event_and_never_lock(
    adv_settings: AdvSettings, relay_home: Path, workdir: Path, tmp_path: Path
) -> None:
    settings = adv_settings(
        f"[jobs]\nmax_concurrent = {CONCURRENT_JOBS}\nmax_concurrent_per_agent = {CONCURRENT_JOBS}\n"
    )
    readers: list[tuple[list[str], int, str]] = []
    done = anyio.Event()

    async def read_in_a_loop(args: list[str]) -> None:
        while not done.is_set():
            proc = await anyio.run_process(
                [RELAY, *args], env=relay_env(relay_home), cwd=str(workdir), check=False, stdin=None
            )
            readers.append((args, proc.returncode, proc.stderr.decode(errors="replace")))

    started = time.monotonic()
    async with Client(build_server(settings)) as client:
        ids: list[str] = []
        for i in range(CONCURRENT_JOBS):
            with anyio.fail_after(30):
                result = await client.call_tool(
                    "delegate",
                    {"prompt": f"load {i} [[fake:sleep=1,pattern=64,binary]]", "cwd": str(workdir), "mode": "async"},
                )
            assert result.structured_content is not None
            ids.append(result.structured_content["job_id"])
        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                tg.start_soon(read_in_a_loop, ["jobs", "--json", "--limit", "100"])
                tg.start_soon(read_in_a_loop, ["show", ids[0], "--json"])
                tg.start_soon(read_in_a_loop, ["jobs"])
                waited = await client.call_tool("job_wait", {"job_ids": ids, "mode": "all", "timeout_s": 100})
                done.set()
    elapsed = time.monotonic() - started
    assert waited.structured_content is not None and waited.structured_content["done"] is True
    store = Store(settings.db_path)
    records = [store.get_job(j) for j in ids]
    lost = 0
    for job_id in ids:
        expected = events_from_stream(settings.jobs_dir / job_id / "stdout")
        stored = [(e.type, normalized(e.data)) for _, _, e in store.events(job_id, limit=100_000)]
        lost += abs(len(expected) - len(stored)) + sum(a != b for a, b in zip(expected, stored, strict=False))
    errors = [r.error for r in records if r is not None and r.error]
    locked = [r for r in readers if LOCKED in r[2]] + [e for e in errors if LOCKED in json.dumps(e)]
    record(
        "load",
        "concurrent_jobs",
        {
            "jobs": CONCURRENT_JOBS,
            "seconds": round(elapsed, 1),
            "cli_reads": len(readers),
            "cli_read_failures": sum(1 for r in readers if r[1] != 0),
            "database_is_locked": len(locked),
            "events_lost": lost,
        },
    )
    assert {r.status for r in records if r is not None} == {"completed"} and len(records) == CONCURRENT_JOBS
    assert locked == [] and errors == []
    assert len(readers) >= 3 and [r for r in readers if r[1] != 0] == []
    assert lost == 0


class Peaks:
    """The most descriptors, threads and spare folders the process held at any sample, and when."""

    def __init__(self, me: psutil.Process, jobs_dir: Path) -> None:
        self.me = me
        self.jobs_dir = jobs_dir
        self.fds = self.threads = self.folders = 0
        self.samples = 0

    def now(self) -> tuple[int, int, int]:
        folders = sum(1 for p in self.jobs_dir.iterdir() if p.name.startswith(SPARE_PREFIX))
        return self.me.num_fds(), self.me.num_threads(), folders

    def sample(self) -> None:
        fds, threads, folders = self.now()
        self.fds, self.threads, self.folders = (
            max(self.fds, fds),
            max(self.threads, threads),
            max(self.folders, folders),
        )
        self.samples += 1


@pytest.mark.slow
async def test_a_soak_of_short_jobs_keeps_memory_descriptors_threads_and_folders_within_their_bounds(
    adv_settings: AdvSettings, workdir: Path, tmp_path: Path
) -> None:
    settings = adv_settings(
        "[jobs]\nmax_concurrent = 16\nmax_concurrent_per_agent = 16\n", command=quick_agent(tmp_path / "bin")
    )
    me = psutil.Process(os.getpid())
    statuses: dict[str, int] = {}
    peaks = Peaks(me, settings.jobs_dir)

    async def wave(engine: Engine, n: int) -> None:
        ids = [engine.submit(JobRequest(agent="claude", prompt=f"soak {i}", cwd=str(workdir))) for i in range(n)]
        peaks.sample()  # a whole wave admitted: every slot taken
        for job_id in ids:
            rec = await engine.wait_one(job_id, 60)
            statuses[rec.status] = statuses.get(rec.status, 0) + 1
            peaks.sample()

    fd_bound, thread_bound = growth_bound(settings, "fds"), growth_bound(settings, "threads")
    folder_bound = growth_bound(settings, "folders")
    started = time.monotonic()
    async with Engine(settings).running() as engine:
        with anyio.fail_after(240 * max(1, SOAK_JOBS // 1000)):
            await engine.wait_one(engine.submit(JobRequest(agent="claude", prompt="first", cwd=str(workdir))), 60)
            # What every relay holds once it has run a job (store, audit log, spawn helper): the fixed part.
            fds_start, threads_start, _ = peaks.now()
            await wave(engine, SOAK_WAVE)  # warm-up: imports, caches, the first pages of the database
            gc.collect()
            rss_start = me.memory_info().rss
            statuses.clear()
            for _ in range(SOAK_JOBS // SOAK_WAVE):
                await wave(engine, SOAK_WAVE)
            gc.collect()
            rss_end = me.memory_info().rss
        still_active = engine.list(statuses=("queued", "running"), limit=10)
        fds_end, threads_end, folders_end = peaks.now()
        kept = len(engine._state.live)  # pyright: ignore[reportPrivateUsage]
    elapsed = time.monotonic() - started
    record(
        "load",
        "soak",
        {
            "jobs": SOAK_JOBS,
            "seconds": round(elapsed, 1),
            "jobs_per_second": round(SOAK_JOBS / elapsed, 1),
            "rss_start_mb": round(rss_start / 2**20, 1),
            "rss_end_mb": round(rss_end / 2**20, 1),
            "statuses": statuses,
            "fds": {"start": fds_start, "peak": peaks.fds, "end": fds_end, "bound": fds_start + fd_bound},
            "threads": {
                "start": threads_start,
                "peak": peaks.threads,
                "end": threads_end,
                "bound": threads_start + thread_bound,
            },
            "spare_folders": {"peak": peaks.folders, "end": folders_end, "bound": folder_bound},
            "samples": peaks.samples,
        },
    )
    assert statuses == {"completed": SOAK_JOBS}
    assert still_active == []
    assert rss_end - rss_start < SOAK_RSS_GROWTH_LIMIT
    assert peaks.samples > SOAK_JOBS
    assert peaks.fds - fds_start <= fd_bound, f"{peaks.fds} descriptors, from {fds_start}; pools: {pools(settings)}"
    assert peaks.threads - threads_start <= thread_bound, f"{peaks.threads} threads, from {threads_start}"
    assert peaks.folders <= folder_bound
    assert kept == 0  # nothing of an ended job stays in the engine's memory
