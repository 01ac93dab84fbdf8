"""Tasks that ask the client for input (`input_required`, SEP-2663 over SEP-2322), through the SDK's client.

The tools are the conformance fixture's (tests/server/tasks_fixture.py): `confirm_delete` and
`multi_input` ask from their body while they run (one and two elicitations), `test_tool_with_task`
asks through a `Resolve(...)` parameter before its work starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, ElicitRequestParams, ElicitResult, ErrorData, InputRequiredResult

from tests.server.tasks_fixture import build_fixture_server
from tests.server.test_mcp_tasks import (
    Raw,
    Tasks,
    TasksUpdate,
    UpdateParams,
    poll_until_final,
    start_task,
    tasks_call,
)

pytestmark = pytest.mark.anyio


async def accept_all(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult | ErrorData:
    """An elicitation callback: declares the capability (the tests answer through tasks/update)."""
    return ElicitResult(action="accept", content={"name": "sync-user", "confirm": True})


def client(relay_home: Path, **kwargs: Any) -> Client:
    return Client(build_fixture_server(relay_home), extensions=[Tasks()], **kwargs)


async def update(c: Client, task_id: str, responses: dict[str, Any]) -> dict[str, Any]:
    with anyio.fail_after(60):
        raw = await c.session.send_request(
            TasksUpdate(params=UpdateParams(taskId=task_id, inputResponses=responses)), Raw
        )
    return {k: v for k, v in raw.model_dump(by_alias=True, mode="json").items() if k != "_meta"}


async def until_input_required(c: Client, task_id: str) -> dict[str, Any]:
    with anyio.fail_after(30):
        while True:
            task = await tasks_call(c, "tasks/get", task_id)
            if task["status"] != "working":
                return task
            await anyio.sleep(0.05)


def text_of(task: dict[str, Any]) -> str:
    result = CallToolResult.model_validate(task["result"])
    return "".join(c.model_dump()["text"] for c in result.content)


async def test_a_task_whose_tool_asks_is_input_required_and_resumes_with_the_answer(relay_home: Path) -> None:
    async with client(relay_home, elicitation_callback=accept_all) as c:
        created = await start_task(c, "confirm_delete", {"filename": "a.txt"})
        waiting = await until_input_required(c, created.task_id)
        ack = await update(c, created.task_id, {"confirm": {"action": "accept", "content": {"confirm": True}}})
        done = await poll_until_final(c, created.task_id)
        declined = await start_task(c, "confirm_delete", {"filename": "b.txt"})
        await until_input_required(c, declined.task_id)
        await update(c, declined.task_id, {"confirm": {"action": "decline"}})
        kept = await poll_until_final(c, declined.task_id)
    assert waiting["status"] == "input_required" and "result" not in waiting and "requestState" not in waiting
    assert list(waiting["inputRequests"]) == ["confirm"]
    request = waiting["inputRequests"]["confirm"]
    assert request["method"] == "elicitation/create" and request["params"]["message"] == "Delete a.txt?"
    assert ack == {"resultType": "complete"}
    assert done["status"] == "completed" and text_of(done) == "deleted a.txt"
    assert kept["status"] == "completed" and text_of(kept) == "kept b.txt (decline)"


async def test_a_partial_update_keeps_the_task_input_required_with_only_the_unanswered_request(
    relay_home: Path,
) -> None:
    async with client(relay_home, elicitation_callback=accept_all) as c:
        created = await start_task(c, "multi_input", {})
        both = await until_input_required(c, created.task_id)
        await update(c, created.task_id, {"name": {"action": "accept", "content": {"name": "Ada"}}})
        one = await tasks_call(c, "tasks/get", created.task_id)
        await update(c, created.task_id, {"confirm": {"action": "accept", "content": {"confirm": False}}})
        done = await poll_until_final(c, created.task_id)
    assert sorted(both["inputRequests"]) == ["confirm", "name"]
    assert one["status"] == "input_required" and list(one["inputRequests"]) == ["confirm"]
    assert done["status"] == "completed" and text_of(done) == "done: name=Ada confirm=False"


async def test_an_answer_of_the_wrong_shape_is_refused_and_unknown_keys_are_ignored(relay_home: Path) -> None:
    async with client(relay_home, elicitation_callback=accept_all) as c:
        created = await start_task(c, "confirm_delete", {"filename": "c.txt"})
        await until_input_required(c, created.task_id)
        with pytest.raises(MCPError) as caught:
            await update(c, created.task_id, {"confirm": {"role": "assistant"}})
        ignored = await update(c, created.task_id, {"no-such-key": {"ignored": True}})
        still = await tasks_call(c, "tasks/get", created.task_id)
        await tasks_call(c, "tasks/cancel", created.task_id)
        cancelled = await poll_until_final(c, created.task_id)
    assert caught.value.error.code == -32602 and "confirm" in caught.value.error.message
    assert ignored == {"resultType": "complete"}
    assert still["status"] == "input_required" and list(still["inputRequests"]) == ["confirm"]
    assert cancelled["status"] == "cancelled" and "inputRequests" not in cancelled


async def test_a_task_asking_a_client_without_the_elicitation_capability_fails_with_32021(
    relay_home: Path,
) -> None:
    async with client(relay_home) as c:
        created = await start_task(c, "confirm_delete", {"filename": "d.txt"})
        done = await poll_until_final(c, created.task_id)
    assert done["status"] == "failed" and "result" not in done
    assert done["error"]["code"] == -32021
    assert "elicitation" in done["error"]["data"]["requiredCapabilities"]


async def test_resolver_input_is_asked_on_the_call_and_only_the_answered_retry_creates_the_task(
    relay_home: Path,
) -> None:
    async with client(relay_home, elicitation_callback=accept_all) as c:
        with anyio.fail_after(60):
            first = await c.session.call_tool("test_tool_with_task", {}, allow_input_required=True, allow_claimed=True)
        assert isinstance(first, InputRequiredResult), first
        assert first.input_requests is not None and first.request_state is not None
        [key] = first.input_requests
        with anyio.fail_after(60):
            second = await c.session.call_tool(
                "test_tool_with_task",
                {},
                input_responses={key: ElicitResult(action="accept", content={"name": "Alice"})},
                request_state=first.request_state,
                allow_input_required=True,
                allow_claimed=True,
            )
        assert not isinstance(second, InputRequiredResult | CallToolResult), second
        wire = second.model_dump(by_alias=True, mode="json")
        done = await poll_until_final(c, wire["taskId"])
    assert first.input_requests[key].method == "elicitation/create"
    assert wire["resultType"] == "task" and "requestState" not in wire and "inputRequests" not in wire
    assert done["status"] == "completed" and text_of(done) == "Hello, Alice! (from a task)"


async def test_a_client_that_did_not_opt_in_answers_the_same_tool_synchronously(relay_home: Path) -> None:
    async with Client(build_fixture_server(relay_home), elicitation_callback=accept_all) as c:
        with anyio.fail_after(60):
            result = await c.call_tool("multi_input", {})
    assert result.is_error is False
    assert result.content[0].model_dump()["text"] == "done: name=sync-user confirm=True"
