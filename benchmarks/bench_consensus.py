"""Benchmark: the first `consensus` after start-up, three mock models that each answer after 2 s.

`relay serve --profile zen` (stdio, a real process) is spawned as a client starts it: initialize
(2025-11-25), notifications/initialized, tools/list; then the client's model takes its first turn
(THINK_S, idle here) and calls consensus: step 1 consults the three models in parallel, steps 2
and 3 report the other answers. Timed from sending step 1 to the answer of step 3. The models are
mock vendor servers on 127.0.0.1 (one Anthropic, one OpenAI-style behind openai and xai), each
answer starting MODEL_DELAY_S after its request, so 2 s is the floor.

Alternated in one run: warm-up on (the default) and off (RELAY_WARMUP=0: the first call imports
the vendor SDKs itself). Also, with warm-up on, a call sent at once after tools/list (no think
time), which waits for whatever of the warm-up is left. Target: first call ≤ 2.3 s (median).

Run alone: .venv/bin/python benchmarks/bench_consensus.py [runs] [think_s]
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from contextlib import ExitStack
from typing import Any

from _common import RELAY_BIN, REPO, Result, bench_env, kill_descendants, main_for, median, percentile

sys.path.insert(0, str(REPO))
from tests.api.mock_servers import MockServer, Recorded, Reply

NAME = "consensus_first_call"
RUNS = 5
MODEL_DELAY_S = 2.0
# The client's model takes its first turn between tools/list and the first tool call.
THINK_S = 3.0
TARGET_S = 2.3
CALL_TIMEOUT_S = 60.0
MODELS = [
    {"model": "sonnet", "stance": "for"},
    {"model": "grok", "stance": "against"},
    {"model": "gpt5", "stance": "neutral"},
]


class SlowMock(MockServer):
    """A mock vendor API whose every answer starts MODEL_DELAY_S after the request."""

    def _next(self, body: Recorded) -> Reply:
        reply = super()._next(body)
        time.sleep(MODEL_DELAY_S)
        return reply


def step(number: int, **extra: Any) -> dict[str, Any]:
    return {
        "step": "Should we migrate the public API from REST to GraphQL?",
        "step_number": number,
        "total_steps": 3,
        "next_step_required": number < 3,
        "findings": f"notes after step {number}",
        **extra,
    }


class Session:
    """A relay serve process driven over raw JSON-RPC lines, as the agent CLIs do."""

    def __init__(self, env: dict[str, str], cwd: str) -> None:
        self.proc = subprocess.Popen(
            [str(RELAY_BIN), "serve"],
            env=env,
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.next_id = 0

    def send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", **msg}).encode() + b"\n")
        self.proc.stdin.flush()

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdout is not None
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        while True:
            reply = json.loads(self.proc.stdout.readline())
            if reply.get("id") == self.next_id:
                return reply

    def consensus(self, args: dict[str, Any]) -> dict[str, Any]:
        reply = self.call("tools/call", {"name": "consensus", "arguments": args})
        result = reply.get("result") or {}
        data = result.get("structuredContent") or json.loads(result["content"][0]["text"])
        if result.get("isError"):
            raise SystemExit(f"consensus failed: {json.dumps(data)[:500]}")
        return data

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(CALL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def first_consensus(env: dict[str, str], cwd: str, think_s: float) -> float:
    """Seconds from consensus step 1 to the answer of step 3, in a relay just started."""
    session = Session(env, cwd)
    try:
        session.call(
            "initialize",
            {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
        )
        session.send({"method": "notifications/initialized"})
        session.call("tools/list", {})
        time.sleep(think_s)  # the client's model thinking: nothing to wait for, a stand-in for its first turn
        started = time.perf_counter()
        first = session.consensus(step(1, models=MODELS))
        session.consensus(step(2, continuation_id=first["continuation_id"]))
        third = session.consensus(step(3, continuation_id=first["continuation_id"]))
        elapsed = time.perf_counter() - started
        if third.get("status") != "consensus_workflow_complete":
            raise SystemExit(f"consensus did not complete: {json.dumps(third)[:500]}")
        return elapsed
    finally:
        session.close()


async def run(runs: int = RUNS, think_s: float = THINK_S) -> list[Result]:
    with bench_env() as benv, ExitStack() as stack:
        anthropic = stack.enter_context(SlowMock("anthropic"))
        openai = stack.enter_context(SlowMock("openai"))
        anthropic.default = Reply(text="Claude says: worth it for clients with varied needs.")
        openai.default = Reply(text="An OpenAI-style model weighs in.")
        env = {
            **benv.env,
            "RELAY_PROFILE": "zen",
            "RELAY_ANTHROPIC_BASE_URL": anthropic.base_url,
            "RELAY_OPENAI_BASE_URL": openai.base_url,
            "RELAY_XAI_BASE_URL": openai.base_url,
            "ANTHROPIC_API_KEY": "sk-ant-bench-0123456789abcdefghij",
            "OPENAI_API_KEY": "sk-bench-0123456789abcdefghijklmn",
            "XAI_API_KEY": "xai-bench-0123456789abcdefghijkl",
        }
        variants = {
            "warm": ({**env}, think_s),
            "cold": ({**env, "RELAY_WARMUP": "0"}, think_s),
            "warm_no_think": ({**env}, 0.0),
        }
        cwd = str(benv.work)
        times: dict[str, list[float]] = {name: [] for name in variants}
        try:
            first_consensus(env, cwd, 0.0)  # discarded: records the stdio front's snapshot, fills the page cache
            names = list(variants)
            for i in range(runs):
                for name in names[i % len(names) :] + names[: i % len(names)]:
                    variant_env, think = variants[name]
                    times[name].append(first_consensus(variant_env, cwd, think))
        finally:
            leaked = kill_descendants()
    med = {name: median(values) for name, values in times.items()}
    details: dict[str, Any] = {
        "runs_each": runs,
        "model_delay_s": MODEL_DELAY_S,
        "think_s": think_s,
        **{f"{name}_s": [round(t, 3) for t in values] for name, values in times.items()},
        **{f"{name}_p90_s": round(percentile(values, 90), 3) for name, values in times.items()},
        "leaked_processes_killed": leaked,
    }
    return [
        Result(
            NAME,
            f"first consensus, 3 × {MODEL_DELAY_S:.0f} s models, warm-up on (median)",
            round(med["warm"], 3),
            "s",
            target=f"≤ {TARGET_S} s",
            passed=med["warm"] <= TARGET_S,
            details=details,
        ),
        Result(NAME, "first consensus, warm-up off (RELAY_WARMUP=0, median)", round(med["cold"], 3), "s"),
        Result(
            NAME,
            "first consensus sent at once after tools/list, warm-up on (median)",
            round(med["warm_no_think"], 3),
            "s",
        ),
    ]


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else RUNS
    think = float(sys.argv[2]) if len(sys.argv) > 2 else THINK_S

    async def _go() -> list[Result]:
        return await run(n, think)

    sys.exit(main_for(NAME, _go))
