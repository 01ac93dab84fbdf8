"""Fixtures for the compat profiles: a relay serving one profile, its agent CLIs replaced by the fakes."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

from relay.server.app import build_server
from tests.conftest import FAKES, SettingsFactory

# Generous: the machine is shared and each call spawns a fake CLI.
CALL_TIMEOUT_S = 60
RELAY = str(Path(sys.executable).with_name("relay"))

ProfileClient = Callable[..., Client]


@pytest.fixture
def argv_log(tmp_path: Path) -> Path:
    return tmp_path / "argv.jsonl"


@pytest.fixture
def recordings(tmp_path: Path) -> Path:
    """A folder the fakes also replay from (after tests/fakes/recordings): a test's own agent replies."""
    path = tmp_path / "recordings"
    path.mkdir()
    return path


@pytest.fixture
def fakes_config(argv_log: Path, recordings: Path) -> str:
    """Every agent CLI is its fake from tests/fakes, logging its argv (make_settings declares claude's command)."""
    env = f'FAKE_ARGV_LOG = "{argv_log}"\nFAKE_GOLDEN_DIR = "{recordings}"\n'
    blocks = [f"[agents.claude.env]\n{env}"] + [
        f'[agents.{name}]\ncommand = "{FAKES / name}"\n[agents.{name}.env]\n{env}' for name in ("codex", "gemini")
    ]
    return "\n".join(blocks)


@pytest.fixture
def profile_client(make_settings: SettingsFactory, fakes_config: str) -> ProfileClient:
    """A client of a relay serving `profile` (or, with `toolsets=`, those toolsets), with extra config and env."""

    def make(
        profile: str | None = None, config: str = "", *, toolsets: str | None = None, fakes: bool = True, **env: str
    ) -> Client:
        chosen = {"RELAY_TOOLSETS": toolsets} if toolsets else {"RELAY_PROFILE": profile or ""}
        settings = make_settings((fakes_config if fakes else "") + config, **chosen, **env)
        return Client(build_server(settings))

    return make


async def call(c: Client, tool: str, **args: Any) -> CallToolResult:
    with anyio.fail_after(CALL_TIMEOUT_S):
        return await c.call_tool(tool, args)


async def wait_done(c: Client, job_id: str) -> None:
    """Wait for a job through relay's own job_wait (the server must expose the core toolset)."""
    with anyio.fail_after(CALL_TIMEOUT_S):
        result = await c.call_tool("job_wait", {"job_ids": [job_id], "timeout_s": CALL_TIMEOUT_S})
    assert data(result)["done"], data(result)


def text(result: CallToolResult) -> str:
    return "".join(str(getattr(block, "text", "")) for block in result.content)


def data(result: CallToolResult) -> dict[str, Any]:
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(text(result))


def error_message(result: CallToolResult) -> str:
    assert result.is_error, text(result)
    return str(data(result)["error"]["message"])


def logged(argv_log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in argv_log.read_text().splitlines()] if argv_log.exists() else []


async def stdio_tool_names(profile: str, relay_home: Path, workdir: Path) -> list[str]:
    """The tools `relay serve --profile NAME` lists over real stdio."""
    params = StdioServerParameters(
        command=RELAY,
        args=["serve", "--profile", profile],
        env={**os.environ, "RELAY_HOME": str(relay_home)},
        cwd=str(workdir),
    )
    with anyio.fail_after(CALL_TIMEOUT_S):
        async with Client(params) as c:
            tools = await c.list_tools()
    return sorted(t.name for t in tools.tools)


async def schemas(c: Client) -> dict[str, dict[str, Any]]:
    """Tool name -> its published input schema."""
    return {t.name: t.input_schema for t in (await c.list_tools()).tools}
