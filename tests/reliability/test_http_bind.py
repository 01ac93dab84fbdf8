"""Host checks that follow the bind: beyond loopback (with a token) the machine's own addresses and names,
and `[server] allowed_hosts`, are valid Hosts; any other Host and a foreign Origin are still refused."""

from __future__ import annotations

import socket
from pathlib import Path

import anyio
import httpx2 as httpx
import psutil
import pytest

from relay.server.http import bound_names, host_values
from tests.reliability.conftest import AdvSettings, free_port, wait_for
from tests.reliability.test_http_guardrails import HEADERS, INIT, listening, serving

pytestmark = pytest.mark.anyio


def own_ipv4() -> str:
    """A non-loopback IPv4 address of this machine (the test needs one to reach itself by its address)."""
    for addrs in psutil.net_if_addrs().values():
        for addr in addrs:
            if addr.family == socket.AF_INET and not addr.address.startswith("127."):
                return addr.address
    raise AssertionError("this machine has no non-loopback IPv4 address")


async def test_a_server_bound_to_all_interfaces_answers_its_own_address_and_configured_names(
    adv_settings: AdvSettings, relay_home: Path, workdir: Path
) -> None:
    adv_settings('[server]\nallowed_hosts = ["relay.example.internal"]\n')
    port = free_port()
    token = "t0ken-for-this-test-only"
    ip = own_ipv4()
    auth = {**HEADERS, "authorization": f"Bearer {token}"}
    with serving(relay_home, workdir, "--host", "0.0.0.0", "--port", str(port), "--token", token):
        await wait_for(lambda: listening(port), 30, step=0.05)
        async with httpx.AsyncClient(base_url=f"http://{ip}:{port}", timeout=10) as client:
            with anyio.fail_after(30):
                by_ip = await client.post("/mcp", json=INIT, headers=auth)
                by_name = await client.post(
                    "/mcp", json=INIT, headers={**auth, "host": f"relay.example.internal:{port}"}
                )
                by_hostname = await client.post(
                    "/mcp", json=INIT, headers={**auth, "host": f"{socket.gethostname()}:{port}"}
                )
                wrong_token = await client.post("/mcp", json=INIT, headers={**HEADERS, "authorization": "Bearer no"})
                rebinding = await client.post("/mcp", json=INIT, headers={**auth, "host": "evil.example"})
                foreign_origin = await client.post("/mcp", json=INIT, headers={**auth, "origin": "http://evil.example"})
    statuses = {
        "by_ip": by_ip.status_code,
        "by_name": by_name.status_code,
        "by_hostname": by_hostname.status_code,
        "wrong_token": wrong_token.status_code,
    }
    assert statuses == {"by_ip": 200, "by_name": 200, "by_hostname": 200, "wrong_token": 401}
    assert 400 <= rebinding.status_code < 500 and 400 <= foreign_origin.status_code < 500


def test_the_host_values_of_a_bind_are_its_names_with_and_without_the_port() -> None:
    assert bound_names("10.1.2.3") == ["10.1.2.3"]
    assert own_ipv4() in bound_names("0.0.0.0")
    assert all(":" not in name for name in bound_names("0.0.0.0"))
    assert host_values(["10.1.2.3", "fe80::1"], 80) == ["10.1.2.3", "10.1.2.3:80", "[fe80::1]", "[fe80::1]:80"]
