"""gemini-mcp's changeMode chunks are the caller's own: over real HTTP, another `user` token's cache key misses
exactly as an unknown key does (fetch-chunk and ask-gemini's chunkCacheKey), and its owner still fetches it."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.server.toolsets.gemini_mcp import TEXTS
from tests.conftest import FAKES, SettingsFactory
from tests.reliability.conftest import free_port, wait_for
from tests.reliability.test_http_guardrails import listening, serving
from tests.server.test_principals import ALICE, BOB, TOKENS, as_

pytestmark = pytest.mark.anyio

CONFIG = f"""
[agents.gemini]
command = "{FAKES / "gemini"}"
{TOKENS}"""
CANARY = "ALICE-SECRET-c4c4"


def edits(canary: str) -> str:
    """A prompt the fake gemini echoes back as thirty changeMode edits carrying `canary` (several chunks)."""
    blocks = [
        f"**FILE: src/m{n:02d}.py:{10 + n}**\n```\nOLD:\n    old_{n} = 1\nNEW:\n"
        + "\n".join(f"    new_{n}_{k} = '{canary}{'x' * 60}'" for k in range(40))
        + "\n```\n"
        for n in range(30)
    ]
    return "[[fake:echo]] Here are the edits.\n\n" + "\n".join(blocks)


@pytest.fixture
async def port(make_settings: SettingsFactory, relay_home: Path, workdir: Path) -> AsyncIterator[int]:
    """A real `relay serve --http` with the gemini-mcp profile on the fake gemini, with alice and bob."""
    make_settings(CONFIG)
    chosen = free_port()
    with serving(relay_home, workdir, "--port", str(chosen), "--toolsets", "gemini-mcp"):
        await wait_for(lambda: listening(chosen), 30, step=0.05)
        yield chosen


async def text(client: Client, tool: str, **args: Any) -> str:
    result = await client.call_tool(tool, args)
    return "\n".join(str(getattr(c, "text", "")) for c in result.content)


async def test_another_user_tokens_cache_key_misses_as_an_unknown_key_does_and_its_owner_still_fetches_it(
    port: int,
) -> None:
    with anyio.fail_after(120):
        async with as_(port, ALICE) as alice, as_(port, BOB) as bob:
            first = await text(alice, "ask-gemini", prompt=edits(CANARY), changeMode=True)
            found = re.search(r'fetch-chunk cacheKey="([a-f0-9]{8})" chunkIndex=2', first)
            assert found is not None, first[:500]
            key = found.group(1)

            missed = await text(bob, "fetch-chunk", cacheKey=key, chunkIndex=2)
            assert missed == TEXTS["cache_miss"].format(key=key)
            again = await text(
                bob, "ask-gemini", prompt="BOB [[fake:echo]]", changeMode=True, chunkIndex="2", chunkCacheKey=key
            )
            assert CANARY not in again and "new_" not in again

            assert CANARY in await text(alice, "fetch-chunk", cacheKey=key, chunkIndex=2)
