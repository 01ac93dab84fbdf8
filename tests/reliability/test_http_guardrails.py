"""HTTP: loopback by default, a token required anywhere else, 401 without the bearer, DNS rebinding refused."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx2 as httpx
import psutil
import pytest

from tests.reliability.conftest import RELAY, AdvSettings, free_port, relay_env, wait_for

pytestmark = pytest.mark.anyio

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@contextmanager
def serving(relay_home: Path, workdir: Path, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        [RELAY, "serve", "--http", *args],
        env=relay_env(relay_home),
        cwd=str(workdir),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def listen_addresses(pid: int, port: int) -> set[str]:
    return {
        c.laddr.ip
        for c in psutil.Process(pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port
    }


async def test_http_binds_loopback_by_default_and_refuses_a_rebinding_host(
    adv_settings: AdvSettings, relay_home: Path, workdir: Path
) -> None:
    adv_settings()
    port = free_port()
    with serving(relay_home, workdir, "--port", str(port)) as proc:
        await wait_for(lambda: listening(port), 30, step=0.05)
        addresses = listen_addresses(proc.pid, port)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            with anyio.fail_after(20):
                good = await client.post("/mcp", json=INIT, headers=HEADERS)
                evil_host = await client.post("/mcp", json=INIT, headers={**HEADERS, "host": "evil.example"})
                evil_origin = await client.post("/mcp", json=INIT, headers={**HEADERS, "origin": "http://evil.example"})
    assert addresses == {"127.0.0.1"}
    assert good.status_code == 200
    assert 400 <= evil_host.status_code < 500 and 400 <= evil_origin.status_code < 500


def test_serving_http_on_all_interfaces_without_a_token_exits_2(relay_home: Path, workdir: Path) -> None:
    out = subprocess.run(
        [RELAY, "serve", "--http", "--host", "0.0.0.0", "--port", str(free_port())],
        env=relay_env(relay_home),
        cwd=str(workdir),
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 2 and "--token" in out.stderr


async def test_http_beyond_loopback_wants_the_bearer_and_still_checks_the_host(
    adv_settings: AdvSettings, relay_home: Path, workdir: Path
) -> None:
    adv_settings()
    port = free_port()
    token = "t0ken-for-this-test-only"
    with serving(relay_home, workdir, "--host", "0.0.0.0", "--port", str(port), "--token", token):
        await wait_for(lambda: listening(port), 30, step=0.05)
        auth = {**HEADERS, "authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            with anyio.fail_after(20):
                missing = await client.post("/mcp", json=INIT, headers=HEADERS)
                wrong = await client.post("/mcp", json=INIT, headers={**HEADERS, "authorization": "Bearer nope"})
                rebinding = await client.post("/mcp", json=INIT, headers={**auth, "host": "evil.example"})
                good = await client.post("/mcp", json=INIT, headers=auth)
    assert missing.status_code == 401 and wrong.status_code == 401
    assert 400 <= rebinding.status_code < 500
    assert good.status_code == 200
