"""A planted API key must not reach RELAY_HOME (files, relay.db bytes) or the logs, even when echoed upstream."""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import pytest
from mock_servers import MockServer, Reply

from conftest import SettingsFactory
from relay.ask import AskArgs, submit_ask
from relay.jobs.engine import Engine

pytestmark = pytest.mark.anyio

PLANTED = "sk-ant-PLANTEDSECRET-9f8e7d6c5b4a3210zyxw"


async def test_a_planted_key_appears_nowhere_in_relay_home_or_logs(
    make_settings: SettingsFactory, anthropic_mock: MockServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    settings = make_settings(ANTHROPIC_API_KEY=PLANTED)
    anthropic_mock.script(
        Reply(text="fine"),
        Reply(status=401, error_message=f"invalid x-api-key: {PLANTED}"),
        Reply(status=429, headers={"retry-after": "0"}, error_message=f"slow down {PLANTED[:12]}****{PLANTED[-4:]}"),
        *[Reply(status=500, headers={"retry-after": "0"}, error_message=f"boom for key {PLANTED}") for _ in range(3)],
    )
    statuses: list[str] = []
    async with Engine(settings) as engine:
        for i in range(3):  # one at a time: the mock answers in the order requests arrive
            job_id = await submit_ask(engine, AskArgs(prompt=f"q{i}", model="sonnet"))
            with anyio.fail_after(20):
                statuses.append((await engine.wait_one(job_id, 20)).status)
    assert statuses == ["completed", "failed", "failed"]
    assert len(anthropic_mock.requests) == 6
    assert any(PLANTED in (r.headers.get("authorization") or "") for r in anthropic_mock.requests)

    needles = [PLANTED.encode(), b"PLANTEDSECRET", PLANTED[-12:].encode()]
    files = [p for p in settings.home.rglob("*") if p.is_file()]
    assert any(p.name == "relay.db" for p in files)
    for path in files:
        data = path.read_bytes()
        for needle in needles:
            assert needle not in data, f"{needle!r} found in {path}"
    logged = caplog.text + "".join(str(r.__dict__) for r in caplog.records)
    assert caplog.records
    for needle in needles:
        assert needle.decode() not in logged
