"""Benchmark 5: a job that prints 20 MB, through `relay serve` over stdio as a separate process.

`delegate(mode="sync")` calls (3, each after a direct run of the same fake) whose fake floods 20 MB of assistant text events (`[[fake:flood=20,tee=PATH]]`;
the fake appends every stdout line to PATH too). Measured:
  (a) latency: the call's total time, the same fake run directly (stdout to a file), and the
      difference; also the reply's arrival after the tee file's last write (the fake's last line).
      Target: answered ≤ 0.3 s later than the direct run.
  (b) relay's peak RSS: VmHWM of the server process (pid from the `status` tool) after the call.
      Target ≤ 100 MB.
  (c) bytes lost: the raw stream paged back with `job_result(view="events", offset, limit=200000)`
      until `next_offset` is null, concatenated and UTF-8 encoded, compared with the tee file.
      Target 0.

Run alone: .venv/bin/python benchmarks/bench_large_output.py
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from _common import (
    FAKE_CLAUDE,
    RELAY_BIN,
    BenchEnv,
    Result,
    bench_env,
    kib,
    kill_descendants,
    main_for,
    median,
    ms,
    proc_status,
)

NAME = "large_output"
FLOOD_MB = 20
PAGE = 200_000
TARGET_LATENCY_S = 0.3
TARGET_RSS_MB = 100
CALL_TIMEOUT_S = 180.0
REPEATS = 3


def prompt(tee: Path) -> str:
    return f"[[fake:flood={FLOOD_MB},tee={tee}]]"


def direct_run(benv: BenchEnv) -> tuple[float, int]:
    """The same fake run directly, stdout to a file (and its own tee); seconds and stdout bytes."""
    tee = benv.root / "direct.tee"
    out = benv.root / "direct.stdout"
    argv = [str(FAKE_CLAUDE), "-p", prompt(tee), "--output-format", "stream-json", "--verbose"]
    t0 = time.perf_counter()
    with out.open("wb") as fh:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.DEVNULL, cwd=benv.work)
        watchdog = threading.Timer(CALL_TIMEOUT_S, proc.kill)
        watchdog.start()
        try:
            proc.wait()
        finally:
            watchdog.cancel()
    return time.perf_counter() - t0, out.stat().st_size


def compare(got: bytes, want: bytes) -> dict[str, Any]:
    common = min(len(got), len(want))
    first_diff: int | None = None
    differing = 0
    chunk = 1 << 16
    for start in range(0, common, chunk):
        a, b = got[start : start + chunk], want[start : start + chunk]
        if a != b:
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                if x != y:
                    differing += 1
                    if first_diff is None:
                        first_diff = start + i
    missing = abs(len(got) - len(want))
    return {
        "paged_bytes": len(got),
        "tee_bytes": len(want),
        "differing_bytes": differing,
        "missing_or_extra_bytes": missing,
        "lost_bytes": differing + missing,
        "first_difference_at": first_diff,
    }


async def run() -> list[Result]:
    calls: list[float] = []
    directs: list[float] = []
    tails: list[float] = []
    with bench_env() as benv:
        params = StdioServerParameters(command=str(RELAY_BIN), args=["serve"], env=benv.env, cwd=str(benv.work))
        with anyio.fail_after(CALL_TIMEOUT_S * 2):
            async with Client(params, read_timeout_seconds=CALL_TIMEOUT_S) as client:
                st = await client.call_tool("status", {})
                pid = int((st.structured_content or {})["pid"])
                before = proc_status(pid)
                env: dict[str, Any] = {}
                direct_bytes = 0
                tee = benv.root / "relay.tee"
                for i in range(REPEATS):
                    direct_s, direct_bytes = direct_run(benv)
                    directs.append(direct_s)
                    tee = benv.root / f"relay-{i}.tee"
                    t0 = time.perf_counter()
                    res = await client.call_tool(
                        "delegate", {"prompt": prompt(tee), "mode": "sync", "cwd": str(benv.work)}
                    )
                    calls.append(time.perf_counter() - t0)
                    tails.append(time.time() - tee.stat().st_mtime)
                    env = res.structured_content or {}
                    if res.is_error or env.get("status") != "completed":
                        raise RuntimeError(f"delegate failed: {env}")
                after = proc_status(pid)
                job_id = str(env.get("job_id"))
                # Page the last job's raw stream back.
                p0 = time.perf_counter()
                parts: list[str] = []
                offset: int | None = 0
                pages = 0
                while offset is not None:
                    page = await client.call_tool(
                        "job_result", {"job_id": job_id, "view": "events", "offset": offset, "limit": PAGE}
                    )
                    sc = page.structured_content or {}
                    if page.is_error:
                        raise RuntimeError(f"job_result failed: {sc}")
                    parts.append(str(sc["text"]))
                    offset = sc.get("next_offset")
                    pages += 1
                paging_s = time.perf_counter() - p0
                after_paging = proc_status(pid)
                server_children = kill_descendants(pid)
        bytes_cmp = compare("".join(parts).encode("utf-8"), tee.read_bytes())
    rss_mb = kib(after["VmHWM"]) / 1024
    diffs = [c - d for c, d in zip(calls, directs, strict=True)]
    latency = median(diffs)
    tail = median(tails)
    details: dict[str, Any] = {
        "flood_mb": FLOOD_MB,
        "repeats": REPEATS,
        "job_status": env.get("status"),
        "reply_output_chars": len(str(env.get("output", ""))),
        "call_total_ms": [ms(t) for t in calls],
        "direct_run_ms": [ms(t) for t in directs],
        "direct_stdout_bytes": direct_bytes,
        "call_minus_direct_ms": [ms(t) for t in diffs],
        "reply_after_tee_last_write_ms": [ms(t) for t in tails],
        "rss_before_call_mb": round(kib(before["VmRSS"]) / 1024, 1),
        "hwm_before_call_mb": round(kib(before["VmHWM"]) / 1024, 1),
        "hwm_after_calls_mb": round(rss_mb, 1),
        "rss_after_calls_mb": round(kib(after["VmRSS"]) / 1024, 1),
        "hwm_after_paging_mb": round(kib(after_paging["VmHWM"]) / 1024, 1),
        "pages": pages,
        "paging_total_ms": ms(paging_s),
        "relay_pid": pid,
        "leftover_server_children_killed": server_children,
        **bytes_cmp,
    }
    return [
        Result(
            NAME,
            f"{FLOOD_MB} MB job: delegate call − direct run (median of {REPEATS})",
            round(latency, 3),
            "s",
            target=f"≤ {TARGET_LATENCY_S} s",
            passed=latency <= TARGET_LATENCY_S,
            details=details,
        ),
        Result(
            NAME,
            "reply after the fake's last write (tee mtime, median)",
            round(tail, 3),
            "s",
            target=f"≤ {TARGET_LATENCY_S} s",
            passed=tail <= TARGET_LATENCY_S,
        ),
        Result(NAME, "delegate call total (median)", round(median(calls), 3), "s"),
        Result(NAME, "direct run of the same fake (median)", round(median(directs), 3), "s"),
        Result(
            NAME,
            "relay peak RSS (VmHWM) after the calls",
            round(rss_mb, 1),
            "MB",
            target=f"≤ {TARGET_RSS_MB} MB",
            passed=rss_mb <= TARGET_RSS_MB,
        ),
        Result(
            NAME,
            f"bytes lost paging events ({pages} pages)",
            bytes_cmp["lost_bytes"],
            "bytes",
            target="0",
            passed=bytes_cmp["lost_bytes"] == 0,
        ),
        Result(NAME, "paging the whole raw stream", round(paging_s, 3), "s"),
    ]


if __name__ == "__main__":
    sys.exit(main_for(NAME, run))
