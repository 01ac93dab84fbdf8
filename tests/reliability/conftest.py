"""Shared helpers of the reliability suite: the adversarial agent, process accounting, and the figures file."""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from relay.config import Settings, load_settings
from relay.runtime import procinfo
from tests.conftest import FAKES

ADVERSARIAL = FAKES / "adversarial"
RELAY = str(Path(sys.executable).with_name("relay"))

# Figures the tests measure, merged into one JSON file and printed at the end of the run.
FIGURES: dict[str, Any] = {}


def record(section: str, key: str, value: Any) -> None:
    FIGURES.setdefault(section, {})[key] = value


@pytest.fixture(scope="session", autouse=True)
def figures_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.getbasetemp() / "reliability-figures.json"
    yield path
    if FIGURES:
        path.write_text(json.dumps(FIGURES, indent=2, sort_keys=True))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if FIGURES:
        terminalreporter.write_sep("-", "reliability figures")
        terminalreporter.write_line(json.dumps(FIGURES, indent=2, sort_keys=True))


AdvSettings = Callable[..., Settings]


@pytest.fixture
def adv_settings(relay_home: Path, workdir: Path) -> AdvSettings:
    """Settings whose `claude` is the adversarial fake; `agent` is appended to [agents.claude], `config` after it."""

    def make(config: str = "", agent: str = "", command: Path = ADVERSARIAL, **env: str) -> Settings:
        text = f'[agents.claude]\ncommand = "{command}"\n{agent}\n{config}'
        (relay_home / "config.toml").write_text(text)
        base = {"RELAY_HOME": str(relay_home), "PATH": os.environ.get("PATH", ""), "HOME": str(relay_home)}
        base.update(env)
        return load_settings(base, cwd=workdir)

    return make


def relay_env(relay_home: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "RELAY_HOME": str(relay_home), **extra}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_for(predicate: Callable[[], Any], timeout: float, step: float = 0.02) -> Any:
    """Poll a cheap predicate until it is truthy, bounded by `timeout` (fails the test past it)."""
    with anyio.fail_after(timeout):
        while True:
            value = predicate()
            if value:
                return value
            await anyio.sleep(step)


def read_pids(pidfile: Path) -> dict[int, float]:
    """pid -> start time of every process the adversarial fake reported (leader and children)."""
    pids: dict[int, float] = {}
    if not pidfile.exists():
        return pids
    for line in pidfile.read_text().splitlines():
        kind, _, pid = line.partition(" ")
        if kind in ("leader", "child") and pid.isdigit():
            try:
                pids[int(pid)] = psutil.Process(int(pid)).create_time()
            except psutil.NoSuchProcess:
                pids[int(pid)] = 0.0
    return pids


async def pids_when_ready(pidfile: Path, children: int, timeout: float = 20) -> dict[int, float]:
    """Wait until the fake wrote "ready" and its `children` child lines; return pid -> start time."""

    def ready() -> bool:
        if not pidfile.exists():
            return False
        text = pidfile.read_text()
        return "ready" in text and text.count("child ") >= children

    await wait_for(ready, timeout)
    return read_pids(pidfile)


def still_running(pids: dict[int, float]) -> list[int]:
    """The pids that still run as the very process that was recorded (zombies count as gone)."""
    left: list[int] = []
    for pid, started in pids.items():
        try:
            proc = psutil.Process(pid)
            if (not started or proc.create_time() == started) and proc.status() != psutil.STATUS_ZOMBIE:
                left.append(pid)
        except psutil.NoSuchProcess:
            continue
    return left


async def settle(pgid: int, pids: dict[int, float], timeout: float = 3.0) -> tuple[list[int], list[int]]:
    """Give SIGKILLs already sent a bounded moment to land; returns (group members, recorded pids) left."""
    with anyio.move_on_after(timeout):
        while procinfo.group_members(pgid) or still_running(pids):
            await anyio.sleep(0.02)
    return procinfo.group_members(pgid), still_running(pids)


def grep_tree(root: Path, needles: list[bytes], skip: Callable[[Path], bool] = lambda p: False) -> dict[str, int]:
    """Occurrences of each needle in every file under root (relative path -> hits), skipping what `skip` says."""
    hits: dict[str, int] = {}
    for path in sorted(root.rglob("*")):
        if not path.is_file() or skip(path):
            continue
        data = path.read_bytes()
        count = sum(data.count(n) for n in needles)
        if count:
            hits[str(path.relative_to(root))] = count
    return hits


QUICK_STREAM = (
    '{"type":"system","subtype":"init","session_id":"9u1c0000-0000-4000-8000-000000000001","model":"quick"}',
    '{"type":"assistant","message":{"content":[{"type":"text","text":"quick answer"}]},"session_id":"9u1c0000-0000-4000-8000-000000000001"}',
    '{"type":"result","subtype":"success","is_error":false,"result":"quick answer","num_turns":1,'
    '"session_id":"9u1c0000-0000-4000-8000-000000000001","total_cost_usd":0.000175,"usage":{"input_tokens":1,"output_tokens":1}}',
)


def quick_agent(folder: Path) -> Path:
    """A tiny /bin/sh agent that prints a complete Claude stream at once and exits 0 (no Python start-up)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "quick-claude"
    lines = " ".join(f"'{line}'" for line in QUICK_STREAM)
    path.write_text(f"#!/bin/sh\nprintf '%s\\n' {lines}\n")
    path.chmod(0o755)
    return path
