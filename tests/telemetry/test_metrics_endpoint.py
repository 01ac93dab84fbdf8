"""GET /metrics on a real `relay serve --http` and on a real `relay worker`, parsed with prometheus_client's own
parser: the job counters and histograms move as jobs run, the queue's depth is the store's queued jobs, and
with tokens configured only an admin token or the metrics token may read it."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx2 as httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from relay.jobs.engine import Engine
from relay.jobs.request import JobRequest
from tests.conftest import SettingsFactory
from tests.reliability.conftest import RELAY, free_port, relay_env, wait_for
from tests.reliability.test_http_guardrails import listening, serving
from tests.server.test_principals import as_, call

pytestmark = pytest.mark.anyio

ADMIN = "root-token-0123456789abcdef"
USER = "alice-token-0123456789abcdef"
SCRAPER = "scraper-token-0123456789abcdef"
CONFIG = f"""
[jobs]
max_concurrent = 1

[queue]
lease_s = 1.5

[server.tokens.alice]
token = "{USER}"
role = "user"

[server.tokens.root]
token = "{ADMIN}"
role = "admin"

[telemetry]
metrics_token = "{SCRAPER}"
"""

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    """Every sample of an exposition, by name and labels (parsed by prometheus_client's own parser)."""
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def families(text: str) -> set[str]:
    return {family.name for family in text_string_to_metric_families(text)}


async def scrape(port: int, token: str | None = None) -> httpx.Response:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
        return await http.get("/metrics", headers=headers)


@pytest.fixture
async def front(make_settings: SettingsFactory, relay_home: Path, workdir: Path) -> AsyncIterator[int]:
    """A real `relay serve --http` with an admin token, a user token and the metrics token; its port."""
    make_settings(CONFIG)
    chosen = free_port()
    with serving(relay_home, workdir, "--port", str(chosen)):
        await wait_for(lambda: listening(chosen), 30, step=0.05)
        yield chosen


@pytest.mark.slow  # a real relay serve --http, its jobs real (fake-CLI) processes
async def test_the_fronts_metrics_count_the_jobs_that_ran_and_show_the_queued_ones_to_an_admin_only(
    front: int, workdir: Path
) -> None:
    with anyio.fail_after(90):
        async with as_(front, USER) as alice:
            _, done = await call(alice, "delegate", {"prompt": "hi", "cwd": str(workdir), "mode": "sync"})
            failed, broken = await call(
                alice,
                "delegate",
                {"prompt": "x [[fake:replay=claude_stream_error_500]]", "cwd": str(workdir), "mode": "sync"},
            )
            # One slot: a job that never ends holds it, so the next three wait in the queue.
            _, held = await call(alice, "delegate", {"prompt": "x [[fake:hang]]", "cwd": str(workdir), "mode": "async"})
            queued = [
                (await call(alice, "delegate", {"prompt": f"q{i}", "cwd": str(workdir), "mode": "async"}))[1]
                for i in range(3)
            ]

            async def renewed() -> Samples:
                got = samples((await scrape(front, ADMIN)).text)
                return got if got.get(("relay_lease_renewals_total", ())) else {}

            with anyio.fail_after(20):  # a heartbeat every third of the 1.5 s lease
                while not (seen := await renewed()):
                    await anyio.sleep(0.1)
            nobody, user, admin, scraper = [await scrape(front, t) for t in (None, USER, ADMIN, SCRAPER)]
            async with httpx.AsyncClient(timeout=10) as http:  # the metrics token reads /metrics and nothing else
                body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
                headers = {"accept": "application/json, text/event-stream", "authorization": f"Bearer {SCRAPER}"}
                mcp = await http.post(f"http://127.0.0.1:{front}/mcp", json=body, headers=headers)
                admin_headers = {"authorization": f"Bearer {ADMIN}"}
                rebound = await http.get(
                    f"http://127.0.0.1:{front}/metrics", headers={**admin_headers, "host": "evil.example"}
                )
            for job in (held, *queued):
                await call(alice, "job_cancel", {"job_id": job["job_id"]})

    assert (done["status"], failed, broken["status"]) == ("completed", True, "failed")
    assert [q["status"] for q in queued] == ["queued"] * 3
    assert (nobody.status_code, nobody.headers["www-authenticate"]) == (401, "Bearer")
    assert user.status_code == 403 and "metrics_token" in user.json()["hint"]
    assert admin.status_code == scraper.status_code == 200 and mcp.status_code == 401
    assert rebound.status_code in (403, 421)  # DNS rebinding: a page of another site reads nothing, token or not
    assert admin.headers["content-type"].startswith("text/plain")
    claude = (("agent", "claude"),)
    assert {
        key: seen.get(key)
        for key in [
            ("relay_jobs_submitted_total", claude),
            ("relay_jobs_ended_total", (("agent", "claude"), ("status", "completed"))),
            ("relay_jobs_ended_total", (("agent", "claude"), ("status", "failed"))),
            ("relay_job_duration_seconds_count", (("agent", "claude"), ("status", "completed"))),
            ("relay_job_duration_seconds_count", (("agent", "claude"), ("status", "failed"))),
            ("relay_claim_latency_seconds_count", claude),
            ("relay_queue_depth", (("agent", "claude"), ("labels", ""))),
            ("relay_worker_slots", ()),
            ("relay_worker_slots_in_use", ()),
        ]
    } == {
        ("relay_jobs_submitted_total", claude): 6.0,
        ("relay_jobs_ended_total", (("agent", "claude"), ("status", "completed"))): 1.0,
        ("relay_jobs_ended_total", (("agent", "claude"), ("status", "failed"))): 1.0,
        ("relay_job_duration_seconds_count", (("agent", "claude"), ("status", "completed"))): 1.0,
        ("relay_job_duration_seconds_count", (("agent", "claude"), ("status", "failed"))): 1.0,
        ("relay_claim_latency_seconds_count", claude): 3.0,  # the two that ended and the one that holds the slot
        ("relay_queue_depth", (("agent", "claude"), ("labels", ""))): 3.0,
        ("relay_worker_slots", ()): 1.0,
        ("relay_worker_slots_in_use", ()): 1.0,
    }
    assert seen[("relay_queue_oldest_seconds", claude)] > 0
    assert seen[("relay_lease_renewed_timestamp_seconds", ())] > 0
    assert {"relay_store_call_seconds", "relay_lease_expiries"} <= families(admin.text)


@pytest.mark.slow  # a real relay worker and its jobs' processes
async def test_a_workers_metrics_port_serves_what_it_ran_and_wants_the_metrics_token(
    make_settings: SettingsFactory, relay_home: Path, workdir: Path
) -> None:
    settings = make_settings(f'[telemetry]\nmetrics_token = "{SCRAPER}"\n', RELAY_RUN_JOBS="0")
    port = free_port()
    worker = subprocess.Popen(
        [RELAY, "worker", "--name", "w1", "--slots", "2", "--metrics-port", str(port)],
        env=relay_env(relay_home, RELAY_LEASE_S="1.5"),
        cwd=str(workdir),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        await wait_for(lambda: listening(port) or worker.poll() is not None, 30, step=0.05)
        assert worker.poll() is None, worker.communicate()[1]
        async with Engine(settings).running() as front:  # queues only: the worker runs them
            ids = [front.submit(JobRequest(agent="claude", prompt=f"job-{i}", cwd=str(workdir))) for i in range(3)]
            done = await front.wait(ids, "all", 60)
        refused = await scrape(port)
        text = (await scrape(port, SCRAPER)).text
        async with httpx.AsyncClient(timeout=10) as http:
            elsewhere = await http.get(f"http://127.0.0.1:{port}/mcp")
    finally:
        worker.terminate()
        worker.wait(30)
    assert [r.status for r in done] == ["completed"] * 3
    assert refused.status_code == 401 and elsewhere.status_code == 404
    seen = samples(text)
    assert seen[("relay_jobs_ended_total", (("agent", "claude"), ("status", "completed")))] == 3.0
    assert seen[("relay_claim_latency_seconds_count", (("agent", "claude"),))] == 3.0
    assert seen[("relay_job_first_output_seconds_count", (("agent", "claude"),))] == 3.0
    assert seen[("relay_worker_slots", ())] == 2.0
    assert ("relay_jobs_submitted_total", (("agent", "claude"),)) not in seen  # the front queued them, not the worker


@pytest.mark.slow  # a real relay worker process
def test_a_worker_refuses_to_serve_metrics_beyond_loopback_without_a_token(relay_home: Path, workdir: Path) -> None:
    env = {k: v for k, v in relay_env(relay_home).items() if k != "RELAY_METRICS_TOKEN"}
    done = subprocess.run(
        [RELAY, "worker", "--metrics-port", "0", "--metrics-host", "0.0.0.0"],
        env=env,
        cwd=str(workdir),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "INVALID_ARGUMENT" in done.stderr and "RELAY_METRICS_TOKEN" in done.stderr
