"""Fixtures for the model-API tests: anyio on asyncio, mock vendor servers, settings in tmp_path."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from mock_servers import MockServer

from relay.config import Settings, load_settings

ANTHROPIC_KEY = "sk-ant-test-0123456789abcdefghij"
XAI_KEY = "xai-test-0123456789abcdefghijkl"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def anthropic_mock() -> Iterator[MockServer]:
    with MockServer("anthropic") as server:
        yield server


@pytest.fixture
def openai_mock() -> Iterator[MockServer]:
    with MockServer("openai") as server:
        yield server


SettingsFactory = Callable[..., Settings]


@pytest.fixture
def make_settings(tmp_path: Path, anthropic_mock: MockServer, openai_mock: MockServer) -> SettingsFactory:
    """Settings with RELAY_HOME in tmp_path; anthropic and xai point at the mocks with test keys."""

    def make(config: str = "", **env: str) -> Settings:
        home = tmp_path / "home"
        home.mkdir(exist_ok=True)
        if config:
            (home / "config.toml").write_text(config, encoding="utf-8")
        base = {
            "RELAY_HOME": str(home),
            "RELAY_ANTHROPIC_BASE_URL": anthropic_mock.base_url,
            "RELAY_XAI_BASE_URL": openai_mock.base_url,
            "RELAY_OPENAI_BASE_URL": openai_mock.base_url,
            "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
            "XAI_API_KEY": XAI_KEY,
        }
        merged = {k: v for k, v in (base | env).items() if v}
        return load_settings(merged, cwd=tmp_path)

    return make
