"""The golden captures of the real CLIs, and helpers that feed them (or a fake CLI's output) to a parser."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from relay.agents.base import Adapter, AgentRequest, HostContext, Parser
from relay.events import AgentResult, Event

REPO = Path(__file__).resolve().parents[2]
# Captures of the real CLIs, kept in the repository: tests/agents/golden/<agent>/captured/<name>
# (and the project's own recordings beside them in recorded/, see tests/agents/recorded.py).
GOLDEN = Path(__file__).resolve().parent / "golden"
FAKES = REPO / "tests" / "fakes"
RECORDINGS = FAKES / "recordings"


def captured_path(name: str) -> Path:
    """Where a capture lives: its agent is the name's first word (`codex_exec_json_text.ndjson` → codex)."""
    return GOLDEN / name.split("_", 1)[0] / "captured" / name


def golden(name: str) -> str:
    """A capture's text; a missing capture is an error, never a skip."""
    return captured_path(name).read_text(encoding="utf-8")


def fake_recordings(agent: str) -> list[Path]:
    """The recordings a fake CLI replays for `agent` (copies of the captures), at least one."""
    found = sorted(RECORDINGS.glob(f"{agent}_*"))
    assert found, f"no recordings for {agent} in {RECORDINGS}"
    return found


def feed(parser: Parser, text: str) -> list[Event]:
    """Feed output to a parser line by line, as the engine does (newlines stripped), and collect events."""
    events: list[Event] = []
    for line in text.splitlines():
        events += parser.feed(line)
    return events


def replay(parser: Parser, name: str, exit_code: int | None = 0, stderr: str = "") -> tuple[AgentResult, list[str]]:
    """Feed a golden capture, finish, and return the result with the event types seen."""
    events = feed(parser, golden(name))
    return parser.finish(exit_code, stderr), [e.type for e in events]


def run_fake(
    adapter: Adapter, request: AgentRequest, agent_env: Mapping[str, str] | None = None, job_id: str = "job-1"
) -> tuple[AgentResult, list[Event]]:
    """Build the invocation for a fake CLI, run it, and parse its output (a real process, no mocks)."""
    host = HostContext(
        command=str(FAKES / adapter.name),
        environ={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        agent_env=dict(agent_env or {}),
        job_id=job_id,
    )
    inv = adapter.build(request, host)
    proc = subprocess.run(
        list(inv.argv),
        cwd=inv.cwd,
        env=dict(inv.env),
        input=inv.stdin_text or "",
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=30,
        check=False,
    )
    parser = adapter.parser()
    events = feed(parser, proc.stdout)
    return parser.finish(proc.returncode, proc.stderr), events
