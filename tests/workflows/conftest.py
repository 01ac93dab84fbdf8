"""Fixtures for the Zen tools: mock model servers (Anthropic, and one OpenAI-style server behind openai,
xai and gemini-api), the fake agent CLIs, and an MCP client on `--profile zen` (or other toolsets)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.config import Settings, load_settings
from relay.server.app import build_server
from tests.api.mock_servers import MockServer, Recorded, Reply
from tests.conftest import FAKES

ANTHROPIC_KEY = "sk-ant-test-0123456789abcdefghij"
OPENAI_KEY = "sk-test-0123456789abcdefghijklmn"
XAI_KEY = "xai-test-0123456789abcdefghijkl"
GEMINI_KEY = "gemini-test-0123456789abcdefghij"


class SlowMock(MockServer):
    """A mock vendor server whose every answer starts `delay_s` after the request (each request in its own thread)."""

    def __init__(self, kind: Any, delay_s: float = 0.0) -> None:
        super().__init__(kind)
        self.delay_s = delay_s
        self.arrivals: list[float] = []  # time.monotonic() of each request

    def _next(self, body: Recorded) -> Reply:
        self.arrivals.append(time.monotonic())
        reply = super()._next(body)
        if self.delay_s:
            time.sleep(self.delay_s)
        return reply


@pytest.fixture
def anthropic_mock() -> Iterator[SlowMock]:
    with SlowMock("anthropic") as server:
        yield server


@pytest.fixture
def openai_mock() -> Iterator[SlowMock]:
    with SlowMock("openai") as server:
        yield server


@pytest.fixture
def argv_log(tmp_path: Path) -> Path:
    return tmp_path / "argv.jsonl"


SettingsFactory = Callable[..., Settings]


@pytest.fixture
def zen_settings(
    relay_home: Path, workdir: Path, argv_log: Path, anthropic_mock: SlowMock, openai_mock: SlowMock
) -> SettingsFactory:
    """Settings exposing `--profile zen` (unless told otherwise), keys for the mocks, the fake CLIs."""

    def make(config: str = "", **env: str) -> Settings:
        clis = "\n".join(
            f'[agents.{name}]\ncommand = "{FAKES / name}"\n[agents.{name}.env]\nFAKE_ARGV_LOG = "{argv_log}"\n'
            for name in ("claude", "codex", "gemini")
        )
        (relay_home / "config.toml").write_text(clis + "\n" + config, encoding="utf-8")
        base = {
            "RELAY_HOME": str(relay_home),
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(relay_home),
            "RELAY_PROFILE": "zen",
            "RELAY_ANTHROPIC_BASE_URL": anthropic_mock.base_url,
            "RELAY_OPENAI_BASE_URL": openai_mock.base_url,
            "RELAY_XAI_BASE_URL": openai_mock.base_url,
            "RELAY_GEMINI_API_BASE_URL": openai_mock.base_url,
            "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
            "OPENAI_API_KEY": OPENAI_KEY,
            "XAI_API_KEY": XAI_KEY,
            "GEMINI_API_KEY": GEMINI_KEY,
        }
        merged = {k: v for k, v in (base | env).items() if v}
        return load_settings(merged, cwd=workdir)

    return make


@asynccontextmanager
async def zen_client(settings: Settings) -> AsyncIterator[Client]:
    async with Client(build_server(settings)) as client:
        yield client


async def call(client: Client, tool: str, args: dict[str, Any], timeout: float = 60) -> tuple[bool, dict[str, Any]]:
    """Call a tool; returns (isError, the JSON it answered)."""
    with anyio.fail_after(timeout):
        result = await client.call_tool(tool, args)
    data = result.structured_content
    if data is None:
        text = result.content[0].text if result.content else "{}"  # pyright: ignore[reportAttributeAccessIssue]
        data = json.loads(text)
    return bool(result.is_error), dict(data)


def relay_error(data: dict[str, Any]) -> dict[str, Any]:
    """relay's {code, message, hint} of an error: in metadata under --profile zen (Zen's ToolOutput), else `error`."""
    return dict(data["metadata"]["error"] if data.get("status") == "error" else data["error"])


def error_message(data: dict[str, Any]) -> str:
    return str(relay_error(data)["message"])


def logged(argv_log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in argv_log.read_text().splitlines()] if argv_log.exists() else []


def request_text(rec: Recorded) -> str:
    """Everything a model was sent (system prompt and messages) as one string."""
    return json.dumps(rec.body)
