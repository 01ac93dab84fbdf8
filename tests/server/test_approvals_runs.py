"""A job folder outlives one driver run (a retry after a lost worker, a run started again in the same folder): a later
run's permission requests, numbered from 1 again, are asked and answered as its own, never taken for an earlier run's
request that was answered already, nor answered with that run's answer.

The job's process is tests/fakes/acp/driver.py with `again`: after its asks it starts a second run in the same
folder (a fresh run id in `inbox.run`, its inbox read from its end) and asks the same again, from id 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.types import ElicitRequestParams, ElicitResult, ErrorData

from relay.server.app import build_server
from tests.conftest import SettingsFactory
from tests.server.acp_fixture import acp_agent, audit
from tests.server.test_grants import call

pytestmark = pytest.mark.anyio
__all__ = ["acp_agent"]


class Answers:
    """A person who answers each form in turn with the next of `actions`."""

    def __init__(self, *actions: str) -> None:
        self.actions = list(actions)
        self.asked: list[ElicitRequestParams] = []

    async def __call__(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult | ErrorData:
        self.asked.append(params)
        action = self.actions.pop(0)
        return ElicitResult(action=action, content={} if action == "accept" else None)  # pyright: ignore[reportArgumentType]


async def test_a_second_driver_runs_request_1_is_asked_and_gets_its_own_answer_not_the_first_runs(
    make_settings: SettingsFactory, acp_agent: str, workdir: Path, relay_home: Path
) -> None:
    person = Answers("decline", "accept")
    args = {
        "prompt": "clean up [[acp:ask=execute,again]]",
        "agent": acp_agent,
        "cwd": str(workdir),
        "mode": "sync",
        "permission": "edit",
    }
    async with Client(build_server(make_settings()), elicitation_callback=person, mode="legacy") as c:
        failed, env = await call(c, "delegate", args)
    assert not failed and env["status"] == "completed"
    # Asked twice: the second run's request 1 is not the first run's, answered already; each got its own answer.
    assert len(person.asked) == 2
    assert env["output"] == "execute: rejected\nexecute: allowed"
    requested = audit(relay_home, "permission.requested")
    answered = audit(relay_home, "permission.answered")
    assert [e["data"]["id"] for e in requested] == [1, 1]
    runs = [e["data"]["run"] for e in requested]
    assert len(set(runs)) == 2 and all(runs)
    assert [(e["data"]["run"], e["data"]["answer"]) for e in answered] == [(runs[0], "decline"), (runs[1], "accept")]
    kept = sorted(p.name for p in (relay_home / "jobs" / env["job_id"] / "approvals").iterdir())
    assert kept == sorted(f"{run}.1{suffix}" for run in runs for suffix in (".json", ".answer.json"))
    posted = [
        json.loads(line) for line in (relay_home / "jobs" / env["job_id"] / "inbox.jsonl").read_text().splitlines()
    ]
    assert [(m["run"], m["optionId"]) for m in posted] == [(runs[0], "reject-once"), (runs[1], "allow-once")]
