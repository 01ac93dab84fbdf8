"""No cold import on the first call: the model SDKs load in the background once the client has initialized."""

from __future__ import annotations

import anyio
import pytest
from mcp import Client

from relay.server.app import build_server
from relay.server.warmup import Warmup, kinds_with_keys
from tests.conftest import SettingsFactory

WARM_WAIT_S = 60.0
ANTHROPIC_KEY = "sk-ant-test-0123456789abcdefghij"


def test_only_the_sdks_of_providers_with_a_key_are_warmed(make_settings: SettingsFactory) -> None:
    assert kinds_with_keys(make_settings()) == []
    assert kinds_with_keys(make_settings(ANTHROPIC_API_KEY=ANTHROPIC_KEY)) == ["anthropic"]
    both = make_settings(ANTHROPIC_API_KEY=ANTHROPIC_KEY, XAI_API_KEY="xai-test-0123456789abcdefghijkl")
    assert kinds_with_keys(both) == ["anthropic", "openai"]


def test_a_warmup_runs_once_and_loads_the_sdk(make_settings: SettingsFactory) -> None:
    warmup = Warmup(make_settings(ANTHROPIC_API_KEY=ANTHROPIC_KEY))
    assert (warmup.start(), warmup.start()) == (True, False)
    assert warmup.done.wait(WARM_WAIT_S)
    assert warmup.warmed == ["anthropic"]


def test_relay_warmup_0_turns_it_off(make_settings: SettingsFactory) -> None:
    warmup = Warmup(make_settings(ANTHROPIC_API_KEY=ANTHROPIC_KEY, RELAY_WARMUP="0"))
    assert warmup.start() is False
    assert warmup.warmed == [] and not warmup.done.is_set()


@pytest.mark.anyio
async def test_the_warmup_starts_when_the_client_has_initialized(make_settings: SettingsFactory) -> None:
    server = build_server(make_settings(ANTHROPIC_API_KEY=ANTHROPIC_KEY))
    assert not server.warmup.done.is_set()
    async with Client(server, mode="legacy") as c:
        await c.list_tools()
        assert await anyio.to_thread.run_sync(server.warmup.done.wait, WARM_WAIT_S)
    assert server.warmup.warmed == ["anthropic"]
