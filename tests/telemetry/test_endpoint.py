"""The worker's /metrics server on its own: who may read it, what else it answers, IPv4 and IPv6 loopback."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from relay.errors import ErrorCode, RelayError
from relay.telemetry.endpoint import MetricsServer, Readers

ADMIN = "root-token-0123456789abcdef"
USER = "alice-token-0123456789abcdef"


def get(url: str, token: str | None = None, method: str = "GET") -> tuple[int, str]:
    request = urllib.request.Request(url, method=method, headers={"authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_only_metrics_is_served_and_only_to_an_allowed_token(host: str) -> None:
    server = MetricsServer(host, 0, Readers([ADMIN], [USER]))
    base = f"http://[{host}]:{server.port}" if ":" in host else f"http://{host}:{server.port}"
    try:
        answers = {
            "admin": get(f"{base}/metrics", ADMIN),
            "user": get(f"{base}/metrics", USER),
            "nobody": get(f"{base}/metrics"),
            "wrong": get(f"{base}/metrics", "x" * 30),
            "elsewhere": get(f"{base}/mcp", ADMIN),
            "post": get(f"{base}/metrics", ADMIN, "POST"),
        }
    finally:
        server.close()
    assert {name: status for name, (status, _) in answers.items()} == {
        "admin": 200,
        "user": 403,
        "nobody": 401,
        "wrong": 401,
        "elsewhere": 404,
        "post": 405,
    }
    names = {family.name for family in text_string_to_metric_families(answers["admin"][1])}
    assert {"relay_jobs_ended", "relay_queue_depth", "relay_worker_slots"} <= names


def test_without_any_token_everyone_who_reaches_it_reads_it_and_a_taken_port_is_a_clear_error() -> None:
    server = MetricsServer("127.0.0.1", 0, Readers([]))
    try:
        status, _ = get(f"http://127.0.0.1:{server.port}/metrics")
        with pytest.raises(RelayError) as taken:
            MetricsServer("127.0.0.1", server.port, Readers([]))
    finally:
        server.close()
    assert status == 200
    assert taken.value.code is ErrorCode.INVALID_ARGUMENT and "--metrics-port" in taken.value.hint
