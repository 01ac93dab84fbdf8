"""relay end to end: the real claude, codex, gemini and copilot CLIs, each against a mock model server on loopback.

Every test drives relay through the official MCP client in memory and checks what relay reports
(the envelope) against what the mock served and what happened on disk and in the process table.
"""

from __future__ import annotations

import contextlib
import json
import os
import time

import pytest

from relay.agents.copilot import session_id_for
from relay.runtime import procinfo
from tests.e2e.conftest import AGENTS, MOCK_KEYS, World, wait_thread_event
from tests.e2e.mocks import Reply

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

# The header that carries the CLI's session id to the model server, where there is one.
SESSION_HEADERS = {"claude": "x-claude-code-session-id", "codex": "session-id"}


def _usage(agent: str, input_tokens: int, output_tokens: int) -> dict[str, int]:
    # Copilot prints no token counts in its JSON stream, so relay cannot report any.
    if agent == "copilot":
        return {"input": 0, "output": 0, "cached": 0}
    return {"input": input_tokens, "output": output_tokens, "cached": 0}


def _stdin_of(pid: int) -> str | None:
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/{pid}/fd/0")
    return None


# plain answer ---------------------------------------------------------------------------------


@pytest.mark.parametrize("agent", AGENTS)
async def test_a_plain_answer_comes_back_with_the_session_and_usage_the_mock_served(world: World, agent: str) -> None:
    world.mock.script(Reply(text="plain answer ANS-7f3", input_tokens=123, output_tokens=45))
    async with world.relay() as relay:
        env = await relay.delegate(agent, "say something PROMPT-91c")
    assert {k: env[k] for k in ("status", "error", "output", "exit_code", "usage", "agent")} == {
        "status": "completed",
        "error": None,
        "output": "plain answer ANS-7f3",
        "exit_code": 0,
        "usage": _usage(agent, 123, 45),
        "agent": agent,
    }
    turns = world.mock.turns()
    assert len(turns) == 1, [t.path for t in world.mock.requests]
    assert "PROMPT-91c" in turns[0].text
    assert MOCK_KEYS[agent] in json.dumps(turns[0].headers)
    assert env["session_id"]
    if agent in SESSION_HEADERS:
        assert turns[0].headers[SESSION_HEADERS[agent]] == env["session_id"]
    if agent == "copilot":
        # relay names copilot's sessions itself, from the job id.
        assert env["session_id"] == session_id_for(env["job_id"])
    if agent == "claude":
        assert env["cost_usd"] is not None and env["cost_usd"] > 0


# tools and permissions ------------------------------------------------------------------------


@pytest.mark.parametrize("agent", AGENTS)
async def test_a_tool_call_writes_the_file_under_edit_permission(
    world: World, agent: str, codex_sandbox: tuple[bool, str]
) -> None:
    target = world.target()
    world.mock.script(Reply(write=target), Reply(text="wrote it DONE-5e1", echo_tool_result=True))
    async with world.relay() as relay:
        env = await relay.delegate(agent, "write hello.txt", permission="edit")
    assert env["status"] == "completed", env["error"]
    assert env["output"].startswith("wrote it DONE-5e1")
    assert env["tool_uses"] >= 1
    assert env["permission_denials"] == []
    assert len(world.mock.turns()) == 2
    if agent == "copilot":
        assert target.path in env["files_changed"]
    if agent == "codex" and not codex_sandbox[0]:
        # Codex runs its shell tool inside bubblewrap even in workspace-write.
        pytest.skip(f"codex's sandbox cannot run here, so its shell tool cannot write: {codex_sandbox[1]}")
    with open(target.path, encoding="utf-8") as fh:
        assert fh.read() == target.content


@pytest.mark.parametrize("agent", AGENTS)
async def test_a_tool_call_that_writes_is_refused_under_read_only_permission(
    world: World, agent: str, codex_sandbox: tuple[bool, str]
) -> None:
    target = world.target()
    world.mock.script(Reply(write=target), Reply(text="could not write DONE-0b2", echo_tool_result=True))
    async with world.relay() as relay:
        env = await relay.delegate(agent, "write hello.txt", permission="read-only")
    assert env["status"] == "completed", env["error"]
    assert env["output"].startswith("could not write DONE-0b2")
    if agent == "codex":
        # Codex reports no item when its sandbox blocks a command: only the model's reply shows it.
        if not codex_sandbox[0]:
            pytest.skip(f"codex's sandbox cannot run here, so read-only is not enforced: {codex_sandbox[1]}")
        assert "Read-only file system" in env["output"]
    else:
        assert len(env["permission_denials"]) == 1, env
        assert env["permission_denials"][0]["tool_name"] in ("Write", "write_file", "create")
    assert not os.path.exists(target.path)


# sessions -------------------------------------------------------------------------------------


@pytest.mark.parametrize("agent", AGENTS)
async def test_a_second_delegation_with_the_session_id_continues_the_conversation(world: World, agent: str) -> None:
    world.mock.script(Reply(text="first answer ANS-1a"), Reply(text="second answer ANS-2b"))
    async with world.relay() as relay:
        first = await relay.delegate(agent, "first question ASK-1a")
        assert first["status"] == "completed", first["error"]
        second = await relay.delegate(agent, "second question ASK-2b", session_id=first["session_id"])
    assert second["status"] == "completed", second["error"]
    assert second["output"] == "second answer ANS-2b"
    assert second["session_id"] == first["session_id"]
    turns = world.mock.turns()
    assert len(turns) == 2
    replayed = turns[1].text
    for marker in ("ASK-1a", "ANS-1a", "ASK-2b"):
        assert marker in replayed, f"{marker} missing from the resumed request"


# upstream errors ------------------------------------------------------------------------------

ERROR_CODES = {401: "AUTH_INVALID", 429: "RATE_LIMITED", 500: "UPSTREAM_ERROR"}
ERROR_CASES = [
    *((agent, status) for agent in ("claude", "codex", "gemini") for status in (401, 429, 500)),
    # Copilot retries 429/5xx five times (8-20 s here) and 401 twice: the slowest cases of the tier.
    ("copilot", 401),
    ("copilot", 429),
    ("copilot", 500),
]
# Some CLIs drop the vendor's error body and print their own text instead; relay can only pass that on.
CLI_OWN_MESSAGE = {
    ("codex", 429): "429",  # "exceeded retry limit, last status: 429 Too Many Requests"
    ("codex", 500): "high demand",  # "We're currently experiencing high demand, ..."
    ("copilot", 401): "HTTP 401",  # "Authentication failed with provider at ... (HTTP 401)."
}
# Wall-clock bound per CLI for a failing upstream (Copilot retries a 500 for ~20 s).
ERROR_TIME_LIMIT_S = {"claude": 20.0, "codex": 20.0, "gemini": 30.0, "copilot": 60.0}


@pytest.mark.parametrize(("agent", "status"), ERROR_CASES, ids=[f"{a}-{s}" for a, s in ERROR_CASES])
async def test_an_upstream_error_fails_the_job_with_its_code_and_the_vendors_message(
    world: World, agent: str, status: int
) -> None:
    vendor_message = f"vendor says no ERR-{status}-d4"
    world.mock.always(Reply(status=status, error=vendor_message))
    started = time.monotonic()
    async with world.relay() as relay:
        env = await relay.delegate(agent, "this will fail")
    elapsed = time.monotonic() - started
    assert env["status"] == "failed"
    assert env["error"]["code"] == ERROR_CODES[status], env["error"]
    expected = CLI_OWN_MESSAGE.get((agent, status), vendor_message)
    assert expected in env["error"]["message"], env["error"]
    assert elapsed < ERROR_TIME_LIMIT_S[agent], f"{agent} took {elapsed:.1f} s to fail"
    assert world.mock.turns(), "the CLI never reached the mock"


# hangs and cancellation -----------------------------------------------------------------------

# How relay stops a CLI whose upstream hangs: an idle timeout where the CLI prints its start-up
# events at once; the wall clock for gemini, which prints nothing for its first ~3 s.
HANG_LIMITS = {
    "claude": ({"idle_timeout_s": 3}, None, "idle"),
    "codex": ({"idle_timeout_s": 3}, None, "idle"),
    "gemini": ({}, 12, "past its timeout"),
}


@pytest.mark.parametrize("agent", sorted(HANG_LIMITS))
async def test_a_hung_upstream_ends_in_relays_timeout_with_no_process_left(world: World, agent: str) -> None:
    config, wall, reason = HANG_LIMITS[agent]
    world.mock.always(Reply(hang=True))
    async with world.relay(**{agent: config}) as relay:
        handle = await relay.delegate(agent, "hang please", mode="async", **({"timeout_s": wall} if wall else {}))
        job_id = handle["job_id"]
        assert await wait_thread_event(world.mock.streaming, 30), "the CLI never reached the mock"
        pgid = relay.job_pid(job_id)
        members = procinfo.group_members(pgid)
        assert members, "the job's process group is empty while the upstream hangs"
        assert {_stdin_of(pid) for pid in members} <= {"/dev/null", None}, "a job process has an open stdin"
        final = await relay.wait_final(job_id, 40)
    assert final["status"] == "timed_out"
    assert final["error"]["code"] == "TIMEOUT" and reason in final["error"]["message"]
    assert procinfo.group_members(pgid) == []
    assert await wait_thread_event(world.mock.disconnected, 10), "the hung connection was never closed"


@pytest.mark.parametrize("agent", ["claude", "codex", "gemini"])
async def test_job_cancel_mid_stream_ends_the_job_cancelled_with_no_process_left(world: World, agent: str) -> None:
    # A slow stream: 200 pieces, a quarter second apart; the job is cancelled while it trickles.
    world.mock.always(Reply(text="slow " * 200, chunks=200, delay_s=0.25))
    async with world.relay() as relay:
        handle = await relay.delegate(agent, "stream slowly", mode="async")
        job_id = handle["job_id"]
        assert await wait_thread_event(world.mock.streaming, 30), "the CLI never reached the mock"
        pgid = relay.job_pid(job_id)
        members = procinfo.group_members(pgid)
        assert members, "the job's process group is empty while it streams"
        assert {_stdin_of(pid) for pid in members} <= {"/dev/null", None}, "a job process has an open stdin"
        started = time.monotonic()
        env = await relay.call("job_cancel", {"job_id": job_id}, timeout=30)
        took = time.monotonic() - started
        assert env["status"] == "cancelled"
        assert env["error"]["code"] == "CANCELLED"
        status = await relay.call("job_status", {"job_id": job_id})
    assert status["status"] == "cancelled"
    assert procinfo.group_members(pgid) == []
    assert took < relay.settings.kill_grace_s + 6, f"cancel took {took:.1f} s"
