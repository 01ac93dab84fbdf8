"""relay end to end over the Agent Client Protocol: the real `gemini --acp`, claude-agent-acp and codex-acp, each
driven by relay's ACP driver against a mock model server on loopback (docs/acp.md).

Each agent is switched to ACP the way a person does it, in config.toml (`protocol = "acp"`, and the
adapter's `acp_command` for claude and codex, installed by scripts/install-clis beside the CLIs).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from relay.runtime import procinfo
from relay.store import Store
from tests.e2e.conftest import CLI_BIN, World, wait_thread_event
from tests.e2e.mocks import Reply

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

ACP_AGENTS = ("gemini", "claude", "codex")
SLOW_ANSWER = "".join(f"piece {i:02d} of the slow answer. " for i in range(16))
ACP_COMMANDS = {"claude": "claude-agent-acp", "codex": "codex-acp"}


def over_acp(agent: str) -> dict[str, dict[str, Any]]:
    """The config.toml keys that put `agent` on ACP."""
    keys: dict[str, Any] = {"protocol": "acp"}
    if agent in ACP_COMMANDS:
        keys["acp_command"] = str(CLI_BIN / ACP_COMMANDS[agent])
    return {agent: keys}


def driver_lines(relay_home: Path, job_id: str) -> list[dict[str, Any]]:
    stdout = relay_home / "jobs" / job_id / "stdout"
    return [json.loads(line) for line in stdout.read_text(encoding="utf-8").splitlines() if line.startswith("{")]


@pytest.mark.parametrize("agent", ACP_AGENTS)
async def test_an_acp_job_runs_to_its_result_with_its_answer_session_and_transcript(world: World, agent: str) -> None:
    world.mock.script(Reply(text="plain answer over ACP ANS-4c1", input_tokens=120, output_tokens=40))
    async with world.relay(**over_acp(agent)) as relay:
        env = await relay.delegate(agent, "say something PROMPT-acp-7")
        transcript = await relay.call("job_result", {"job_id": env["job_id"], "view": "transcript"})
    assert env["status"] == "completed", env["error"]
    assert env["output"] == "plain answer over ACP ANS-4c1"
    assert env["session_id"]
    turns = world.mock.turns()
    assert len(turns) == 1 and "PROMPT-acp-7" in turns[0].text
    lines = driver_lines(world.relay_home, env["job_id"])
    assert lines[0]["type"] in ("session", "update") and lines[-1]["type"] == "result"
    assert {"type": "result"}.items() <= lines[-1].items() and lines[-1]["sessionId"] == env["session_id"]
    streamed = [
        ln.removeprefix("[assistant] ") for ln in transcript["text"].splitlines() if ln.startswith("[assistant]")
    ]
    assert "".join(streamed) == "plain answer over ACP ANS-4c1"
    assert f"[session] {env['session_id']}" in transcript["text"]
    if agent == "claude":  # claude-agent-acp reports the turn's tokens and the session's cost
        assert env["usage"]["input"] > 0 and env["cost_usd"] is not None


@pytest.mark.parametrize("agent", ["gemini", "claude"])
async def test_an_acp_tool_call_writes_the_file_and_its_diff_and_status_are_in_the_envelope(
    world: World, agent: str
) -> None:
    target = world.target()
    world.mock.script(Reply(write=target), Reply(text="wrote it DONE-acp-5e", echo_tool_result=True))
    async with world.relay(**over_acp(agent)) as relay:
        env = await relay.delegate(agent, "write hello.txt", permission="edit")
        transcript = await relay.call("job_result", {"job_id": env["job_id"], "view": "transcript"})
    assert env["status"] == "completed", env["error"]
    assert env["output"].startswith("wrote it DONE-acp-5e")
    assert env["tool_uses"] == 1
    assert target.path in env["files_changed"]
    assert Path(target.path).read_text(encoding="utf-8") == target.content
    assert "[tool ok]" in transcript["text"]


@pytest.mark.parametrize("agent", ACP_AGENTS)
async def test_job_cancel_of_an_acp_job_sends_acps_cancel_and_leaves_no_process(world: World, agent: str) -> None:
    world.mock.always(Reply(text=SLOW_ANSWER * 12, chunks=200, delay_s=0.25))
    async with world.relay(**over_acp(agent)) as relay:
        handle = await relay.delegate(agent, "stream slowly", mode="async")
        job_id = handle["job_id"]
        assert await wait_thread_event(world.mock.streaming, 30), "the agent never reached the mock"
        pgid = relay.job_pid(job_id)
        assert procinfo.group_members(pgid), "the job's process group is empty while it streams"
        started = time.monotonic()
        env = await relay.call("job_cancel", {"job_id": job_id}, timeout=30)
        took = time.monotonic() - started
    assert env["status"] == "cancelled" and env["error"]["code"] == "CANCELLED"
    assert procinfo.group_members(pgid) == []
    assert took < relay.settings.kill_grace_s + 6, f"cancel took {took:.1f} s"
    inbox = (world.relay_home / "jobs" / job_id / "inbox.jsonl").read_text(encoding="utf-8")
    first = json.loads(inbox.splitlines()[0])
    run = (world.relay_home / "jobs" / job_id / "inbox.run").read_text(encoding="utf-8").strip()
    assert first == {"type": "cancel", "run": run}  # stamped for the driver's own run (a retried run ignores it)
    notices = [ln["message"] for ln in driver_lines(world.relay_home, job_id) if ln["type"] == "notice"]
    assert any(n.startswith("cancel (") for n in notices), notices


@pytest.mark.parametrize("agent", ACP_AGENTS)
async def test_an_acp_job_keeps_running_across_a_relay_restart_and_the_next_relay_reads_its_result(
    world: World, agent: str
) -> None:
    # Pieces that differ (gemini stops a turn that repeats itself), a quarter second apart.
    world.mock.always(Reply(text=SLOW_ANSWER, chunks=16, delay_s=0.25))
    async with world.relay(**over_acp(agent)) as relay:
        handle = await relay.delegate(agent, "answer slowly", mode="async")
        job_id = handle["job_id"]
        assert await wait_thread_event(world.mock.streaming, 30), "the agent never reached the mock"
        pgid = relay.job_pid(job_id)
    # relay is gone; the driver and the agent are not.
    assert procinfo.group_members(pgid), "the job did not outlive the relay that started it"
    async with world.relay(**over_acp(agent)) as relay:
        final = await relay.wait_final(job_id, 60)
        transcript = await relay.call("job_result", {"job_id": job_id, "view": "transcript"})
    assert final["status"] == "completed", final["error"]
    assert final["output"] == SLOW_ANSWER
    # The answer's pieces as they streamed, before and after the restart (one transcript line each).
    streamed = [
        ln.removeprefix("[assistant] ") for ln in transcript["text"].splitlines() if ln.startswith("[assistant]")
    ]
    assert "".join(streamed) == SLOW_ANSWER
    rec = Store(world.relay_home / "relay.db").get_job(job_id)
    assert rec is not None and rec.status == "completed"
    assert procinfo.group_members(pgid) == []


async def test_resuming_a_gemini_session_over_acp_fails_with_session_not_found_as_documented(world: World) -> None:
    # gemini 0.61.0's session/load most often answers "No previous sessions found for this project" for a session
    # it recorded (its file, with the answer, is in the project's chats folder): the job fails SESSION_NOT_FOUND
    # (docs/acp.md, Limits). About one run in twelve it finds the session: the job then continues it, as for the
    # other agents. Either way relay's answer is one of the two, never another failure.
    world.mock.script(Reply(text="first answer ANS-1a"), Reply(text="second answer ANS-2b"))
    async with world.relay(**over_acp("gemini")) as relay:
        first = await relay.delegate("gemini", "first question ASK-1a")
        assert first["status"] == "completed", first["error"]
        second = await relay.delegate("gemini", "second question ASK-2b", session_id=first["session_id"])
    turns = world.mock.turns()
    if second["status"] == "failed":
        assert second["error"]["code"] == "SESSION_NOT_FOUND", second["error"]
        assert "gemini" in second["error"]["hint"], second["error"]
        assert len(turns) == 1
        return
    assert second["status"] == "completed", second
    assert (second["output"], second["session_id"]) == ("second answer ANS-2b", first["session_id"])
    assert len(turns) == 2
    for marker in ("ASK-1a", "ANS-1a", "ASK-2b"):
        assert marker in turns[1].text, f"{marker} missing from the resumed request"


@pytest.mark.parametrize("agent", ["claude", "codex"])
async def test_a_second_acp_delegation_with_the_session_id_continues_the_conversation(world: World, agent: str) -> None:
    world.mock.script(Reply(text="first answer ANS-1a"), Reply(text="second answer ANS-2b"))
    async with world.relay(**over_acp(agent)) as relay:
        first = await relay.delegate(agent, "first question ASK-1a")
        assert first["status"] == "completed", first["error"]
        second = await relay.delegate(agent, "second question ASK-2b", session_id=first["session_id"])
    assert second["status"] == "completed", second["error"]
    assert second["output"] == "second answer ANS-2b"  # the loaded session's history is not repeated
    assert second["session_id"] == first["session_id"]
    turns = world.mock.turns()
    assert len(turns) == 2
    for marker in ("ASK-1a", "ANS-1a", "ASK-2b"):
        assert marker in turns[1].text, f"{marker} missing from the resumed request"


@pytest.mark.parametrize("agent", ACP_AGENTS)
async def test_an_upstream_error_fails_the_acp_job_with_a_code_and_the_vendors_message(
    world: World, agent: str
) -> None:
    world.mock.always(Reply(status=500, error="vendor says no ERR-500-acp"))
    async with world.relay(**over_acp(agent)) as relay:
        env = await relay.delegate(agent, "this will fail")
    assert env["status"] == "failed"
    assert env["error"]["code"] == "UPSTREAM_ERROR", env["error"]
    # codex passes on its own words for a 500, as in print mode; the others the vendor's message.
    assert ("high demand" if agent == "codex" else "ERR-500-acp") in env["error"]["message"], env["error"]
    assert world.mock.turns(), "the agent never reached the mock"


@pytest.mark.parametrize("agent", ["gemini", "claude"])
async def test_an_acp_write_under_read_only_is_denied_and_the_job_goes_on(world: World, agent: str) -> None:
    target = world.target()
    world.mock.script(Reply(write=target), Reply(text="could not write DONE-acp-0b", echo_tool_result=True))
    async with world.relay(**over_acp(agent)) as relay:
        env = await relay.delegate(agent, "write hello.txt", permission="read-only")
    assert env["status"] == "completed", env["error"]
    assert env["output"].startswith("could not write DONE-acp-0b")
    assert len(env["permission_denials"]) == 1, env
    assert not Path(target.path).exists()
