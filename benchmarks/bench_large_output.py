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

Also (d) flat memory: one job emitting 256 MB as claude stream-json, 256 MB of plain text (a
generic CLI, `output = "text"`), and a single 64 MB line; for each, a fresh `relay serve`'s peak
RSS (VmHWM) after the job minus its RSS before it. Target: ≤ 30 MB in every case.

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
TARGET_GROWTH_MB = 30
MEMORY_CALL_TIMEOUT_S = 900.0

# Emitters for the memory cases: argv[1] is the case; each writes its output with bounded memory.
EMITTER = r"""
import json, sys
case = next((a for a in sys.argv[1:] if a.startswith("case-")), "case-stream")
out = sys.stdout.buffer
sid = "f1a7f1a7-0000-4000-8000-000000000256"
def line(obj): out.write(json.dumps(obj).encode() + b"\n")
if case == "case-text":
    row = (b"plain text output line " * 200)[:4095] + b"\n"
    for _ in range((256 << 20) // len(row)):
        out.write(row)
    sys.exit(0)
line({"type": "system", "subtype": "init", "session_id": sid, "model": "m"})
if case == "case-stream":
    text = "y" * 65536
    for _ in range(256 * 16):
        line({"type": "assistant", "message": {"content": [{"type": "text", "text": text}]}, "session_id": sid})
else:  # one 64 MB line: an assistant event whose text is 64 MB, written in pieces
    out.write(b'{"type": "assistant", "message": {"content": [{"type": "text", "text": "')
    for _ in range(64):
        out.write(b"z" * (1 << 20))
    out.write(b'"}]}, "session_id": "' + sid.encode() + b'"}\n')
line({"type": "result", "subtype": "success", "is_error": False, "result": "done", "num_turns": 1,
      "session_id": sid, "total_cost_usd": 0, "usage": {"input_tokens": 1, "output_tokens": 1}})
"""
MEMORY_CASES = {
    "claude stream-json, 256 MB": ("claude", "case-stream"),
    "plain text (generic CLI), 256 MB": ("plain", "case-text"),
    "one 64 MB line (stream-json)": ("claude", "case-line"),
}


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


async def memory_case(agent: str, case: str) -> dict[str, Any]:
    """A fresh relay serve runs one job of `case`; its RSS before and peak after, and the job's status."""
    with bench_env() as benv:
        emitter = benv.root / "emitter.py"
        emitter.write_text(EMITTER)
        wrapper = benv.root / "emit"
        wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {emitter} "$@"\n')
        wrapper.chmod(0o755)
        (benv.home / "config.toml").write_text(
            f'[agents.claude]\ncommand = "{wrapper}"\n'
            f'[agents.plain]\ncommand = "{wrapper}"\nargs = ["{{prompt}}"]\noutput = "text"\n'
            "[jobs]\ntimeout_s = 900\nidle_timeout_s = 900\n"
        )
        params = StdioServerParameters(command=str(RELAY_BIN), args=["serve"], env=benv.env, cwd=str(benv.work))
        with anyio.fail_after(MEMORY_CALL_TIMEOUT_S + 60):
            async with Client(params, read_timeout_seconds=MEMORY_CALL_TIMEOUT_S) as client:
                st = await client.call_tool("status", {})
                pid = int((st.structured_content or {})["pid"])
                before = proc_status(pid)
                t0 = time.perf_counter()
                res = await client.call_tool(
                    "delegate",
                    {"agent": agent, "prompt": case, "mode": "async", "cwd": str(benv.work)},
                )
                job_id = str((res.structured_content or {}).get("job_id"))
                status = "running"
                while status in ("queued", "running"):
                    waited = await client.call_tool("job_wait", {"job_ids": [job_id], "timeout_s": 60})
                    jobs = (waited.structured_content or {}).get("jobs") or [{}]
                    status = str(jobs[0].get("status"))
                elapsed = time.perf_counter() - t0
                after = proc_status(pid)
                kill_descendants(pid)
    base = kib(before["VmRSS"]) / 1024
    peak = kib(after["VmHWM"]) / 1024
    return {
        "status": status,
        "rss_before_mb": round(base, 1),
        "peak_mb": round(peak, 1),
        "growth_mb": round(peak - base, 1),
        "seconds": round(elapsed, 1),
    }


async def run_memory() -> list[Result]:
    results: list[Result] = []
    for label, (agent, case) in MEMORY_CASES.items():
        got = await memory_case(agent, case)
        results.append(
            Result(
                NAME,
                f"peak RSS growth, {label}",
                got["growth_mb"],
                "MB",
                target=f"≤ {TARGET_GROWTH_MB} MB",
                passed=got["growth_mb"] <= TARGET_GROWTH_MB and got["status"] == "completed",
                details=got,
            )
        )
    return results


async def run_all() -> list[Result]:
    return await run() + await run_memory()


if __name__ == "__main__":
    if "--memory" in sys.argv:
        sys.exit(main_for(NAME + "_memory", run_memory))
    sys.exit(main_for(NAME, run_all))
