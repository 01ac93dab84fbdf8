"""docs/tools.md is generated from the live tool schemas and must not drift from them."""

from __future__ import annotations

import pytest

from relay.server.tooldocs import live_tools, render
from tests.conftest import REPO

pytestmark = pytest.mark.anyio


async def test_docs_tools_md_matches_the_live_schemas() -> None:
    expected = render(await live_tools())
    current = (REPO / "docs" / "tools.md").read_text()
    assert current == expected, "regenerate: .venv/bin/python -m relay.server.tooldocs > docs/tools.md"


async def test_every_tool_has_a_description_and_described_arguments() -> None:
    for tool in await live_tools():
        assert tool.get("description"), tool["name"]
