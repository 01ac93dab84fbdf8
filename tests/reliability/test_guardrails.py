"""Guardrails: recursion depth, concurrency limits that queue, cwd confined to the allowed roots, spend caps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.server.app import build_server
from relay.store import JobRecord, Store
from tests.conftest import SettingsFactory
from tests.reliability.conftest import AdvSettings, record

pytestmark = pytest.mark.anyio

SESSION = "b3af0212-3a6d-4156-a35c-cfab742dc56e"


async def call(client: Client, tool: str, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    with anyio.fail_after(60):
        result = await client.call_tool(tool, args)
    assert result.structured_content is not None
    return bool(result.is_error), result.structured_content


async def test_a_relay_at_the_depth_limit_refuses_to_delegate(make_settings: SettingsFactory, workdir: Path) -> None:
    async with Client(build_server(make_settings(RELAY_DEPTH="2", RELAY_MAX_DEPTH="2"))) as client:
        failed, content = await call(client, "delegate", {"prompt": "x", "cwd": str(workdir), "mode": "sync"})
        _, jobs = await call(client, "job_list", {})
    assert failed and content["error"]["code"] == "LIMIT_REACHED" and content["error"]["hint"]
    assert jobs["jobs"] == []  # refused before anything was recorded or started


async def test_a_child_job_sees_relay_depth_one_more_than_its_relay(
    make_settings: SettingsFactory, workdir: Path, tmp_path: Path
) -> None:
    log = tmp_path / "argv.jsonl"
    settings = make_settings(f'[agents.claude.env]\nFAKE_ARGV_LOG = "{log}"\n', RELAY_DEPTH="1", RELAY_MAX_DEPTH="2")
    async with Client(build_server(settings)) as client:
        _, env = await call(client, "delegate", {"prompt": "x", "cwd": str(workdir), "mode": "sync"})
    assert env["status"] == "completed"
    (line,) = log.read_text().splitlines()
    assert json.loads(line)["env"]["RELAY_DEPTH"] == "2"


def max_overlap(records: list[JobRecord]) -> int:
    edges = sorted([(r.started_at or 0.0, 1) for r in records] + [(r.finished_at or 0.0, -1) for r in records])
    best = current = 0
    for _, step in edges:
        current += step
        best = max(best, current)
    return best


@pytest.mark.parametrize(
    ("config", "limit"),
    [
        ("[jobs]\nmax_concurrent = 2\nmax_concurrent_per_agent = 8\n", 2),
        ("[jobs]\nmax_concurrent = 8\nmax_concurrent_per_agent = 2\n", 2),
        # make_settings opens [agents.claude]; a leading key lands in that table.
        ("max_concurrent = 1\n[jobs]\nmax_concurrent = 8\n", 1),
    ],
    ids=["global", "per_agent_default", "per_agent_config"],
)
async def test_jobs_past_the_concurrency_limit_queue_and_all_complete(
    make_settings: SettingsFactory, workdir: Path, config: str, limit: int
) -> None:
    settings = make_settings(config)
    async with Client(build_server(settings)) as client:
        ids = []
        for i in range(5):
            _, env = await call(
                client, "delegate", {"prompt": f"job {i} [[fake:sleep=0.4]]", "cwd": str(workdir), "mode": "async"}
            )
            ids.append(env["job_id"])
        _, status = await call(client, "status", {})
        _, waited = await call(client, "job_wait", {"job_ids": ids, "mode": "all", "timeout_s": 60})
    records = [r for r in Store(settings.db_path).list_jobs() if r.id in ids]
    overlap = max_overlap(records)
    record("guardrails", f"concurrency_limit_{limit}", {"jobs": 5, "max_running_at_once": overlap})
    assert status["running_jobs"] <= limit and status["running_jobs"] + status["queued_jobs"] == 5
    assert waited["done"] and {j["status"] for j in waited["jobs"]} == {"completed"}
    assert overlap == limit


@pytest.mark.parametrize(
    "where",
    ["dotdot", "symlink_out", "symlink_chain_out", "proc_self_root", "outside"],
)
async def test_a_cwd_that_resolves_outside_the_allowed_roots_is_refused(
    adv_settings: AdvSettings, workdir: Path, tmp_path: Path, where: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (workdir / "out").symlink_to(outside)
    (workdir / "hop").symlink_to(workdir / "out")
    cwd = {
        "dotdot": f"{workdir}/../outside",
        "symlink_out": str(workdir / "out"),
        "symlink_chain_out": str(workdir / "hop"),
        "proc_self_root": f"/proc/self/root{outside}",
        "outside": str(outside),
    }[where]
    async with Client(build_server(adv_settings())) as client:
        failed, content = await call(client, "delegate", {"prompt": "x", "cwd": cwd, "mode": "sync"})
        _, jobs = await call(client, "job_list", {})
    assert failed and content["error"]["code"] == "CWD_NOT_ALLOWED" and content["error"]["hint"]
    assert jobs["jobs"] == []


async def test_a_cwd_inside_the_roots_through_a_symlink_or_dotdot_is_allowed_and_resolved(
    adv_settings: AdvSettings, workdir: Path, tmp_path: Path
) -> None:
    (workdir / "sub").mkdir()
    (tmp_path / "link-in").symlink_to(workdir / "sub")
    async with Client(build_server(adv_settings())) as client:
        _, via_link = await call(client, "delegate", {"prompt": "x", "cwd": str(tmp_path / "link-in"), "mode": "sync"})
        _, via_dots = await call(client, "delegate", {"prompt": "x", "cwd": f"{workdir}/sub/../sub/.", "mode": "sync"})
    store_cwds = {r.cwd for r in Store(tmp_path / "relay-home" / "relay.db").list_jobs()}
    assert via_link["status"] == via_dots["status"] == "completed"
    assert store_cwds == {str(workdir / "sub")}


async def test_a_session_whose_cost_reached_the_session_cap_is_refused(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    """Each run of the fake costs 0.000175 USD; with a cap of 0.0003 the third turn of a session is refused."""
    settings = make_settings("[jobs]\nmax_session_cost_usd = 0.0003\n")
    async with Client(build_server(settings)) as client:
        _, first = await call(client, "delegate", {"prompt": "turn 1", "cwd": str(workdir), "mode": "sync"})
        _, second = await call(
            client, "delegate", {"prompt": "turn 2", "session_id": SESSION, "cwd": str(workdir), "mode": "sync"}
        )
        failed, third = await call(
            client, "delegate", {"prompt": "turn 3", "session_id": SESSION, "cwd": str(workdir), "mode": "sync"}
        )
        _, sessions = await call(client, "session_list", {})
    assert first["status"] == second["status"] == "completed"
    assert sessions["sessions"][0]["total_cost_usd"] == pytest.approx(0.00035)
    assert failed and third["error"]["code"] == "LIMIT_REACHED" and third["error"]["hint"]
