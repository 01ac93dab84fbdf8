"""Whose job is whose over real Streamable HTTP: each named bearer token is a principal; a `user` finds only
its own jobs (another's id or id prefix is not found), an `admin` finds all of them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from tests.conftest import SettingsFactory
from tests.reliability.conftest import free_port, wait_for
from tests.reliability.test_http_guardrails import listening, serving
from tests.server.test_mcp_tasks import Tasks, start_task, tasks_call

pytestmark = pytest.mark.anyio

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef"
ROOT = "root-token-0123456789abcdef"
TOKENS = f"""
[server.tokens.alice]
token = "{ALICE}"
role = "user"

[server.tokens.bob]
token = "{BOB}"

[server.tokens.root]
token = "{ROOT}"
role = "admin"
"""


@pytest.fixture
async def port(make_settings: SettingsFactory, relay_home: Path, workdir: Path) -> AsyncIterator[int]:
    """A real `relay serve --http` on 127.0.0.1 with the three named tokens; its port."""
    make_settings(TOKENS)
    chosen = free_port()
    with serving(relay_home, workdir, "--port", str(chosen)):
        await wait_for(lambda: listening(chosen), 30, step=0.05)
        yield chosen


@asynccontextmanager
async def as_(port: int, token: str, *, tasks: bool = False, **options: Any) -> AsyncIterator[Client]:
    """An SDK client over Streamable HTTP that sends `token` as its bearer (`tasks`: opted in to MCP Tasks;
    `options`: more of the Client's own arguments, e.g. its `elicitation_callback` and `mode`)."""
    headers = {"authorization": f"Bearer {token}"}
    async with create_mcp_http_client(headers=headers) as http:
        transport = streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http)
        async with Client(transport, extensions=[Tasks()] if tasks else [], **options) as client:
            yield client


async def call(client: Client, tool: str, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    result = await client.call_tool(tool, args)
    assert result.structured_content is not None
    return bool(result.is_error), result.structured_content


def code(body: dict[str, Any]) -> str | None:
    return (body.get("error") or {}).get("code")


async def test_a_user_token_finds_waits_on_pages_and_cancels_only_its_own_jobs_and_an_admin_finds_all(
    port: int, workdir: Path
) -> None:
    with anyio.fail_after(90):
        async with as_(port, ALICE) as alice, as_(port, BOB) as bob, as_(port, ROOT) as root:
            _, done = await call(alice, "delegate", {"prompt": "hi", "cwd": str(workdir), "mode": "sync"})
            _, held = await call(
                alice, "delegate", {"prompt": "hi [[fake:hang]]", "cwd": str(workdir), "mode": "async"}
            )
            _, bobs = await call(bob, "delegate", {"prompt": "hi", "cwd": str(workdir), "mode": "sync"})
            mine, theirs = done["job_id"], held["job_id"]

            # bob: alice's jobs do not exist, by id or by prefix, for any job tool
            refused = {
                "status": await call(bob, "job_status", {"job_id": mine}),
                "prefix": await call(bob, "job_status", {"job_id": mine[:6]}),
                "result": await call(bob, "job_result", {"job_id": mine}),
                "wait": await call(bob, "job_wait", {"job_ids": [theirs], "timeout_s": 1}),
                "cancel": await call(bob, "job_cancel", {"job_id": theirs}),
            }
            _, bob_list = await call(bob, "job_list", {"limit": 50})

            # alice: her own, by prefix too; her list holds only hers; she can cancel hers
            _, by_prefix = await call(alice, "job_status", {"job_id": mine[:6]})
            _, alice_list = await call(alice, "job_list", {"limit": 50})
            _, cancelled = await call(alice, "job_cancel", {"job_id": theirs})

            # root (admin): everyone's
            _, root_list = await call(root, "job_list", {"limit": 50})
            _, bob_seen_by_root = await call(root, "job_status", {"job_id": bobs["job_id"]})

    assert {name: (err, code(body)) for name, (err, body) in refused.items()} == {
        name: (True, "JOB_NOT_FOUND") for name in refused
    }
    assert [j["job_id"] for j in bob_list["jobs"]] == [bobs["job_id"]]
    assert by_prefix["job_id"] == mine and by_prefix["status"] == "completed"
    assert sorted(j["job_id"] for j in alice_list["jobs"]) == sorted([mine, theirs])
    assert cancelled["status"] == "cancelled"
    assert sorted(j["job_id"] for j in root_list["jobs"]) == sorted([mine, theirs, bobs["job_id"]])
    assert bob_seen_by_root["status"] == "completed"


async def test_with_named_tokens_a_request_without_one_of_them_is_refused_even_on_loopback(
    port: int, workdir: Path
) -> None:
    with anyio.fail_after(30):
        async with create_mcp_http_client() as http:
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
            headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
            url = f"http://127.0.0.1:{port}/mcp"
            missing = await http.post(url, json=body, headers=headers)
            wrong = await http.post(url, json=body, headers={**headers, "authorization": "Bearer " + "x" * 30})
    assert missing.status_code == 401 and wrong.status_code == 401


async def test_an_mcp_task_answers_as_unknown_to_another_user_token_and_as_itself_to_its_own(
    port: int, workdir: Path
) -> None:
    with anyio.fail_after(60):
        async with as_(port, ALICE, tasks=True) as alice, as_(port, BOB, tasks=True) as bob:
            created = await start_task(alice, "delegate", {"prompt": "hi [[fake:hang]]", "cwd": str(workdir)})
            refused: list[str] = []
            for method in ("tasks/get", "tasks/cancel", "tasks/update"):
                with pytest.raises(MCPError) as err:
                    await tasks_call(bob, method, created.task_id)
                refused.append(err.value.error.message)
            own = await tasks_call(alice, "tasks/get", created.task_id)
            await tasks_call(alice, "tasks/cancel", created.task_id)
    assert refused == [f"Unknown task {created.task_id!r}"] * 3
    assert own["status"] == "working"


async def test_an_mcp_session_answers_only_to_the_token_that_opened_it(port: int, workdir: Path) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    with anyio.fail_after(30):
        async with create_mcp_http_client() as http:
            url = f"http://127.0.0.1:{port}/mcp"
            opened = await http.post(url, json=init, headers={**headers, "authorization": f"Bearer {ALICE}"})
            session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
            by_bob = await http.post(url, json=ping, headers={**headers, **session, "authorization": f"Bearer {BOB}"})
            stream_by_bob = await http.get(
                url, headers={"accept": "text/event-stream", **session, "authorization": f"Bearer {BOB}"}
            )
            by_alice = await http.post(
                url, json=ping, headers={**headers, **session, "authorization": f"Bearer {ALICE}"}
            )
    assert opened.status_code == 200
    assert by_bob.status_code == 404 and stream_by_bob.status_code == 404
    assert by_alice.status_code == 200
