"""Fixtures for seed 003's gobby tools: settings with the fake codex, a project that is a git repository."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.config import Settings
from tests.conftest import FAKES, SettingsFactory
from tests.tracker.conftest import init_repo

FAKE_CODEX = FAKES / "codex"
CALL_TIMEOUT_S = 90


@pytest.fixture
def project_dir(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """relay runs in a git repository (the caller's project), as when a client starts it there."""
    repo = init_repo(workdir / "proj")
    monkeypatch.chdir(repo)
    return repo


@pytest.fixture
def gobby_settings(make_settings: SettingsFactory, project_dir: Path) -> Settings:
    """Profile gobby, with the fake codex as the codex CLI."""
    settings = make_settings(f'[agents.codex]\ncommand = "{FAKE_CODEX}"\n')
    return settings.with_(profile="gobby")


async def tool(c: Client, name: str, **args: Any) -> dict[str, Any]:
    """Call a tool; its structured content, checked against its JSON text."""
    with anyio.fail_after(CALL_TIMEOUT_S):
        result = await c.call_tool(name, args)
    assert result.structured_content is not None
    assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]
    assert bool(result.is_error) == (result.structured_content.get("success") is False)
    return result.structured_content
