"""Gemini over the Agent Client Protocol beside gemini in print mode: delegate overhead and first-output latency.

The same agent (the pinned gemini-cli in .e2e/clis), the same mock model server (tests/e2e/mocks.py, on
127.0.0.1), the same one-line answer, in one run. Four sides, interleaved round by round after a warm-up:

- print / direct: gemini's print-mode argv as relay builds it (`gemini -p ... -o stream-json`), run by hand.
- acp / direct: relay's ACP driver argv as relay builds it (`python -I -m relay.agents.acp.driver ... --
  gemini --acp`), run by hand: the driver and `gemini --acp`, without relay.
- print / relay and acp / relay: one `delegate(mode="sync")` through the in-memory MCP client, with
  `[agents.gemini] protocol = "print"` or `"acp"` in config.toml.

For each: the wall time of the whole call (the direct run's exit; the relay call's reply), and the
first output: from the start until the answer's text is in the job's stdout (polled every 2 ms). Delegate
overhead = median of the per-round differences relay − direct, per protocol; the cost of ACP itself =
acp direct − print direct. The machine's load average is recorded around the run.

Run: .venv/bin/python benchmarks/bench_acp.py [rounds]   (needs scripts/install-clis; ~2 min)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from _common import REPO, BenchEnv, Result, bench_env, main_for, median, ms, percentile

sys.path.insert(0, str(REPO))
from tests.e2e.mocks import MockModelServer, Reply

NAME = "acp"
ROUNDS = 8
WARMUP = 1
GEMINI = REPO / ".e2e" / "clis" / "node_modules" / ".bin" / "gemini"
MODEL = "gemini-2.5-flash"
ANSWER = "the benchmark's answer ACP-BENCH-9f"
PROMPT = "benchmark: answer in one line"
CALL_TIMEOUT_S = 60.0
POLL_S = 0.002


def gemini_home(root: Path) -> Path:
    """A HOME with gemini's settings.json: API-key auth, no telemetry, no update checks, one attempt."""
    home = root / "gemini-home"
    (home / ".gemini").mkdir(parents=True)
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False, "maxAttempts": 1},
    }
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    return home


def configure(benv: BenchEnv, mock_url: str, protocol: str) -> None:
    home = gemini_home(benv.root)
    env = {
        "GEMINI_CLI_HOME": str(home),
        "GOOGLE_GEMINI_BASE_URL": mock_url,
        "GEMINI_API_KEY": "bench-gemini-mock-key",
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
    }
    table = ", ".join(f'"{k}" = "{v}"' for k, v in env.items())
    (benv.home / "config.toml").write_text(
        f'[agents.gemini]\ncommand = "{GEMINI}"\ndefault_model = "{MODEL}"\nprotocol = "{protocol}"\nenv = {{ {table} }}\n',
        encoding="utf-8",
    )


def invocation(benv: BenchEnv) -> Any:
    """The Invocation relay builds for the benchmark's request (argv, env, cwd, stdin), from its own door."""
    from relay.jobs.engine import Engine, JobRequest

    engine = Engine(benv.settings())
    admitted = engine._door.admit(JobRequest(agent="gemini", prompt=PROMPT, cwd=str(benv.work)), "direct")  # pyright: ignore[reportPrivateUsage]
    return admitted.prepared.invocation


class FirstOutput:
    """A thread that notes when the answer's text first appears in the file `find()` names."""

    def __init__(self, find: Callable[[], Path | None], t0: float) -> None:
        self.find, self.t0 = find, t0
        self.at: float | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        deadline = self.t0 + CALL_TIMEOUT_S
        while not self.done.is_set() and time.perf_counter() < deadline:
            path = self.find()
            if path is not None:
                try:
                    if b"ACP-BENCH" in path.read_bytes():
                        self.at = time.perf_counter() - self.t0
                        return
                except OSError:
                    pass
            time.sleep(POLL_S)

    def stop(self) -> float:
        self.done.set()
        self.thread.join(5)
        if self.at is None:
            raise RuntimeError("the answer never appeared in the job's stdout")
        return self.at


def run_direct(inv: Any, out: Path) -> tuple[float, float]:
    """(wall, first output) of one run of the invocation by hand, its stdout to `out`."""
    out.write_bytes(b"")
    t0 = time.perf_counter()
    watch = FirstOutput(lambda: out, t0)
    with out.open("wb") as fh:
        proc = subprocess.Popen(
            list(inv.argv),
            stdin=subprocess.PIPE if inv.stdin_text is not None else subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.DEVNULL,
            env=dict(inv.env),
            cwd=inv.cwd,
            start_new_session=True,
        )
        if inv.stdin_text is not None:
            assert proc.stdin is not None
            proc.stdin.write(inv.stdin_text.encode())
            proc.stdin.close()
        code = proc.wait(CALL_TIMEOUT_S)
    wall = time.perf_counter() - t0
    first = watch.stop()
    if code != 0:
        raise RuntimeError(f"the direct run exited with {code}: {out.read_text()[-500:]}")
    return wall, first


def newest_stdout(jobs: Path, before: set[str]) -> Path | None:
    try:
        fresh = [p for p in jobs.iterdir() if p.name not in before and not p.name.startswith(".")]
    except OSError:
        return None
    return (fresh[0] / "stdout") if fresh else None


async def run_relay(client: Client, benv: BenchEnv) -> tuple[float, float]:
    jobs = benv.home / "jobs"
    before = {p.name for p in jobs.iterdir()} if jobs.is_dir() else set()
    t0 = time.perf_counter()
    watch = FirstOutput(lambda: newest_stdout(jobs, before), t0)
    with anyio.fail_after(CALL_TIMEOUT_S):
        result = await client.call_tool(
            "delegate", {"agent": "gemini", "prompt": PROMPT, "mode": "sync", "cwd": str(benv.work)}
        )
    wall = time.perf_counter() - t0
    first = watch.stop()
    sc = result.structured_content or {}
    if sc.get("status") != "completed" or sc.get("output") != ANSWER:
        raise RuntimeError(f"delegate did not complete with the answer: {sc}")
    return wall, first


async def measure(rounds: int) -> dict[str, Any]:
    from relay.server.app import build_server

    samples: dict[str, list[tuple[float, float]]] = {
        k: [] for k in ("print_direct", "acp_direct", "print_relay", "acp_relay")
    }
    with MockModelServer() as mock, bench_env() as pbenv, bench_env() as abenv:
        mock.always(Reply(text=ANSWER))
        configure(pbenv, mock.url, "print")
        configure(abenv, mock.url, "acp")
        pinv, ainv = invocation(pbenv), invocation(abenv)
        pout, aout = pbenv.root / "direct-stdout", abenv.root / "direct-stdout"
        async with Client(build_server(pbenv.settings())) as pc, Client(build_server(abenv.settings())) as ac:
            for i in range(WARMUP + rounds):
                order = [
                    ("print_direct", lambda: run_direct(pinv, pout)),
                    ("acp_direct", lambda: run_direct(ainv, aout)),
                ]
                got = {k: await anyio.to_thread.run_sync(fn) for k, fn in (order if i % 2 == 0 else order[::-1])}
                relays = [("print_relay", pc, pbenv), ("acp_relay", ac, abenv)]
                for key, client, benv in relays if i % 2 == 0 else relays[::-1]:
                    got[key] = await run_relay(client, benv)
                if i >= WARMUP:
                    for key, value in got.items():
                        samples[key].append(value)
    out: dict[str, Any] = {
        "rounds": rounds,
        "warmup": WARMUP,
        "acp_argv": list(ainv.argv),
        "print_argv": list(pinv.argv),
    }
    for key, values in samples.items():
        walls, firsts = [w for w, _ in values], [f for _, f in values]
        out[f"{key}_wall_median_ms"] = ms(median(walls))
        out[f"{key}_wall_p90_ms"] = ms(percentile(walls, 90))
        out[f"{key}_first_output_median_ms"] = ms(median(firsts))
        out[f"{key}_wall_ms"] = [ms(w) for w in walls]
        out[f"{key}_first_output_ms"] = [ms(f) for f in firsts]
    for proto in ("print", "acp"):
        relay, direct = samples[f"{proto}_relay"], samples[f"{proto}_direct"]
        out[f"{proto}_overhead_median_ms"] = ms(median([r[0] - d[0] for r, d in zip(relay, direct, strict=True)]))
        out[f"{proto}_first_output_overhead_median_ms"] = ms(
            median([r[1] - d[1] for r, d in zip(relay, direct, strict=True)])
        )
    acp_d, print_d = samples["acp_direct"], samples["print_direct"]
    out["acp_cost_wall_median_ms"] = ms(median([a[0] - p[0] for a, p in zip(acp_d, print_d, strict=True)]))
    out["acp_cost_first_output_median_ms"] = ms(median([a[1] - p[1] for a, p in zip(acp_d, print_d, strict=True)]))
    out["loadavg"] = os.getloadavg()
    return out


async def run(rounds: int = ROUNDS) -> list[Result]:
    if not os.access(GEMINI, os.X_OK):
        raise SystemExit(f"bench_acp needs the pinned gemini-cli at {GEMINI}: run scripts/install-clis")
    d = await measure(rounds)
    r = [
        Result(NAME, "print: delegate sync call (median)", d["print_relay_wall_median_ms"], "ms", details=d),
        Result(NAME, "acp: delegate sync call (median)", d["acp_relay_wall_median_ms"], "ms"),
        Result(NAME, "print: direct run (median)", d["print_direct_wall_median_ms"], "ms"),
        Result(NAME, "acp: direct run of the driver (median)", d["acp_direct_wall_median_ms"], "ms"),
        Result(NAME, "print: relay overhead (median of paired diffs)", d["print_overhead_median_ms"], "ms"),
        Result(NAME, "acp: relay overhead (median of paired diffs)", d["acp_overhead_median_ms"], "ms"),
        Result(NAME, "print: first output via relay (median)", d["print_relay_first_output_median_ms"], "ms"),
        Result(NAME, "acp: first output via relay (median)", d["acp_relay_first_output_median_ms"], "ms"),
        Result(NAME, "print: first output, direct (median)", d["print_direct_first_output_median_ms"], "ms"),
        Result(NAME, "acp: first output, direct (median)", d["acp_direct_first_output_median_ms"], "ms"),
        Result(NAME, "ACP's own cost: acp direct − print direct, wall (median)", d["acp_cost_wall_median_ms"], "ms"),
        Result(
            NAME,
            "ACP's own cost: acp direct − print direct, first output (median)",
            d["acp_cost_first_output_median_ms"],
            "ms",
        ),
    ]
    return r


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else ROUNDS

    async def _go() -> list[Result]:
        return await run(n)

    sys.exit(main_for(NAME, _go))
