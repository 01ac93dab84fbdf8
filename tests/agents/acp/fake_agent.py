"""A tiny ACP agent written with the SDK's agent side, for the driver's tests (run as a script).

Its behaviour follows words in the prompt: ASK requests a permission and says what it got; WRITE
writes `out.txt` through the client; OUTSIDE tries to read /etc/hostname through the client; SLOW
waits until the turn is cancelled; PAUSE takes 0.3 s before it answers. Every turn echoes the prompt, reports a plan, a tool call with a
diff and a usage count. A session it is asked to load replays one message first (one whose id says "late", three
more after its answer to the load, 50 ms apart, as gemini sends its history).
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    RequestError,
    plan_entry,
    run_agent,
    start_tool_call,
    tool_diff_content,
    update_agent_message_text,
    update_plan,
    update_tool_call,
)
from acp.schema import (
    AgentCapabilities,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    SessionMode,
    SessionModeState,
    SetSessionModeResponse,
    ToolCallUpdate,
    Usage,
)

MODES = SessionModeState(
    current_mode_id="default",
    available_modes=[SessionMode(id="default", name="Default"), SessionMode(id="accept-edits", name="Edits")],
)


class FakeAgent:
    def __init__(self) -> None:
        self.client: Any = None
        self.cancelled: dict[str, asyncio.Event] = {}
        self.turns = 0
        self.replaying: asyncio.Task[None] | None = None

    def on_connect(self, conn: Any) -> None:
        self.client = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION, agent_capabilities=AgentCapabilities(load_session=True)
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        return NewSessionResponse(session_id=f"fake-{os.getpid()}", modes=MODES)

    async def load_session(self, cwd: str, session_id: str, **kwargs: Any) -> LoadSessionResponse:
        await self.client.session_update(session_id, update_agent_message_text("REPLAYED history"))
        if "late" in session_id:  # as gemini does: the rest of the history is sent after the answer
            self.replaying = asyncio.create_task(self.replay_late(session_id))
        return LoadSessionResponse(modes=MODES)

    async def replay_late(self, session_id: str) -> None:
        for index in range(3):
            await asyncio.sleep(0.05)
            await self.client.session_update(session_id, update_agent_message_text(f" REPLAYED late {index}"))

    async def set_session_mode(self, session_id: str, mode_id: str, **kwargs: Any) -> SetSessionModeResponse:
        print(f"mode set to {mode_id}", file=sys.stderr, flush=True)
        return SetSessionModeResponse()

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancelled.setdefault(session_id, asyncio.Event()).set()

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        self.turns += 1
        text = " ".join(getattr(block, "text", "") for block in prompt)
        cancelled = self.cancelled.setdefault(session_id, asyncio.Event())
        cancelled.clear()
        say = lambda t: self.client.session_update(session_id, update_agent_message_text(t))  # noqa: E731
        await self.client.session_update(session_id, update_plan([plan_entry("answer", status="in_progress")]))
        if "PAUSE" in text:  # a model's answer takes a while
            await asyncio.sleep(0.3)
        await say(f"echo {self.turns}: {text.strip()}")
        if "ASK" in text:
            call = ToolCallUpdate(tool_call_id="perm-1", title="rm -rf build", kind="execute", status="pending")
            answer = await self.client.request_permission(
                session_id,
                call,
                [
                    PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
                    PermissionOption(option_id="deny", name="Deny", kind="reject_once"),
                ],
            )
            await say(f" permission={answer.outcome.outcome}:{getattr(answer.outcome, 'option_id', '-')}")
        if "WRITE" in text:
            path = os.path.join(os.getcwd(), "out.txt")
            await self.client.session_update(
                session_id,
                start_tool_call("w1", "write out.txt", kind="edit", status="in_progress", raw_input={"path": path}),
            )
            await self.client.write_text_file(session_id, path, "written by the fake agent\n")
            await self.client.session_update(
                session_id,
                update_tool_call(
                    "w1", status="completed", content=[tool_diff_content(path, "written by the fake agent\n")]
                ),
            )
        if "OUTSIDE" in text:
            try:
                await self.client.read_text_file(session_id, "/etc/hostname")
                await say(" outside=read")
            except RequestError as exc:
                await say(f" outside=refused({exc.code})")
        if "SLOW" in text:
            await say(" waiting")
            await cancelled.wait()
            return PromptResponse(stop_reason="cancelled")
        usage = Usage(total_tokens=15, input_tokens=10, output_tokens=5)
        return PromptResponse(stop_reason="end_turn", usage=usage)


if __name__ == "__main__":
    asyncio.run(run_agent(FakeAgent()))
