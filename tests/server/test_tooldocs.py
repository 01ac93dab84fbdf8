"""docs/tools.md is generated from the live tool schemas of every toolset and must not drift from them."""

from __future__ import annotations

import pytest

from relay.server.tooldocs import catalog_tools, doc_settings, generate, live_tools
from relay.server.toolsets import BUILTIN
from tests.conftest import REPO

pytestmark = pytest.mark.anyio


def test_docs_tools_md_matches_the_live_schemas() -> None:
    current = (REPO / "docs" / "tools.md").read_text()
    assert current == generate(), "regenerate: .venv/bin/python -m relay.server.tooldocs > docs/tools.md"


def test_docs_cover_every_toolset_and_profile(tmp_path) -> None:  # type: ignore[no-untyped-def]
    toolsets, profiles, _ = catalog_tools(doc_settings(str(tmp_path)))
    text = generate()
    assert set(toolsets) == set(BUILTIN)
    for name, tools in toolsets.items():
        assert f"## Toolset `{name}`" in text
        for tool in tools:
            assert f"### `{tool['name']}`" in text
    for name in profiles:
        assert f"| `{name}` |" in text


async def test_every_tool_has_a_description_and_described_arguments(tmp_path) -> None:  # type: ignore[no-untyped-def]
    toolsets, _, _ = catalog_tools(doc_settings(str(tmp_path)))
    for tools in toolsets.values():
        for tool in tools:
            assert tool.get("description"), tool["name"]
    assert {t["name"] for t in await live_tools()} >= {"delegate", "call_tool", "list_tools", "get_tool_schema"}
