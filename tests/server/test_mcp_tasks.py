"""MCP Tasks (io.modelcontextprotocol/tasks) over relay's jobs, through the SDK's client: in memory and over HTTP."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import anyio
import pytest
from mcp import Client
from mcp.client import ClientExtension
from mcp.client.extension import ClaimContext, ResultClaim
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult
from mcp_types import Request, RequestParams, Result
from pydantic import ConfigDict, Field

from relay.server.app import build_server
from relay.server.tasks_ext import TASKS_EXTENSION
from relay.store import Store
from tests.conftest import SettingsFactory

pytestmark = pytest.mark.anyio

RELAY = str(Path(sys.executable).with_name("relay"))


# -- the client side of the extension, as a client that opts in would write it ------------------------


class CreatedTask(Result):
    """The flat `CreateTaskResult` a task-augmented tools/call answers with."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"
    task_id: str
    status: str


class TaskParams(RequestParams):
    task_id: str = Field(alias="taskId")


class UpdateParams(TaskParams):
    input_responses: dict[str, Any] = Field(alias="inputResponses", default_factory=dict[str, Any])


class TasksGet(Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class TasksCancel(Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


class TasksUpdate(Request[UpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class Raw(Result):
    model_config = ConfigDict(extra="allow")


class Tasks(ClientExtension):
    """Declares the tasks extension; `call_tool(..., allow_claimed=True)` then hands back the task."""

    identifier = TASKS_EXTENSION

    async def _resolve(self, task: CreatedTask, ctx: ClaimContext) -> CallToolResult:  # pragma: no cover
        raise AssertionError("tests read the task shape themselves")

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self._resolve)]


async def start_task(c: Client, tool: str, args: dict[str, Any]) -> CreatedTask:
    with anyio.fail_after(60):
        result = await c.session.call_tool(tool, args, allow_claimed=True)
    assert isinstance(result, CreatedTask), result
    return result


async def tasks_call(c: Client, method: str, task_id: str) -> dict[str, Any]:
    params = TaskParams(taskId=task_id)
    request: Request[Any, Any] = (
        TasksGet(params=params)
        if method == "tasks/get"
        else TasksCancel(params=params)
        if method == "tasks/cancel"
        else TasksUpdate(params=UpdateParams(taskId=task_id))
    )
    with anyio.fail_after(60):
        raw = await c.session.send_request(request, Raw)
    return raw.model_dump(by_alias=True, mode="json")


async def poll_until_final(c: Client, task_id: str, limit_s: float = 60) -> dict[str, Any]:
    with anyio.fail_after(limit_s):
        while True:
            task = await tasks_call(c, "tasks/get", task_id)
            if task["status"] in ("completed", "failed", "cancelled"):
                return task
            await anyio.sleep(0.1)


# -- in memory ---------------------------------------------------------------------------------------


async def test_an_opted_in_delegate_call_returns_a_working_task_and_tasks_get_inlines_the_envelope(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    async with Client(build_server(make_settings()), extensions=[Tasks()]) as c:
        created = await start_task(c, "delegate", {"prompt": "hi [[fake:sleep=0.5]]", "cwd": str(workdir)})
        first = await tasks_call(c, "tasks/get", created.task_id)
        done = await poll_until_final(c, created.task_id)
    wire = created.model_dump(by_alias=True, mode="json")
    assert {k: wire[k] for k in ("resultType", "status", "ttlMs", "pollIntervalMs")} == {
        "resultType": "task",
        "status": "working",
        "ttlMs": None,
        "pollIntervalMs": 2000,
    }
    assert len(created.task_id) >= 32  # a token of its own (checked against the job's id below)
    assert "result" not in wire and "requestState" not in wire
    assert first["taskId"] == created.task_id and first["status"] in ("working", "completed")
    assert done["status"] == "completed" and "error" not in done
    result = CallToolResult.model_validate(done["result"])
    assert result.is_error is False
    env = result.structured_content
    assert env is not None
    assert {k: env[k] for k in ("status", "agent", "output", "exit_code", "error")} == {
        "status": "completed",
        "agent": "claude",
        "output": "hi from mock",
        "exit_code": 0,
        "error": None,
    }
    assert env["job_id"] and created.task_id != env["job_id"] and env["job_id"] not in created.task_id


async def test_a_failed_job_is_a_completed_task_whose_result_is_an_error(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    async with Client(build_server(make_settings()), extensions=[Tasks()]) as c:
        created = await start_task(c, "delegate", {"prompt": "hi [[fake:hang]]", "cwd": str(workdir), "timeout_s": 1})
        done = await poll_until_final(c, created.task_id)
    assert done["status"] == "completed"
    assert done["result"]["isError"] is True
    assert done["result"]["structuredContent"]["status"] == "timed_out"


async def test_tasks_cancel_kills_the_job_and_the_task_settles_cancelled(
    make_settings: SettingsFactory, workdir: Path, relay_home: Path
) -> None:
    settings = make_settings()
    async with Client(build_server(settings), extensions=[Tasks()]) as c:
        created = await start_task(c, "delegate", {"prompt": "hi [[fake:hang]]", "cwd": str(workdir)})
        ack = await tasks_call(c, "tasks/cancel", created.task_id)
        done = await poll_until_final(c, created.task_id)
        again = await tasks_call(c, "tasks/cancel", created.task_id)
    assert {k: v for k, v in ack.items() if k != "_meta"} == {"resultType": "complete"}
    assert {k: v for k, v in again.items() if k != "_meta"} == {"resultType": "complete"}
    assert done["status"] == "cancelled" and "result" not in done
    store = Store(settings.db_path)
    try:
        jobs = store.list_jobs(limit=5)
    finally:
        store.close()
    assert [(j.status, j.stop_reason) for j in jobs] == [("cancelled", "cancelled")]


async def test_tasks_update_on_a_task_that_asks_for_nothing_is_acknowledged(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    async with Client(build_server(make_settings()), extensions=[Tasks()]) as c:
        created = await start_task(c, "delegate", {"prompt": "hi", "cwd": str(workdir)})
        ack = await tasks_call(c, "tasks/update", created.task_id)
        done = await poll_until_final(c, created.task_id)
    assert ack["resultType"] == "complete" and "status" not in ack
    assert done["status"] == "completed"


async def test_an_unknown_task_id_is_invalid_params(make_settings: SettingsFactory) -> None:
    async with Client(build_server(make_settings()), extensions=[Tasks()]) as c:
        for method in ("tasks/get", "tasks/cancel", "tasks/update"):
            with pytest.raises(MCPError) as caught:
                await tasks_call(c, method, "no-such-task")
            assert caught.value.error.code == -32602, method


async def test_without_opt_in_tasks_methods_are_refused_and_delegate_answers_as_always(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    async with Client(build_server(make_settings())) as c:
        for method in ("tasks/get", "tasks/cancel", "tasks/update"):
            with pytest.raises(MCPError) as caught:
                await tasks_call(c, method, "anything")
            assert caught.value.error.code == -32021, method
            data = caught.value.error.data
            assert isinstance(data, dict) and TASKS_EXTENSION in data["requiredCapabilities"]["extensions"]
        with anyio.fail_after(60):
            result = await c.call_tool("delegate", {"prompt": "hi", "cwd": str(workdir), "mode": "sync"})
    assert result.structured_content is not None and result.structured_content["output"] == "hi from mock"


async def test_an_opted_in_client_still_gets_plain_results_from_tools_that_are_not_tasks(
    make_settings: SettingsFactory,
) -> None:
    async with Client(build_server(make_settings()), extensions=[Tasks()]) as c:
        with anyio.fail_after(60):
            result = await c.call_tool("job_list", {})
    assert result.is_error is False and result.structured_content is not None
    assert result.structured_content["jobs"] == []


async def test_bad_arguments_to_a_task_tool_are_an_ordinary_error_result_not_a_task(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    async with Client(build_server(make_settings()), extensions=[Tasks()]) as c:
        with anyio.fail_after(60):
            result = await c.session.call_tool(
                "delegate", {"prompt": "hi", "agent": "nosuchagent", "cwd": str(workdir)}, allow_claimed=True
            )
    assert isinstance(result, CallToolResult) and result.is_error is True
    assert result.structured_content is not None and "error" in result.structured_content


async def test_a_zen_workflow_call_runs_as_a_task_with_the_tool_result_inlined(
    make_settings: SettingsFactory,
) -> None:
    args = {"step": "plan the migration", "step_number": 1, "total_steps": 1, "next_step_required": False}
    settings = make_settings(RELAY_TOOLSETS="zen")
    async with Client(build_server(settings), extensions=[Tasks()]) as c:
        created = await start_task(c, "planner", args)
        done = await poll_until_final(c, created.task_id)
    assert done["status"] == "completed"
    result = CallToolResult.model_validate(done["result"])
    assert result.is_error is False and result.structured_content is not None
    assert result.structured_content["step_number"] == 1


# -- over HTTP, and across a restart -------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def http_relay(relay_home: Path, workdir: Path, port: int) -> AsyncIterator[str]:
    proc = subprocess.Popen(
        [RELAY, "serve", "--http", "--port", str(port)],
        env={**os.environ, "RELAY_HOME": str(relay_home)},
        cwd=str(workdir),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with anyio.fail_after(60):
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                        break
                except OSError:
                    await anyio.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(20)


async def test_a_task_over_http_survives_a_relay_restart(
    make_settings: SettingsFactory, relay_home: Path, workdir: Path
) -> None:
    make_settings()
    port = free_port()
    async with http_relay(relay_home, workdir, port) as url, Client(url, extensions=[Tasks()]) as c:
        created = await start_task(c, "delegate", {"prompt": "hi [[fake:sleep=3]]", "cwd": str(workdir)})
        first = await tasks_call(c, "tasks/get", created.task_id)
    assert first["status"] == "working"
    # relay stops while the job runs; the next relay re-attaches to it and answers for the same task.
    async with http_relay(relay_home, workdir, port) as url:
        async with Client(url, extensions=[Tasks()]) as c:
            done = await poll_until_final(c, created.task_id, limit_s=90)
        async with Client(url) as plain:
            with pytest.raises(MCPError) as caught:
                await tasks_call(plain, "tasks/get", created.task_id)
    assert caught.value.error.code == -32021
    assert done["status"] == "completed"
    assert done["result"]["structuredContent"]["output"] == "hi from mock"


# -- the extension's own rules, on the conformance fixture server (relay's pieces, test-only tools) -----


async def test_a_protocol_error_in_a_task_call_makes_the_task_failed_with_the_error_and_no_result(
    relay_home: Path,
) -> None:
    from tests.server.tasks_fixture import build_fixture_server

    async with Client(build_fixture_server(relay_home), extensions=[Tasks()]) as c:
        created = await start_task(c, "protocol_error_job", {})
        done = await poll_until_final(c, created.task_id)
    assert done["status"] == "failed" and "result" not in done
    assert done["error"] == {"code": -32603, "message": "protocol_error_job crashed"}


async def test_a_task_only_tool_refuses_a_client_that_did_not_opt_in(relay_home: Path) -> None:
    from tests.server.tasks_fixture import build_fixture_server

    async with Client(build_fixture_server(relay_home)) as c:
        with pytest.raises(MCPError) as caught:
            await c.call_tool("failing_job", {})
        slow = await c.call_tool("slow_compute", {"seconds": 0, "label": "sync"})
    assert caught.value.error.code == -32021
    assert slow.is_error is False and slow.content[0].model_dump()["text"] == "computed sync after 0.0s"
