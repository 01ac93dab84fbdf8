"""Two fronts on one PostgreSQL store share the conversation threads: one continues what the other started.

Each front has its own RELAY_HOME (as on two hosts) and RELAY_STORE names the same database; the model
calls go to the mock vendor servers through the real SDKs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mock_servers import MockServer, Reply

from conftest import SettingsFactory
from relay.ask import AskArgs, ask_envelope, submit_ask
from relay.config import Settings
from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine
from relay.principal import Principal, acting_as
from relay.server.app import build_server
from relay.threads import Threads, open_threads

pytestmark = pytest.mark.anyio

WAIT_S = 20.0
ALICE = Principal("alice", "user")
BOB = Principal("bob", "user")


def front(make_settings: SettingsFactory, tmp_path: Path, name: str, pg_url: str) -> Settings:
    home = tmp_path / name
    home.mkdir()
    return make_settings(RELAY_HOME=str(home), RELAY_STORE=pg_url)


async def call(client: Any, name: str, args: dict[str, Any]) -> dict[str, Any]:
    with anyio.fail_after(WAIT_S):
        result = await client.call_tool(name, args)
    assert not result.is_error, result.structured_content
    return dict(result.structured_content or {})


async def run_ask(settings: Settings, args: AskArgs) -> dict[str, Any]:
    async with Engine(settings) as engine:
        job_id = await submit_ask(engine, args)
        with anyio.fail_after(WAIT_S):
            await engine.wait_one(job_id, WAIT_S)
        return ask_envelope(engine, job_id)


async def test_a_conversation_started_through_one_front_is_continued_through_another(
    make_settings: SettingsFactory,
    anthropic_mock: MockServer,
    openai_mock: MockServer,
    pg_url: str,
    tmp_path: Path,
) -> None:
    a = front(make_settings, tmp_path, "front-a", pg_url)
    b = front(make_settings, tmp_path, "front-b", pg_url)
    anthropic_mock.script(Reply(text="Four."))
    openai_mock.script(Reply(text="Yes, 4."))
    async with Client(build_server(a)) as front_a, Client(build_server(b)) as front_b:
        first = await call(front_a, "ask", {"prompt": "What is 2+2?", "model": "sonnet", "mode": "sync"})
        thread_id = first["continuation_id"]
        second = await call(
            front_b,
            "ask",
            {"prompt": "Do you agree?", "model": "grok", "continuation_id": thread_id, "mode": "sync"},
        )
        assert (second["output"], second["continuation_id"], second["remaining_turns"]) == ("Yes, 4.", thread_id, 46)
        (request,) = openai_mock.requests  # front B sent front A's exchange as the history
        assert request.body["messages"] == [
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "Four."},
            {"role": "user", "content": "Do you agree?"},
        ]
        shown = await call(front_a, "thread_show", {"continuation_id": thread_id})
        assert [(t["role"], t["content"]) for t in shown["turns"]] == [
            ("user", "What is 2+2?"),
            ("assistant", "Four."),
            ("user", "Do you agree?"),
            ("assistant", "Yes, 4."),
        ]
        listed = await call(front_b, "thread_list", {})
        assert [(t["continuation_id"], t["turn_count"]) for t in listed["threads"]] == [(thread_id, 4)]
    for settings in (a, b):  # in the shared store only, not in either front's relay.db
        own = Threads(settings.db_path)
        assert own.find(thread_id) is None
        own.close()


async def test_a_principals_thread_stays_invisible_to_another_principal_on_every_front(
    make_settings: SettingsFactory, openai_mock: MockServer, pg_url: str, tmp_path: Path
) -> None:
    a = front(make_settings, tmp_path, "front-a", pg_url)
    b = front(make_settings, tmp_path, "front-b", pg_url)
    openai_mock.script(Reply(text="noted"), Reply(text="still noted"))
    with acting_as(ALICE):
        first = await run_ask(a, AskArgs(prompt="my secret plan", model="grok"))
    thread_id = first["continuation_id"]
    assert first["status"] == "completed" and thread_id
    with acting_as(BOB):
        async with Engine(b) as engine:
            with pytest.raises(RelayError) as refused:
                await submit_ask(engine, AskArgs(prompt="tell me", model="grok", continuation_id=thread_id))
        assert refused.value.code == ErrorCode.SESSION_NOT_FOUND
        seen_by_bob = open_threads(b)
        assert seen_by_bob.find(thread_id) is None and seen_by_bob.list(include_expired=True) == []
        seen_by_bob.close()
    with acting_as(ALICE):
        again = await run_ask(b, AskArgs(prompt="go on", model="grok", continuation_id=thread_id))
    assert (again["status"], again["continuation_id"], again["output"]) == ("completed", thread_id, "still noted")
    assert [r.body["messages"][0]["content"] for r in openai_mock.requests] == ["my secret plan", "my secret plan"]
