"""Shared fixtures: every test gets its own RELAY_HOME; fakes of the agent CLIs live in tests/fakes."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp.client.session import ClientSession
from mcp.types import CallToolResult

from relay.config import Settings, load_settings
from relay.runtime import procinfo

FAKES = Path(__file__).resolve().parent / "fakes"
FAKE_CLAUDE = FAKES / "claude"
REPO = Path(__file__).resolve().parents[1]
RECORDINGS = FAKES / "recordings"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# How many error results were checked against their tool's output schema (the check must be seen to run).
ERROR_RESULTS_VALIDATED: list[str] = []


@pytest.fixture(autouse=True, scope="session")
def every_result_matches_its_output_schema() -> Iterator[None]:
    """Every tool result any test receives must be valid against the tool's published output schema.

    The SDK's client checks successful results only; MCP Inspector and other clients check error
    results too, so this wraps the client session to check those as well.
    """
    original = ClientSession.call_tool

    async def checked(self: ClientSession, name: str, *args: Any, **kwargs: Any) -> Any:
        result = await original(self, name, *args, **kwargs)
        if isinstance(result, CallToolResult) and result.is_error:
            await self.validate_tool_result(name, result)
            ERROR_RESULTS_VALIDATED.append(name)
        return result

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ClientSession, "call_tool", checked)
        yield


@pytest.fixture(autouse=True)
def relay_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Tests never touch the real home: RELAY_HOME points at a fresh temporary folder."""
    home = tmp_path / "relay-home"
    home.mkdir()
    monkeypatch.setenv("RELAY_HOME", str(home))
    return home


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


SettingsFactory = Callable[..., Settings]


@pytest.fixture
def make_settings(relay_home: Path, workdir: Path) -> SettingsFactory:
    """Settings with the fake claude configured; keyword arguments become env overrides or config text."""

    def make(config: str = "", **env: str) -> Settings:
        text = f'[agents.claude]\ncommand = "{FAKE_CLAUDE}"\n' + config
        (relay_home / "config.toml").write_text(text)
        base = {"RELAY_HOME": str(relay_home), "PATH": os.environ.get("PATH", ""), "HOME": str(relay_home)}
        base.update(env)
        return load_settings(base, cwd=workdir)

    return make


def processes_in_group(pgid: int) -> list[int]:
    return procinfo.group_members(pgid)


@pytest.fixture
def reap_groups() -> Iterator[list[int]]:
    """Collects process groups a test started; kills whatever is left so a failing test leaks nothing."""
    groups: list[int] = []
    yield groups
    for pgid in groups:
        with contextlib.suppress(OSError):
            os.killpg(pgid, 9)
