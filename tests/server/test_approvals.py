"""Per-action approval: an ACP agent's permission request is answered by the job's grant or by the person.

The job's process is tests/fakes/acp/driver.py, which asks permission the way relay's ACP driver reports it (a
`permission_request` line) and reads the answer from the job's inbox, then says what it got ("allowed",
"rejected", "cancelled"). The person is the SDK client's elicitation callback, on both protocol eras: `legacy`
(an elicitation/create request while the call waits) and `auto` (2026-07-28: an InputRequiredResult and a retry).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.server.app import build_server
from relay.server.approvals import Approver
from tests.conftest import SettingsFactory
from tests.server.acp_fixture import acp_agent, audit, http_client, over_http
from tests.server.test_grants import ERAS, Person, call

pytestmark = pytest.mark.anyio
__all__ = ["acp_agent"]


def asking(workdir: Path, agent: str, kinds: str, **more: Any) -> dict[str, Any]:
    """A delegate whose agent asks permission for a tool call of each kind in `kinds` ("execute+read")."""
    return {"prompt": f"clean up [[acp:ask={kinds}]]", "agent": agent, "cwd": str(workdir), "mode": "sync"} | more


@ERAS
async def test_an_action_above_the_grant_that_the_person_accepts_runs(
    make_settings: SettingsFactory, acp_agent: str, workdir: Path, relay_home: Path, era: Any
) -> None:
    person = Person("accept")
    async with Client(build_server(make_settings()), elicitation_callback=person, mode=era) as c:
        failed, env = await call(c, "delegate", asking(workdir, acp_agent, "execute", permission="edit"))
    assert not failed and env["status"] == "completed" and env["output"] == "execute: allowed"
    [asked] = person.asked
    assert "rm -rf build/" in asked.message and str(workdir) in asked.message and acp_agent in asked.message
    assert "'full'" in asked.message and "'edit'" in asked.message
    [requested] = audit(relay_home, "permission.requested")
    assert requested["job_id"] == env["job_id"] and requested["data"]["kind"] == "execute"
    assert requested["data"]["within_grant"] is False
    [answered] = audit(relay_home, "permission.answered")
    assert {k: answered["data"][k] for k in ("id", "answer", "by", "outcome", "optionId", "allowed", "who")} == {
        "id": 1,
        "answer": "accept",
        "by": "person",
        "outcome": "selected",
        "optionId": "allow-once",
        "allowed": True,
        "who": "local (mcp)",
    }


@ERAS
async def test_an_action_the_person_declines_is_refused_and_the_job_goes_on(
    make_settings: SettingsFactory, acp_agent: str, workdir: Path, relay_home: Path, era: Any
) -> None:
    person = Person("decline")
    async with Client(build_server(make_settings()), elicitation_callback=person, mode=era) as c:
        failed, env = await call(c, "delegate", asking(workdir, acp_agent, "execute+read"))
    assert not failed and env["status"] == "completed"
    assert env["output"] == "execute: rejected\nread: allowed"  # told no, went on, and its read needed nobody
    assert len(person.asked) == 1
    answers = [
        (e["data"]["answer"], e["data"]["by"], e["data"]["optionId"]) for e in audit(relay_home, "permission.answered")
    ]
    assert answers == [("decline", "person", "reject-once"), ("accept", "grant", "allow-once")]


@ERAS
async def test_a_client_that_cannot_ask_the_person_gets_the_action_denied(
    make_settings: SettingsFactory, acp_agent: str, workdir: Path, relay_home: Path, era: Any
) -> None:
    async with Client(build_server(make_settings()), mode=era) as c:  # no elicitation callback: headless
        failed, env = await call(c, "delegate", asking(workdir, acp_agent, "execute"))
    assert not failed and env["output"] == "execute: cancelled"
    [answered] = audit(relay_home, "permission.answered")
    assert (answered["data"]["answer"], answered["data"]["by"], answered["data"]["outcome"]) == (
        "unavailable",
        "nobody",
        "cancelled",
    )


async def test_a_headless_client_that_cancels_unasked_gets_the_action_denied(
    make_settings: SettingsFactory, acp_agent: str, workdir: Path
) -> None:
    async with Client(build_server(make_settings()), elicitation_callback=Person("cancel"), mode="legacy") as c:
        failed, env = await call(c, "delegate", asking(workdir, acp_agent, "execute"))
    assert not failed and env["output"] == "execute: cancelled"


@ERAS
async def test_an_action_within_the_jobs_permission_is_allowed_without_asking(
    make_settings: SettingsFactory, acp_agent: str, workdir: Path, relay_home: Path, era: Any
) -> None:
    person = Person("decline")
    async with Client(build_server(make_settings()), elicitation_callback=person, mode=era) as c:
        failed, env = await call(c, "delegate", asking(workdir, acp_agent, "read+edit", permission="edit"))
    assert not failed and env["output"] == "read: allowed\nedit: allowed" and person.asked == []
    assert [e["data"]["by"] for e in audit(relay_home, "permission.answered")] == ["grant", "grant"]


async def test_the_ask_policy_asks_the_person_even_within_the_grant(
    make_settings: SettingsFactory, acp_agent: str, workdir: Path
) -> None:
    person = Person("decline")
    settings = make_settings(f'[agents.{acp_agent}]\napprovals = "ask"\n')
    async with Client(build_server(settings), elicitation_callback=person, mode="legacy") as c:
        failed, env = await call(c, "delegate", asking(workdir, acp_agent, "read"))
    assert not failed and env["output"] == "read: rejected" and len(person.asked) == 1


async def test_a_background_jobs_request_is_asked_by_its_owners_next_job_wait(
    make_settings: SettingsFactory, acp_agent: str, workdir: Path, relay_home: Path
) -> None:
    person = Person("accept")
    async with Client(build_server(make_settings()), elicitation_callback=person, mode="legacy") as c:
        _, started = await call(c, "delegate", asking(workdir, acp_agent, "execute", mode="async"))
        job = started["job_id"]
        with anyio.fail_after(30):  # the request is kept for the person until a call can ask
            while not audit(relay_home, "permission.requested"):
                await anyio.sleep(0.02)
        assert person.asked == [] and audit(relay_home, "permission.answered") == []
        _, waited = await call(c, "job_wait", {"job_ids": [job], "timeout_s": 30})
    assert waited["done"] and waited["jobs"][0]["output"] == "execute: allowed" and len(person.asked) == 1


@ERAS
async def test_a_job_wait_on_the_2026_era_asks_in_its_result_and_the_retry_answers(
    make_settings: SettingsFactory, acp_agent: str, workdir: Path, relay_home: Path, era: Any
) -> None:
    person = Person("accept")
    async with Client(build_server(make_settings()), elicitation_callback=person, mode=era) as c:
        _, started = await call(c, "delegate", asking(workdir, acp_agent, "execute+edit", mode="async"))
        _, waited = await call(c, "job_wait", {"job_ids": [started["job_id"]], "timeout_s": 30})
    assert waited["done"] and waited["jobs"][0]["output"] == "execute: allowed\nedit: allowed"
    assert len(person.asked) == 2  # the edit is above the job's read-only too


async def test_a_request_nobody_asks_about_is_denied_once_its_wait_runs_out(
    make_settings: SettingsFactory, acp_agent: str, workdir: Path, relay_home: Path
) -> None:
    settings = make_settings(RELAY_APPROVAL_WAIT_S="0.3")
    async with Client(build_server(settings), elicitation_callback=Person("accept"), mode="legacy") as c:
        _, started = await call(c, "delegate", asking(workdir, acp_agent, "execute", mode="async"))
        with anyio.fail_after(30):
            while not audit(relay_home, "permission.answered"):
                await anyio.sleep(0.02)
        _, env = await call(c, "job_wait", {"job_ids": [started["job_id"]], "timeout_s": 30})
    assert env["jobs"][0]["output"] == "execute: cancelled"
    [answered] = audit(relay_home, "permission.answered")
    assert (answered["data"]["answer"], answered["data"]["by"]) == ("expired", "nobody")


@ERAS
async def test_over_http_only_the_jobs_owner_is_asked_about_its_request(
    make_settings: SettingsFactory, acp_agent: str, workdir: Path, relay_home: Path, era: Any
) -> None:
    from tests.server.test_principals import ALICE, BOB, ROOT, TOKENS

    people = {name: Person("accept") for name in ("alice", "bob", "root")}
    async with (
        over_http(make_settings(TOKENS)) as port,
        http_client(port, BOB, elicitation_callback=people["bob"], mode=era) as bob,
    ):
        # bob's job runs read-only; its edit is above that, within what bob's person may approve (cap 'edit')
        _, started = await call(bob, "delegate", asking(workdir, acp_agent, "edit", mode="async"))
        job = started["job_id"]
        with anyio.fail_after(30):
            while not audit(relay_home, "permission.requested"):
                await anyio.sleep(0.02)
        async with http_client(port, ALICE, elicitation_callback=people["alice"], mode=era) as alice:
            refused, body = await call(alice, "job_wait", {"job_ids": [job], "timeout_s": 0.5})
        assert refused and body["error"]["code"] == "JOB_NOT_FOUND"
        async with http_client(port, ROOT, elicitation_callback=people["root"], mode=era) as root:
            seen, waited = await call(root, "job_wait", {"job_ids": [job], "timeout_s": 0.5})
        assert not seen and not waited["done"]  # an admin sees the job, but does not answer for it
        assert people["alice"].asked == [] and people["root"].asked == []
        assert audit(relay_home, "permission.answered") == []
        _, waited = await call(bob, "job_wait", {"job_ids": [job], "timeout_s": 30})
    assert waited["jobs"][0]["output"] == "edit: allowed" and len(people["bob"].asked) == 1
    [answered] = audit(relay_home, "permission.answered")
    assert answered["data"]["who"].startswith("bob") and answered["data"]["by"] == "person"


async def test_a_user_tokens_cap_bounds_what_its_person_may_approve(
    make_settings: SettingsFactory, acp_agent: str, workdir: Path, relay_home: Path
) -> None:
    from tests.server.test_principals import ALICE, TOKENS

    person = Person("accept")
    async with (  # alice: a user token, capped at the grant 'edit'
        over_http(make_settings(TOKENS)) as port,
        http_client(port, ALICE, elicitation_callback=person, mode="legacy") as alice,
    ):
        _, env = await call(alice, "delegate", asking(workdir, acp_agent, "execute"))
    assert env["output"] == "execute: cancelled" and person.asked == []
    [answered] = audit(relay_home, "permission.answered")
    assert answered["data"]["answer"] == "capped"


def over_relays_driver(make_settings: SettingsFactory) -> Any:
    """gemini over ACP through relay's own driver (relay.agents.acp.driver), its ACP server the SDK-written fake
    agent of tests/agents/acp (ASK in the prompt: it asks permission to run `rm -rf build` and says the answer)."""
    from tests.agents.acp.test_driver import FAKE_AGENT

    return make_settings(
        f'[agents.gemini]\nprotocol = "acp"\nacp_command = "{sys.executable}"\nacp_args = ["{FAKE_AGENT}"]\n'
    )


@pytest.mark.slow  # each job starts the driver and an ACP agent: two Pythons importing the SDK
@ERAS
async def test_through_relays_acp_driver_the_persons_answer_reaches_the_agent(
    make_settings: SettingsFactory, workdir: Path, relay_home: Path, era: Any
) -> None:
    answers: dict[str, str] = {}
    for action in ("accept", "decline"):
        person = Person(action)
        async with Client(build_server(over_relays_driver(make_settings)), elicitation_callback=person, mode=era) as c:
            args = {"prompt": "ASK", "agent": "gemini", "cwd": str(workdir), "mode": "sync", "permission": "edit"}
            failed, env = await call(c, "delegate", args)
        assert not failed and env["status"] == "completed", env
        assert len(person.asked) == 1 and "rm -rf build" in person.asked[0].message
        answers[action] = env["output"]
    assert "permission=selected:allow" in answers["accept"]
    assert "permission=selected:deny" in answers["decline"]  # told no; its turn went on to its answer
    assert [e["data"]["answer"] for e in audit(relay_home, "permission.answered")] == ["accept", "decline"]


async def test_relay_audit_show_says_what_was_asked_and_how_it_was_answered(
    make_settings: SettingsFactory, acp_agent: str, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from relay.cli.main import main

    async with Client(build_server(make_settings()), elicitation_callback=Person("decline"), mode="legacy") as c:
        _, env = await call(c, "delegate", asking(workdir, acp_agent, "execute"))
    capsys.readouterr()
    assert main(["audit", "show", "--job", env["job_id"]]) == 0
    shown = capsys.readouterr().out
    assert "acpfake #1 execute: Run rm -rf build/ [needs full, job read-only]" in shown
    assert "#1 decline by person: selected reject-once" in shown


async def test_a_request_kept_past_its_wait_is_denied_not_asked_by_the_next_call(
    make_settings: SettingsFactory, acp_agent: str, workdir: Path, relay_home: Path
) -> None:
    import json

    person = Person("accept")
    async with Client(build_server(make_settings()), elicitation_callback=person, mode="legacy") as c:
        _, started = await call(c, "delegate", asking(workdir, acp_agent, "execute", mode="async"))
        folder = relay_home / "jobs" / started["job_id"] / "approvals"
        with anyio.fail_after(30):
            while not (found := list(folder.glob("*.1.json"))):  # request 1 of the driver's run
                await anyio.sleep(0.02)
        [kept] = found
        # as a relay restarted after the request's wait finds it (its own timer died with the relay before)
        kept.write_text(json.dumps(json.loads(kept.read_text()) | {"asked_at": 0.0}))
        _, waited = await call(c, "job_wait", {"job_ids": [started["job_id"]], "timeout_s": 30})
    assert waited["jobs"][0]["output"] == "execute: cancelled" and person.asked == []
    [answered] = audit(relay_home, "permission.answered")
    assert (answered["data"]["answer"], answered["data"]["by"]) == ("expired", "nobody")


async def test_two_calls_waiting_on_one_job_ask_the_person_once(
    make_settings: SettingsFactory, acp_agent: str, workdir: Path, relay_home: Path
) -> None:
    gate = anyio.Event()
    person = Person("accept")

    async def slow_person(context: Any, params: Any) -> Any:
        answer = await person(context, params)
        await gate.wait()  # the person is still reading the form
        return answer

    waited: list[dict[str, Any]] = []
    async with Client(build_server(make_settings()), elicitation_callback=slow_person, mode="legacy") as c:
        _, started = await call(c, "delegate", asking(workdir, acp_agent, "execute", mode="async"))
        job = {"job_ids": [started["job_id"]], "timeout_s": 30}
        async with anyio.create_task_group() as tg:

            async def first() -> None:
                waited.append((await call(c, "job_wait", job))[1])

            tg.start_soon(first)
            with anyio.fail_after(30):
                while not person.asked:
                    await anyio.sleep(0.02)
            _, second = await call(c, "job_wait", job | {"timeout_s": 0.5})  # waits while the form is open
            assert not second["done"] and len(person.asked) == 1
            gate.set()
    assert waited[0]["jobs"][0]["output"] == "execute: allowed" and len(person.asked) == 1


async def test_a_job_wait_on_print_mode_jobs_run_here_looks_for_no_question(
    make_settings: SettingsFactory, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Such a job can ask the person nothing (relay.jobs.known): the wait reads no row and lists no folder for one.
    async def tend(self: object, job_ids: list[str]) -> None:
        raise AssertionError(f"looked for questions of {job_ids}")

    monkeypatch.setattr(Approver, "tend", tend)
    async with Client(build_server(make_settings())) as c:
        ids = []
        for n in range(3):
            failed, started = await call(c, "delegate", {"prompt": f"p{n}", "cwd": str(workdir), "mode": "async"})
            assert not failed
            ids.append(started["job_id"])
        failed, waited = await call(c, "job_wait", {"job_ids": ids, "mode": "all", "timeout_s": 30})
    assert not failed and [j["status"] for j in waited["jobs"]] == ["completed"] * 3
