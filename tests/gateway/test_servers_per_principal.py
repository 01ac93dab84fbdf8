"""Downstream servers are the relay's, shared by every token: only an admin adds, imports or removes them.

Over real Streamable HTTP with named tokens: a `user` token can list and call the servers the admin set up, but
cannot remove one, nor add or import one (so it cannot shadow a server another token's call_tool reaches).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SettingsFactory
from tests.server.test_grants import call, serving_http
from tests.server.test_principals import ALICE, BOB, ROOT, TOKENS, as_

pytestmark = pytest.mark.anyio

# A server that is recorded but never reached (disabled): the test is about who may change the list.
DOCS = {"name": "docs", "transport": "http", "url": "http://127.0.0.1:9/mcp", "enabled": False}


@pytest.fixture
async def port(make_settings: SettingsFactory, relay_home: Path, workdir: Path) -> AsyncIterator[int]:
    make_settings(TOKENS)
    async with serving_http(relay_home, workdir, "--toolsets", "core,gateway") as (chosen, _):
        yield chosen


async def test_a_user_token_can_neither_add_import_nor_remove_a_server_and_lists_the_admins(
    port: int, tmp_path: Path
) -> None:
    project = tmp_path / "theirs"
    project.mkdir()
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"docs": {"url": "http://127.0.0.1:9/other"}}}))
    async with as_(port, ROOT) as root:
        failed, added = await call(root, "add_mcp_server", DOCS)
        assert not failed, added
    async with as_(port, ALICE) as alice, as_(port, BOB) as bob:
        refusals: dict[str, tuple[bool, dict[str, Any]]] = {
            "add": await call(alice, "add_mcp_server", DOCS | {"url": "http://127.0.0.1:9/alices"}),
            "add_stdio": await call(alice, "add_mcp_server", {"name": "mine", "transport": "stdio", "command": "true"}),
            "remove": await call(bob, "remove_mcp_server", {"name": "docs"}),
            "import": await call(bob, "import_mcp_server", {"from_project": str(project)}),
        }
        _, listed = await call(alice, "list_mcp_servers", {})
    for what, (failed, body) in refusals.items():
        assert failed and body["code"] == "PERMISSION_NOT_GRANTED", (what, body)
        assert "ask the relay's admin" in body["hint"], what
    assert [(s["name"], s["transport"]) for s in listed["servers"]] == [("docs", "http")]
    async with as_(port, ROOT) as root:
        _, still = await call(root, "list_mcp_servers", {})
        failed, removed = await call(root, "remove_mcp_server", {"name": "docs"})
    assert [s["name"] for s in still["servers"]] == ["docs"]  # nobody shadowed nor removed the admin's
    assert not failed and removed["removed"] == "docs"
