"""The live status line `relay run` and `relay ask` show on a terminal's stderr while a job runs.

One line (agent, model, elapsed, the last tool or event, tokens and cost so far), redrawn in place
and erased before the answer prints. Nothing is drawn when stderr is not a terminal, so pipes and
scripts see exactly what they saw before.
"""

from __future__ import annotations

import shutil
import time
from typing import Any, TextIO

import anyio

from relay.events import Event

# How often the line is redrawn (the elapsed time moves even when no event comes).
REDRAW_S = 0.25
ERASE = "\r\x1b[2K"


class StatusLine:
    """What the line says, updated from the job's events; drawing is separate so it can be tested pure."""

    def __init__(self, agent: str, model: str | None, started: float | None = None) -> None:
        self.agent = agent
        self.model = model
        self.started = time.monotonic() if started is None else started
        self.last = "starting"
        self.tokens_in = 0
        self.tokens_out = 0
        self.cost: float | None = None

    def feed(self, event: Event) -> None:
        d = event.data
        match event.type:
            case "session.started":
                self.model = str(d.get("model") or self.model or "") or None
                self.last = "session started"
            case "tool.started":
                self.last = f"tool {d.get('name')}"
            case "tool.completed":
                self.last = f"tool {d.get('name')} {'ok' if d.get('ok') else 'failed'}"
            case "message" | "message.delta":
                self.last = "writing"
            case "reasoning":
                self.last = "thinking"
            case "turn.completed":
                self.last = "turn done"
            case "retry":
                self.last = f"retry {d.get('attempt', '')}".strip()
            case _:
                self.last = event.type
        usage = d.get("usage")
        if isinstance(usage, dict):
            self.tokens_in += _int(usage.get("input"))  # pyright: ignore[reportUnknownMemberType]
            self.tokens_out += _int(usage.get("output"))  # pyright: ignore[reportUnknownMemberType]
        cost = d.get("cost_usd")
        if isinstance(cost, int | float):
            self.cost = float(cost)

    def text(self, now: float | None = None, width: int = 80) -> str:
        elapsed = (time.monotonic() if now is None else now) - self.started
        parts = [f"relay: {self.agent}", self.model or "-", f"{elapsed:.0f}s", self.last]
        if self.tokens_in or self.tokens_out:
            parts.append(f"{self.tokens_in}→{self.tokens_out} tok")
        if self.cost is not None:
            parts.append(f"${self.cost:.4f}")
        line = " · ".join(parts)
        return line[: max(10, width - 1)]


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0


class LiveStatus:
    """Draws a StatusLine on a terminal while a job runs; `clear()` erases it for good."""

    def __init__(self, stream: TextIO, line: StatusLine) -> None:
        self.stream = stream
        self.line = line
        self.shown = False
        self.stopped = False

    @staticmethod
    def wanted(stream: TextIO) -> bool:
        try:
            return stream.isatty()
        except (AttributeError, ValueError):
            return False

    def draw(self) -> None:
        if self.stopped:
            return
        width = shutil.get_terminal_size((80, 24)).columns
        self.stream.write(ERASE + self.line.text(width=width))
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        self.stopped = True
        if self.shown:
            self.stream.write(ERASE)
            self.stream.flush()
            self.shown = False

    async def redraw_forever(self) -> None:
        while not self.stopped:
            self.draw()
            await anyio.sleep(REDRAW_S)

    async def follow(self, events: Any) -> None:
        """Feed the line from an engine subscription (`engine.subscribe(job_id)`) and redraw."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.redraw_forever)
            async with events:
                async for _, event in events:
                    self.line.feed(event)
                    self.draw()
            tg.cancel_scope.cancel()


def for_job(engine: Any, job_id: str, stream: TextIO) -> LiveStatus | None:
    """A live status line for the job when `stream` is a terminal, else None (nothing is drawn)."""
    if not LiveStatus.wanted(stream):
        return None
    rec = engine.get(job_id)
    live = LiveStatus(stream, StatusLine(rec.agent, rec.model))
    live.draw()  # at once, so even a quick job shows it before its answer
    return live
