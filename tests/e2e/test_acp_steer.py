"""Steering and per-action approval end to end: the real `gemini --acp`, claude-agent-acp and codex-acp, driven by
relay's ACP driver against the mock model servers, steered with job_send and asking the person (the test client's
elicitation callback) before they write a file their read-only job may not write (docs/acp.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.server.app import build_server
from tests.e2e.conftest import CALL_TIMEOUT_S, World, wait_thread_event
from tests.e2e.mocks import Reply
from tests.e2e.test_acp_agents import ACP_AGENTS, over_acp
from tests.server.acp_fixture import audit
from tests.server.test_grants import Person

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

FIRST = "".join(f"piece {i:02d} of the first answer. " for i in range(16))


async def call(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    with anyio.fail_after(CALL_TIMEOUT_S):
        result = await client.call_tool(tool, args)
    assert result.structured_content is not None, result
    return result.structured_content


@pytest.mark.parametrize("agent", ACP_AGENTS)
async def test_job_send_mid_run_reaches_the_agent_as_the_next_message_of_the_same_session(
    world: World, agent: str
) -> None:
    world.mock.script(Reply(text=FIRST, chunks=16, delay_s=0.25), Reply(text="second answer STEERED-ok-3"))
    async with world.relay(**over_acp(agent)) as relay:
        handle = await relay.delegate(agent, "first task PROMPT-first-1", mode="async")
        job_id = handle["job_id"]
        assert await wait_thread_event(world.mock.streaming, 30), "the agent never reached the mock"
        sent = await relay.call("job_send", {"job_id": job_id, "message": "also add tests STEER-msg-9"})
        final = await relay.wait_final(job_id, 90)
        transcript = await relay.call("job_result", {"job_id": job_id, "view": "transcript"})
    assert sent["status"] == "sent"
    assert final["status"] == "completed", final["error"]
    turns = world.mock.turns()
    assert len(turns) == 2
    assert "PROMPT-first-1" in turns[0].text and "STEER-msg-9" not in turns[0].text
    # The second request carries the first exchange: the message went into the same session.
    assert "STEER-msg-9" in turns[1].text and "PROMPT-first-1" in turns[1].text
    assert "STEER-msg-9" in transcript["text"] and "second answer STEERED-ok-3" in final["output"]
    [entry] = audit(world.relay_home, "job.message")
    assert entry["job_id"] == job_id and entry["data"]["chars"] == len("also add tests STEER-msg-9")


@pytest.mark.parametrize(
    ("agent", "action"),
    [
        *((agent, "accept") for agent in ACP_AGENTS),
        ("gemini", "decline"),
        ("claude", "decline"),
        # No codex decline: codex-acp 0.16.0's only "no" is Abort, which ends the turn (docs/acp.md, Limits).
    ],
)
async def test_a_write_above_a_read_only_job_is_asked_of_the_person_and_their_answer_reaches_the_agent(
    world: World, agent: str, action: str
) -> None:
    target = world.target()
    # A model asks Codex to run a write outside its read-only sandbox; that is what Codex asks approval for.
    write = Reply(write=target, escalate=agent == "codex")
    world.mock.script(write, Reply(text="after the write DONE-perm-2", echo_tool_result=True))
    person = Person(action)
    settings = world.settings(**over_acp(agent))
    async with Client(build_server(settings), elicitation_callback=person, mode="legacy") as client:
        args = {"agent": agent, "prompt": "write hello.txt", "cwd": str(world.workdir), "mode": "sync"}
        env = await call(client, "delegate", args)
    assert env["status"] == "completed", env["error"]
    [asked] = person.asked
    # Codex writes with its shell tool (kind `execute`, which needs `full`); the others with their write tool.
    needs = "'full'" if agent == "codex" else "'edit'"
    assert agent in asked.message and str(world.workdir) in asked.message and needs in asked.message
    assert Path(target.path).exists() == (action == "accept")
    assert "DONE-perm-2" in env["output"]  # declined or not, the job went on to its answer
    [answered] = audit(world.relay_home, "permission.answered")
    assert answered["data"]["answer"] == action and answered["data"]["by"] == "person"
