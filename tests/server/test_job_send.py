"""Steering: `job_send` puts a message into a running ACP job's live session, and says why when it cannot.

The job's process is tests/fakes/acp/driver.py: with `[[acp:steer]]` it waits for a `send` message in its inbox,
reports it delivered (a `steer` line, an event in the job's transcript) and ends with "got: TEXT".
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.agents.acp.inbox import inbox_path
from relay.config import Settings
from relay.errors import ErrorCode, RelayError
from relay.jobs import steer
from relay.server.app import build_server
from relay.store import JobRecord
from tests.conftest import SettingsFactory
from tests.server.acp_fixture import acp_agent, audit, http_client, over_http
from tests.server.test_grants import ERAS, call

pytestmark = pytest.mark.anyio
__all__ = ["acp_agent"]

STEERED = "also add tests, and leave the migrations alone"


def steered(workdir: Path, agent: str) -> dict[str, Any]:
    return {"prompt": "refactor [[acp:steer]]", "agent": agent, "cwd": str(workdir), "mode": "async"}


async def running(c: Client, job_id: str, home: Path) -> None:
    """Until the job runs and its driver has made its inbox (bounded)."""
    with anyio.fail_after(30):
        while True:
            _, env = await call(c, "job_status", {"job_id": job_id})
            if env["status"] == "running" and inbox_path(home / "jobs" / job_id).is_file():
                return
            await anyio.sleep(0.02)


@ERAS
async def test_a_message_sent_to_a_running_acp_job_reaches_its_session_and_is_on_record(
    make_settings: SettingsFactory, acp_agent: str, workdir: Path, relay_home: Path, era: Any
) -> None:
    async with Client(build_server(make_settings()), mode=era) as c:
        _, started = await call(c, "delegate", steered(workdir, acp_agent))
        job = started["job_id"]
        await running(c, job, relay_home)
        failed, sent = await call(c, "job_send", {"job_id": job, "message": STEERED})
        assert not failed and sent["status"] == "sent" and sent["job_id"] == job
        _, waited = await call(c, "job_wait", {"job_ids": [job], "timeout_s": 30})
        _, transcript = await call(c, "job_result", {"job_id": job, "view": "transcript"})
    assert waited["jobs"][0]["output"] == f"got: {STEERED}"
    assert f'[steer] {{"id": "{sent["message_id"]}", "text": "{STEERED}"}}' in transcript["text"]
    digest = hashlib.sha256(STEERED.encode()).hexdigest()
    assert (sent["chars"], sent["sha256"]) == (len(STEERED), digest)
    [entry] = audit(relay_home, "job.message")
    assert entry["job_id"] == job
    assert entry["data"] == {
        "id": sent["message_id"],
        "principal": "local (mcp)",
        "chars": len(STEERED),
        "sha256": digest,
        "text": STEERED,
    }


async def test_a_print_mode_job_is_refused_with_how_to_run_the_agent_over_acp(
    make_settings: SettingsFactory, workdir: Path, relay_home: Path
) -> None:
    async with Client(build_server(make_settings()), mode="legacy") as c:
        prompt = "work [[fake:hang]]"
        _, started = await call(c, "delegate", {"prompt": prompt, "cwd": str(workdir), "mode": "async"})
        job = started["job_id"]
        with anyio.fail_after(30):
            while (await call(c, "job_status", {"job_id": job}))[1]["status"] != "running":
                await anyio.sleep(0.02)
        failed, body = await call(c, "job_send", {"job_id": job, "message": STEERED})
        await call(c, "job_cancel", {"job_id": job})
    assert failed and body["error"]["code"] == "NOT_STEERABLE"
    assert "print mode" in body["error"]["message"] and 'protocol = "acp"' in body["error"]["hint"]
    assert "[agents.claude]" in body["error"]["hint"] and audit(relay_home, "job.message") == []


async def test_a_job_that_has_ended_is_refused_with_how_to_continue_its_session(
    make_settings: SettingsFactory, acp_agent: str, workdir: Path, relay_home: Path
) -> None:
    async with Client(build_server(make_settings()), mode="legacy") as c:
        _, done = await call(c, "delegate", {"prompt": "hi", "agent": acp_agent, "cwd": str(workdir), "mode": "sync"})
        failed, body = await call(c, "job_send", {"job_id": done["job_id"], "message": STEERED})
    assert failed and body["error"]["code"] == "NOT_STEERABLE"
    assert "has ended (completed)" in body["error"]["message"]
    assert "delegate(session_id='fake-acp-session'" in body["error"]["hint"]


async def test_an_unknown_job_is_not_found(make_settings: SettingsFactory) -> None:
    async with Client(build_server(make_settings()), mode="legacy") as c:
        failed, body = await call(c, "job_send", {"job_id": "0123456789abcdef", "message": STEERED})
    assert failed and body["error"]["code"] == "JOB_NOT_FOUND"


def test_a_job_run_by_a_worker_on_another_host_is_refused_as_out_of_reach(tmp_path: Path) -> None:
    rec = JobRecord(**{**RUNNING, "worker": "far:7/ab12"})
    with pytest.raises(RelayError) as refused:
        steer.check(Settings(home=tmp_path), rec, tmp_path, "build-7.lan")
    assert refused.value.code is ErrorCode.NOT_STEERABLE
    assert "runs on host build-7.lan" in refused.value.message and "relay on that host" in refused.value.hint


def test_a_job_whose_driver_has_not_opened_its_inbox_yet_is_told_to_send_again(tmp_path: Path) -> None:
    rec = JobRecord(**RUNNING)
    with pytest.raises(RelayError) as refused:
        steer.check(Settings(home=tmp_path), rec, tmp_path, None)  # its folder is here, its inbox not yet
    assert refused.value.code is ErrorCode.NOT_STEERABLE and "again in a moment" in refused.value.hint
    with pytest.raises(RelayError) as unseen:
        steer.check(Settings(home=tmp_path), rec, tmp_path / "elsewhere", None)  # no folder of it on this host
    assert "out of this relay's reach" in unseen.value.message


def test_the_worker_running_a_job_is_elsewhere_when_its_host_or_boot_differs() -> None:
    from relay.store import WorkerInfo, WorkerRecord

    here = WorkerInfo("a:1/x", "a:1", "host-a", 1, None, "boot-a", None, (), 2, 15.0)

    def worker(host: str, boot: str | None) -> WorkerRecord:
        return WorkerRecord("w", "w", host, 7, None, boot, None, [], 2, 15.0, 0.0, 0.0, None, "running", 0, 1)

    rec = JobRecord(**{**RUNNING, "worker": "w"})
    assert steer.elsewhere(True, rec, here, worker("host-b", "boot-b")) == "host-b"
    assert steer.elsewhere(True, rec, here, worker("host-a", "boot-a")) is None
    assert steer.elsewhere(False, rec, here, worker("host-b", "boot-b")) is None  # one machine's store: here


RUNNING: dict[str, Any] = {
    "id": "0123456789abcdef",
    "agent": "gemini",
    "kind": "cli",
    "status": "running",
    "request_json": '{"protocol": "acp"}',
    "model": None,
    "cwd": "/work",
    "session_id": None,
    "created_at": 0.0,
    "started_at": 0.0,
    "finished_at": None,
    "deadline_at": None,
    "idle_timeout_s": None,
    "pid": 1,
    "pid_start_ticks": None,
    "boot_id": None,
    "owner_pid": None,
    "owner_start_ticks": None,
    "cancel_requested": False,
    "stop_reason": None,
    "exit_code": None,
    "result_json": None,
    "error_json": None,
}


async def test_over_http_only_the_jobs_own_principal_may_send_to_it(
    make_settings: SettingsFactory, acp_agent: str, workdir: Path, relay_home: Path
) -> None:
    from tests.server.test_principals import ALICE, BOB, ROOT, TOKENS

    async with over_http(make_settings(TOKENS)) as port, http_client(port, BOB) as bob:
        _, started = await call(bob, "delegate", steered(workdir, acp_agent))
        job = started["job_id"]
        await running(bob, job, relay_home)
        async with http_client(port, ALICE) as alice:
            as_alice = await call(alice, "job_send", {"job_id": job, "message": "delete everything"})
        async with http_client(port, ROOT) as root:
            as_root = await call(root, "job_send", {"job_id": job, "message": "delete everything"})
        assert as_alice[0] and as_alice[1]["error"]["code"] == "JOB_NOT_FOUND"
        assert as_root[0] and as_root[1]["error"]["code"] == "PERMISSION_NOT_GRANTED"
        assert inbox_path(relay_home / "jobs" / job).read_text() == ""  # nothing reached the agent
        failed, _ = await call(bob, "job_send", {"job_id": job, "message": STEERED})
        _, waited = await call(bob, "job_wait", {"job_ids": [job], "timeout_s": 30})
    assert not failed and waited["jobs"][0]["output"] == f"got: {STEERED}"
    assert [e["data"]["principal"] for e in audit(relay_home, "job.message")] == ["bob (mcp)"]


@pytest.mark.slow  # the job starts relay's driver and an ACP agent: two Pythons importing the SDK
async def test_through_relays_acp_driver_a_message_becomes_the_sessions_next_prompt(
    make_settings: SettingsFactory, workdir: Path, relay_home: Path
) -> None:
    from tests.server.test_approvals import over_relays_driver
    from tests.server.test_grants import Person

    args = {"prompt": "ASK", "agent": "gemini", "cwd": str(workdir), "mode": "async", "permission": "edit"}
    person = Person("accept")
    async with Client(build_server(over_relays_driver(make_settings)), elicitation_callback=person) as c:
        _, started = await call(c, "delegate", args)
        job = started["job_id"]
        with anyio.fail_after(60):  # its first turn waits on the person: the message comes in meanwhile
            while not audit(relay_home, "permission.requested"):
                await anyio.sleep(0.02)
        failed, sent = await call(c, "job_send", {"job_id": job, "message": STEERED})
        assert not failed, sent
        _, waited = await call(c, "job_wait", {"job_ids": [job], "timeout_s": 60})
        _, transcript = await call(c, "job_result", {"job_id": job, "view": "transcript"})
    assert waited["done"] and waited["jobs"][0]["status"] == "completed"
    assert "permission=selected:allow" in waited["jobs"][0]["output"]
    assert STEERED in waited["jobs"][0]["output"]  # the fake agent echoes each prompt of its session
    assert "[steer]" in transcript["text"] and STEERED in transcript["text"]
