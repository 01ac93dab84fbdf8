"""Secrets: keys in relay's environment never reach relay's own records (job requests, events, results,
errors, the database and its WAL) or its logs, even when an agent echoes them; other vendors' keys never
reach an agent's environment."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.reliability.conftest import RELAY, AdvSettings, grep_tree, record, relay_env

PLANTED = {
    "ANTHROPIC_API_KEY": "sk-ant-PLANTED-0123456789abcdef0123",
    "OPENAI_API_KEY": "sk-PLANTED-openai-fedcba9876543210",
    "XAI_API_KEY": "xai-PLANTED-grok-5555666677778888",
    "GITHUB_TOKEN": "ghp_PLANTEDgithubtoken1234567890abcd",
}
NEEDLES = [v.encode() for v in PLANTED.values()] + [b"PLANTED"]


def is_agent_output(path: Path) -> bool:
    """The agent's own raw stdout/stderr: what it printed is its output, kept byte for byte."""
    return path.parent.parent.name == "jobs" and path.name in ("stdout", "stderr")


def run(relay_home: Path, workdir: Path, prompt: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RELAY, "run", "claude", prompt, "--cwd", str(workdir), "--json", *extra],
        env=relay_env(relay_home, RELAY_KILL_GRACE_S="0.3", **PLANTED),
        cwd=str(workdir),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.slow
def test_planted_keys_appear_nowhere_in_relays_records_or_logs(
    adv_settings: AdvSettings, relay_home: Path, workdir: Path, tmp_path: Path
) -> None:
    adv_settings()
    env_log = tmp_path / "child-env.json"
    runs = {
        "completed": run(relay_home, workdir, f"print $ANTHROPIC_API_KEY please [[fake:pattern=4,env_log={env_log}]]"),
        "failed": run(relay_home, workdir, "fail [[fake:cut=garbage,exit=2]]"),
        "timed_out": run(relay_home, workdir, "hang [[fake:hang]]", "--timeout", "1"),
        "agent_echoes_its_key": run(relay_home, workdir, "leak [[fake:leak=ANTHROPIC_API_KEY]]"),
    }
    statuses = {name: json.loads(out.stdout)["status"] for name, out in runs.items()}
    child_env = json.loads(env_log.read_text())

    records = grep_tree(relay_home, NEEDLES, skip=is_agent_output)
    logs = {
        name: sum(out.stdout.count(v) + out.stderr.count(v) for v in PLANTED.values()) for name, out in runs.items()
    }
    raw = grep_tree(relay_home, NEEDLES, skip=lambda p: not is_agent_output(p))
    record(
        "secrets",
        "planted_keys",
        {"keys": len(PLANTED), "hits_in_relay_records": sum(records.values()), "hits_in_relay_logs": sum(logs.values())}
        | {"hits_in_agent_raw_output_of_the_echoing_job": sum(raw.values())},
    )
    assert statuses == {
        "completed": "completed",
        "failed": "failed",
        "timed_out": "timed_out",
        "agent_echoes_its_key": "failed",
    }
    assert (relay_home / "relay.db").exists()
    assert records == {}, f"planted keys found in relay's records: {records}"
    assert logs == dict.fromkeys(runs, 0), f"planted keys in relay's stdout/stderr: {logs}"
    # The key relay passes to claude is the agent's own; no other vendor's key reaches it.
    assert child_env.get("ANTHROPIC_API_KEY") == PLANTED["ANTHROPIC_API_KEY"]
    assert not {"OPENAI_API_KEY", "XAI_API_KEY", "GITHUB_TOKEN"} & set(child_env)
    # Only the job that echoed its key holds it, in its raw output (agent output, kept as printed).
    assert raw and all(path.startswith("jobs/") for path in raw) and len({p.split("/")[1] for p in raw}) == 1
