"""Benchmark: does a headless client see relay's tools in its first model turn, with only `relay install`'s config?

Claude Code (`claude -p`) and Codex (`codex exec`) are run headless against a mock model that
records, for the first request of each run, whether relay's `delegate` is among the tools
offered (Claude: `mcp__relay__delegate`; Codex: the `mcp__relay` namespace is searchable, i.e.
Codex's `tool_search` lists it - checked by the model calling `tool_search` first). No extra
flags or environment: only what `relay install` wrote in a temp HOME. Warm runs share one
RELAY_HOME (relay's stdio front answers from its snapshot); cold runs get a fresh RELAY_HOME
each (no snapshot: the client waits for the full server, as `relay install` configured).
Target: ≥ 19 of 20 for Claude, 20 of 20 for Codex, on a loaded machine.

Run alone: .venv/bin/python benchmarks/bench_client_hit_rate.py [warm_runs] [cold_runs]
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import RELAY_BIN, REPO, Result, main_for

sys.path.insert(0, str(REPO))
from tests.e2e.client_mock import ClientModel, ToolCall

CLI_BIN = REPO / ".e2e" / "clis" / "node_modules" / ".bin"
NAME = "client_hit_rate"
WARM_RUNS = 20
COLD_RUNS = 5
RUN_TIMEOUT_S = 120


def base_env(root: Path, relay_home: Path) -> dict[str, str]:
    node = shutil.which("node")
    path = ":".join(p for p in (str(Path(node).parent) if node else "", "/usr/local/bin", "/usr/bin", "/bin") if p)
    return {
        "HOME": str(root / "home"),
        "PATH": path,
        "TMPDIR": str(root / "tmp"),
        "LANG": "C.UTF-8",
        "RELAY_HOME": str(relay_home),
    }


def claude_run(root: Path, relay_home: Path) -> bool:
    seen: list[bool] = []

    def brain(api: str, body: dict[str, Any]) -> str:
        if not seen:
            seen.append(any(t.get("name") == "mcp__relay__delegate" for t in body.get("tools", [])))
        return "ok"

    with ClientModel(brain) as model:
        env = {
            **base_env(root, relay_home),
            "CLAUDE_CONFIG_DIR": str(root / "home" / ".claude"),
            "ANTHROPIC_BASE_URL": model.url,
            "ANTHROPIC_API_KEY": "sk-ant-bench",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_MAX_RETRIES": "0",
        }
        if not (root / "home" / ".claude.json").exists() and not (root / "home" / ".claude" / ".claude.json").exists():
            subprocess.run([str(RELAY_BIN), "install", "claude-code"], env=env, check=True, capture_output=True)
        subprocess.run(
            [str(CLI_BIN / "claude"), "-p", "hi", "--output-format", "json"],
            env=env,
            cwd=root / "work",
            capture_output=True,
            timeout=RUN_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    return bool(seen and seen[0])


def codex_run(root: Path, relay_home: Path) -> bool:
    found: list[bool] = []

    def brain(api: str, body: dict[str, Any]) -> Any:
        outputs = [i for i in body.get("input", []) if isinstance(i, dict) and i.get("type") == "tool_search_output"]
        if not outputs:
            return ToolCall("tool_search", {"query": "delegate"}, kind="tool_search_call")
        if not found:
            found.append('"name": "delegate"' in json.dumps(outputs[0]))
        return "ok"

    with ClientModel(brain) as model:
        codex_home = root / "home" / ".codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        config = codex_home / "config.toml"
        if not config.exists():
            config.write_text(
                f'model = "gpt-5.5"\nmodel_provider = "mock"\n\n[model_providers.mock]\nname = "mock"\n'
                f'base_url = "{model.url}/v1"\nwire_api = "responses"\nenv_key = "BENCH_KEY"\n'
                "request_max_retries = 0\nstream_max_retries = 0\n\n[features]\nplugins = false\n"
                "apps = false\n\n[analytics]\nenabled = false\n"
            )
        else:
            text = config.read_text()
            start = text.index('base_url = "') + len('base_url = "')
            config.write_text(text[:start] + f"{model.url}/v1" + text[text.index('"', start) :])
        env = {**base_env(root, relay_home), "CODEX_HOME": str(codex_home), "BENCH_KEY": "sk-bench"}
        if "[mcp_servers.relay]" not in config.read_text():
            subprocess.run([str(RELAY_BIN), "install", "codex"], env=env, check=True, capture_output=True)
        subprocess.run(
            [str(CLI_BIN / "codex"), "exec", "--json", "--skip-git-repo-check", "hi"],
            env=env,
            cwd=root / "work",
            capture_output=True,
            timeout=RUN_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    return bool(found and found[0])


def series(run_one: Any, warm: int, cold: int) -> tuple[int, int, float]:
    root = Path(tempfile.mkdtemp(prefix="relay-hit-"))
    try:
        for sub in ("home", "tmp", "work"):
            (root / sub).mkdir()
        t0 = time.perf_counter()
        warm_hits = sum(run_one(root, root / "relay-warm") for _ in range(warm))
        cold_hits = sum(run_one(root, root / f"relay-cold-{i}") for i in range(cold))
        return warm_hits, cold_hits, time.perf_counter() - t0
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def run(warm: int = WARM_RUNS, cold: int = COLD_RUNS) -> list[Result]:
    claude_warm, claude_cold, claude_s = series(claude_run, warm, cold)
    codex_warm, codex_cold, codex_s = series(codex_run, warm, cold)
    details = {
        "warm_runs": warm,
        "cold_runs": cold,
        "claude_seconds": round(claude_s, 1),
        "codex_seconds": round(codex_s, 1),
        "claude_cold_hits": claude_cold,
        "codex_cold_hits": codex_cold,
    }
    return [
        Result(
            NAME,
            f"claude -p: relay's tools in the first turn (warm, of {warm})",
            claude_warm,
            "runs",
            target=f"≥ {warm - 1}",
            passed=claude_warm >= warm - 1,
            details=details,
        ),
        Result(NAME, f"claude -p: same, fresh RELAY_HOME (of {cold})", claude_cold, "runs"),
        Result(
            NAME,
            f"codex exec: delegate found by tool_search (warm, of {warm})",
            codex_warm,
            "runs",
            target=f"= {warm}",
            passed=codex_warm == warm,
        ),
        Result(NAME, f"codex exec: same, fresh RELAY_HOME (of {cold})", codex_cold, "runs"),
    ]


if __name__ == "__main__":
    w = int(sys.argv[1]) if len(sys.argv) > 1 else WARM_RUNS
    c = int(sys.argv[2]) if len(sys.argv) > 2 else COLD_RUNS

    async def _go() -> list[Result]:
        return await run(w, c)

    sys.exit(main_for(NAME, _go))
