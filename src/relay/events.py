"""Normalized values every backend produces: events while a job runs, and the result when it ends."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relay.errors import RelayError

# Event types, dotted like codex's exec events. Every parser speaks only these.
SESSION_STARTED = "session.started"  # data: session_id, model
MESSAGE_DELTA = "message.delta"  # data: text (a streamed piece of the answer)
MESSAGE = "message"  # data: text (a whole assistant message block)
REASONING = "reasoning"  # data: text
TOOL_STARTED = "tool.started"  # data: id, name, input
TOOL_COMPLETED = "tool.completed"  # data: id, name, ok, output
RETRY = "retry"  # data: attempt, status, message
WARNING = "warning"  # data: message (non-fatal)
TURN_COMPLETED = "turn.completed"  # data: usage
TURN_FAILED = "turn.failed"  # data: message
LOG = "log"  # data: text (non-JSON noise on stdout, kept for the transcript)


@dataclass(frozen=True, slots=True)
class Event:
    """One normalized thing that happened during a job."""

    type: str
    data: dict[str, Any] = field(default_factory=lambda: {})


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts as reported by the backend (0 when it reports none)."""

    input: int = 0
    output: int = 0
    cached: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"input": self.input, "output": self.output, "cached": self.cached}

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input + other.input, self.output + other.output, self.cached + other.cached)


@dataclass(frozen=True, slots=True)
class AgentResult:
    """What a parser concludes once the agent's output has ended."""

    ok: bool
    text: str = ""
    session_id: str | None = None
    model: str | None = None
    usage: Usage = field(default_factory=Usage)
    cost_usd: float | None = None
    num_turns: int | None = None
    tool_uses: tuple[dict[str, Any], ...] = ()
    permission_denials: tuple[dict[str, Any], ...] = ()
    files_changed: tuple[str, ...] = ()
    error: RelayError | None = None
    # The text in a file instead, when it is too large to hold (a kept gateway result): the job's
    # result is written from it, and the file is removed.
    text_file: Path | None = None
