"""The golden captures of the real CLIs, and helpers that feed them (or a fake CLI's output) to a parser."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from relay.agents.base import Adapter, AgentRequest, HostContext, Parser
from relay.events import AgentResult, Event

REPO = Path(__file__).resolve().parents[2]
# The shared captures sit beside the repository (in CI the clone has shared/ next to it).
GOLDEN = REPO.parent / "shared" / "golden"
FAKES = REPO / "tests" / "fakes"
RECORDINGS = FAKES / "recordings"


def golden(name: str) -> str:
    """A capture's text: from shared/golden, or its copy in tests/fakes/recordings when shared/ is absent."""
    path = GOLDEN / name if (GOLDEN / name).is_file() else RECORDINGS / name
    return path.read_text(encoding="utf-8")


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
