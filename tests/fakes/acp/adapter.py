"""A test agent driven "over ACP" by tests/fakes/acp/driver.py: its adapter and the parser of the driver's lines.

It stands where relay.agents.acp's adapter stands (a driver process as the job's process, its JSON lines turned
into events), so relay's steering and approvals are tested against the contract, not against one agent.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from relay import agents
from relay import events as ev
from relay.agents.base import AgentRequest, HostContext, Invocation, child_env
from relay.events import AgentResult, Event

DRIVER = Path(__file__).resolve().parent / "driver.py"
NAME = "acpfake"


class FakeAcpParser:
    def __init__(self) -> None:
        self.text = ""
        self.session_id: str | None = None

    def feed(self, line: str) -> list[Event]:
        try:
            data: dict[str, Any] = json.loads(line)
        except ValueError:
            return [Event(ev.LOG, {"text": line.rstrip()})]
        kind = str(data.pop("type", ""))
        if kind == "session.started":
            self.session_id = data.get("session_id")
            return [Event(ev.SESSION_STARTED, data)]
        if kind == "result":
            self.text = str(data.get("text") or "")
            return []
        return [Event(kind, data)]

    def finish(self, exit_code: int | None, stderr_tail: str) -> AgentResult:
        return AgentResult(ok=exit_code == 0, text=self.text, session_id=self.session_id)


class FakeAcpAdapter:
    name = NAME
    executable = sys.executable
    install_hint = "part of relay's tests"
    protocol = "acp"

    def __init__(self, jobs_dir: Path) -> None:
        self.jobs_dir = jobs_dir

    def build(self, request: AgentRequest, host: HostContext) -> Invocation:
        folder = str(self.jobs_dir / host.job_id)
        argv = (sys.executable, str(DRIVER), folder, request.prompt)
        return Invocation(argv=argv, env=child_env(host), cwd=request.cwd, stdin_text=None)

    def parser(self) -> FakeAcpParser:
        return FakeAcpParser()


def register(jobs_dir: Path) -> None:
    """Make `acpfake` an agent of this process, its jobs under `jobs_dir`."""
    agents.register(FakeAcpAdapter(jobs_dir))  # pyright: ignore[reportArgumentType]
