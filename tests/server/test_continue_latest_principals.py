"""continue_latest continues the caller's own newest session, resumed by its id, never another principal's: over
real Streamable HTTP with two `user` tokens, and for the one local user (stdio, in memory)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.server.app import build_server
from relay.store import SessionTurn, Store
from tests.conftest import SettingsFactory
from tests.reliability.conftest import free_port, wait_for
from tests.reliability.test_http_guardrails import listening, serving
from tests.server.test_principals import ALICE, BOB, ROOT, TOKENS, as_, call, code

pytestmark = pytest.mark.anyio


@pytest.fixture
def argv_log(tmp_path: Path) -> Path:
    return tmp_path / "argv.jsonl"


@pytest.fixture
def logging_claude(argv_log: Path) -> str:
    return f'[agents.claude.env]\nFAKE_ARGV_LOG = "{argv_log}"\n'


@pytest.fixture
async def port(
    make_settings: SettingsFactory, relay_home: Path, workdir: Path, logging_claude: str
) -> AsyncIterator[int]:
    """A real `relay serve --http` with alice and bob (`user`) and root (`admin`), the fake claude logging its argv."""
    make_settings(TOKENS + logging_claude)
    chosen = free_port()
    with serving(relay_home, workdir, "--port", str(chosen)):
        await wait_for(lambda: listening(chosen), 30, step=0.05)
        yield chosen


def runs(argv_log: Path) -> list[list[str]]:
    return [json.loads(line)["argv"] for line in argv_log.read_text().splitlines()] if argv_log.exists() else []


def delegation(workdir: Path, **args: Any) -> dict[str, Any]:
    return {"prompt": "go on", "cwd": str(workdir), "mode": "sync", **args}


async def test_continue_latest_resumes_the_callers_own_session_by_id_and_never_another_users(
    port: int, workdir: Path, argv_log: Path
) -> None:
    with anyio.fail_after(90):
        async with as_(port, ALICE) as alice, as_(port, BOB) as bob, as_(port, ROOT) as root:
            _, started = await call(alice, "delegate", delegation(workdir, prompt="start", model="opus"))
            hers = started["session_id"]
            bob_latest = await call(bob, "delegate", delegation(workdir, continue_latest=True))
            bob_by_id = await call(bob, "delegate", delegation(workdir, session_id=hers))
            root_latest = await call(root, "delegate", delegation(workdir, continue_latest=True))
            failed, continued = await call(alice, "delegate", delegation(workdir, continue_latest=True))
            _, bob_jobs = await call(bob, "job_list", {"limit": 50})

    assert hers and not failed and continued["session_id"] == hers
    for refused in (bob_latest, bob_by_id, root_latest):
        assert refused[0] and code(refused[1]) == "SESSION_NOT_FOUND", refused
    assert "no session of yours in this folder" in bob_latest[1]["error"]["hint"]
    assert hers not in json.dumps(bob_latest[1]) and hers not in json.dumps(bob_by_id[1]["error"]["hint"])
    assert bob_jobs["jobs"] == []
    first, second = runs(argv_log)  # only alice's two runs reached claude
    assert "-c" not in second and f"--resume={hers}" in second
    assert "--model=opus" in first


async def test_the_one_local_user_continues_its_newest_session_by_id_and_else_the_clis_own_latest(
    make_settings: SettingsFactory, logging_claude: str, workdir: Path, argv_log: Path
) -> None:
    async with Client(build_server(make_settings(logging_claude))) as c:
        with anyio.fail_after(60):
            fresh = await c.call_tool("delegate", delegation(workdir, continue_latest=True))
            again = await c.call_tool("delegate", delegation(workdir, continue_latest=True))
    assert not fresh.is_error and not again.is_error
    assert fresh.structured_content is not None
    first, second = runs(argv_log)
    assert "-c" in first  # relay knew no session: the CLI's own latest, which can only be this person's
    assert "-c" not in second and f"--resume={fresh.structured_content['session_id']}" in second


async def test_with_named_tokens_even_the_local_user_gets_no_clis_own_latest(
    make_settings: SettingsFactory, logging_claude: str, workdir: Path, argv_log: Path
) -> None:
    async with Client(build_server(make_settings(TOKENS + logging_claude))) as c:
        with anyio.fail_after(30):
            result = await c.call_tool("delegate", delegation(workdir, continue_latest=True))
    assert result.is_error and result.structured_content is not None
    assert code(result.structured_content) == "SESSION_NOT_FOUND"
    assert runs(argv_log) == []


async def test_without_tokens_a_store_holding_another_principals_session_gets_no_clis_own_latest(
    make_settings: SettingsFactory, logging_claude: str, workdir: Path, argv_log: Path
) -> None:
    settings = make_settings(logging_claude)
    store = Store(settings.db_path)  # a store shared with a front that has tokens: alice worked in this folder
    store.insert_job("j1", "claude", "cli", {"prompt": "p"}, None, str(workdir), principal="alice")
    theirs = SessionTurn(
        "claude", "b3af0212-3a6d-4156-a35c-cfab742dc56e", str(workdir), None, "edit", "t", 0.0, "alice"
    )
    store.finish_job("j1", "completed", exit_code=0, result={}, error=None, session_id=None, model=None, session=theirs)
    store.close()
    async with Client(build_server(settings)) as c:
        with anyio.fail_after(30):
            result = await c.call_tool("delegate", delegation(workdir, continue_latest=True))
    assert result.is_error and result.structured_content is not None
    assert code(result.structured_content) == "SESSION_NOT_FOUND"
    assert runs(argv_log) == []
