"""The official MCP conformance suite's protocol scenarios against `relay serve --http` itself.

The scenarios that need the suite's own fixture tools (tools-call-*, prompts-*, resources-*,
completion, logging) do not apply to relay's tools; these are the ones about the protocol and the
transport, which relay's real server must pass as it is shipped.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_tasks_conformance import NODE, SUITE, free_port, run_scenario, serving

pytestmark = pytest.mark.e2e

RELAY = str(Path(sys.executable).with_name("relay"))
SCENARIOS = (
    "server-initialize",
    "server-session-lifecycle",
    "ping",
    "tools-list",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
    "http-header-validation",
)


@pytest.fixture(scope="module")
def relay_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not (os.access(NODE, os.X_OK) and SUITE.is_file()):
        pytest.fail(f"the conformance suite is not installed in {SUITE.parents[3]} (npm install there)")
    home = tmp_path_factory.mktemp("conformance-home")
    port = free_port()
    argv = [RELAY, "serve", "--http", "--port", str(port)]
    with serving(argv, port, {**os.environ, "RELAY_HOME": str(home)}) as url:
        yield url


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_relays_http_server_passes_the_conformance_scenario(relay_url: str, scenario: str, tmp_path: Path) -> None:
    checks = run_scenario(relay_url, scenario, tmp_path / "out")
    statuses = {str(c["id"]): str(c["status"]) for c in checks}
    assert statuses and all(s in ("SUCCESS", "INFO") for s in statuses.values()), statuses
