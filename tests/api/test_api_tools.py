"""The MCP surface of the model APIs, through the SDK's in-memory client."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp import Client
from mock_servers import MockServer, Reply

from conftest import SettingsFactory
from relay.server.app import build_server

pytestmark = pytest.mark.anyio


async def call(client: Any, name: str, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    with anyio.fail_after(20):
        result = await client.call_tool(name, args)
    return bool(result.is_error), dict(result.structured_content or {})


async def test_ask_answers_and_threads_can_be_listed_and_shown(
    make_settings: SettingsFactory, anthropic_mock: MockServer, openai_mock: MockServer
) -> None:
    anthropic_mock.script(Reply(text="first answer"))
    openai_mock.script(Reply(text="second answer"))
    async with Client(build_server(make_settings())) as client:
        is_error, first = await call(client, "ask", {"prompt": "hello", "model": "sonnet", "mode": "sync"})
        assert not is_error
        assert (first["status"], first["output"], first["agent"]) == ("completed", "first answer", "anthropic")
        thread_id = first["continuation_id"]
        is_error, second = await call(client, "ask", {"prompt": "more", "model": "grok", "continuation_id": thread_id})
        assert (is_error, second["output"], second["remaining_turns"]) == (False, "second answer", 46)

        _, listing = await call(client, "thread_list", {})
        assert [(t["continuation_id"], t["turn_count"], t["title"]) for t in listing["threads"]] == [
            (thread_id, 4, "hello")
        ]
        _, shown = await call(client, "thread_show", {"continuation_id": thread_id})
        assert [t["model"] for t in shown["turns"]] == [None, "anthropic:claude-sonnet-4-5", None, "xai:grok-4"]

        _, models = await call(client, "list_models", {})
        ids = [m["id"] for m in models["models"]]
        assert "xai:grok-4" in ids and "openai:gpt-5" not in ids
        assert {p["name"]: p["reachable"] for p in models["providers"]}["openai"] is False


async def test_ask_errors_are_error_results_with_code_and_hint(
    make_settings: SettingsFactory, anthropic_mock: MockServer
) -> None:
    anthropic_mock.script(Reply(status=401))
    async with Client(build_server(make_settings(XAI_API_KEY=""))) as client:
        is_error, missing = await call(client, "ask", {"prompt": "x", "model": "grok"})
        assert is_error and missing["error"]["code"] == "AUTH_MISSING" and "XAI_API_KEY" in missing["error"]["hint"]
        is_error, refused = await call(client, "ask", {"prompt": "x", "model": "sonnet", "mode": "sync"})
        assert is_error and refused["status"] == "failed" and refused["error"]["code"] == "AUTH_INVALID"
        is_error, unknown = await call(client, "thread_show", {"continuation_id": "nope"})
        assert is_error and unknown["error"]["code"] == "SESSION_NOT_FOUND"
        is_error, bad = await call(client, "ask", {"prompt": "x", "temperature": 5})
        assert is_error and bad["error"]["code"] == "INVALID_ARGUMENT"


async def test_async_ask_returns_a_job_that_completes(make_settings: SettingsFactory, openai_mock: MockServer) -> None:
    openai_mock.script(Reply(text="later"))
    async with Client(build_server(make_settings())) as client:
        _, started = await call(client, "ask", {"prompt": "x", "model": "grok", "mode": "async"})
        assert started["status"] in ("queued", "running")
        _, waited = await call(client, "job_wait", {"job_ids": [started["job_id"]], "timeout_s": 15})
        assert waited["done"] and waited["jobs"][0]["output"] == "later"
