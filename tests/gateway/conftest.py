"""Fixtures for the gateway tests: real downstream servers (the project's toy SDK server over stdio,
Streamable HTTP and SSE, and the two published reference servers from .e2e/) behind a Gateway."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from relay.gateway import Gateway, Limits, ServerRegistry, make_config
from relay.gateway.config import ServerConfig

HERE = Path(__file__).resolve().parent
TOY = HERE / "servers" / "toy_server.py"
REPO = HERE.parents[1]
PUBLISHED_BIN = REPO / ".e2e" / "mcp-servers" / "node_modules" / ".bin"
PROJECT = "/projects/demo"
# Generous: every bound here is a ceiling for a loaded 2-core machine, not an expected time.
LIMITS = Limits(connect_timeout_s=60.0, call_timeout_s=60.0, list_wait_s=30.0)
# The same for relay built from settings: the gateway toolset exposed, waits that suit a loaded machine.
# A stdio server a caller adds is a command relay starts, a `full` action: the person grants it here (the tests of
# the grant itself are in tests/security/test_commands_are_full.py).
GATEWAY_ENV = {"RELAY_TOOLSETS": "core,gateway", "RELAY_GATEWAY_LIST_WAIT_S": "30", "RELAY_GRANT": "full"}


def toy_config(name: str = "toy", *args: str, state: Path, **extra: Any) -> ServerConfig:
    env = {"TOY_STATE_DIR": str(state), **extra.pop("env", {})}
    return make_config(
        name=name, transport="stdio", command=sys.executable, args=[str(TOY), *args], env=env, scope=PROJECT, **extra
    )


@pytest.fixture
def registry(relay_home: Path) -> Iterator[ServerRegistry]:
    reg = ServerRegistry(relay_home / "relay.db", relay_home)
    yield reg
    reg.close()


@pytest.fixture
async def gateway(registry: ServerRegistry, relay_home: Path) -> AsyncIterator[Gateway]:
    gw = Gateway(registry, relay_home, PROJECT, LIMITS)
    try:
        yield gw
    finally:
        await gw.aclose()


@pytest.fixture
def published() -> Path:
    """The pinned published servers; missing ones fail the tier (it must not silently skip)."""
    missing = [
        n for n in ("mcp-server-everything", "mcp-server-filesystem") if not os.access(PUBLISHED_BIN / n, os.X_OK)
    ]
    if missing:
        pytest.fail(f"the gateway tests need {', '.join(missing)}; run scripts/install-mcp-servers", pytrace=False)
    return PUBLISHED_BIN


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def toy_http(mode: str, state: Path) -> Iterator[str]:
    """The toy server over HTTP (`http`: Streamable HTTP at /mcp, `sse`: the old transport at /sse)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(TOY), mode, str(port)],
        env={**os.environ, "TOY_STATE_DIR": str(state)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the toy {mode} server did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/" + ("mcp" if mode == "http" else "sse")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    return True
