"""Bad input the fuzzer found: each case must be a coded error or a failed job, and the server must keep answering."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.server.app import build_server
from tests.reliability.conftest import AdvSettings, quick_agent

pytestmark = pytest.mark.anyio


async def call(client: Client, tool: str, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    with anyio.fail_after(30):
        result = await client.call_tool(tool, args)
    assert result.structured_content is not None
    return bool(result.is_error), result.structured_content


@pytest.mark.parametrize(
    "args",
    [
        {"prompt": "a NUL \x00 in the prompt", "mode": "async"},
        {"prompt": "x", "model": "so\x00nnet", "mode": "async"},
        {"prompt": "x", "system_prompt": "\x00", "mode": "async"},
    ],
    ids=["prompt", "model", "system_prompt"],
)
async def test_a_nul_byte_in_a_delegated_argv_fails_one_job_and_the_server_keeps_answering(
    adv_settings: AdvSettings, workdir: Path, tmp_path: Path, args: dict[str, Any]
) -> None:
    settings = adv_settings(command=quick_agent(tmp_path / "bin"))
    async with Client(build_server(settings)) as client:
        failed, first = await call(client, "delegate", {**args, "cwd": str(workdir)})
        if not failed:
            _, waited = await call(client, "job_wait", {"job_ids": [first["job_id"]], "timeout_s": 10})
            first = waited["jobs"][0]
        _, after = await call(client, "delegate", {"prompt": "still alive?", "cwd": str(workdir), "mode": "sync"})
    assert first["error"]["code"] == "INVALID_ARGUMENT" and first["error"]["hint"]
    assert after["status"] == "completed"


async def test_a_nul_byte_in_cwd_is_an_invalid_argument(adv_settings: AdvSettings, workdir: Path) -> None:
    async with Client(build_server(adv_settings())) as client:
        failed, content = await call(client, "delegate", {"prompt": "x", "cwd": f"{workdir}/\x00", "mode": "async"})
    assert failed and content["error"]["code"] == "INVALID_ARGUMENT" and content["error"]["hint"]


@pytest.mark.parametrize("tool", ["job_status", "job_result", "job_cancel"])
async def test_a_job_id_longer_than_sqlite_allows_in_like_is_job_not_found(
    adv_settings: AdvSettings, workdir: Path, tmp_path: Path, tool: str
) -> None:
    async with Client(build_server(adv_settings(command=quick_agent(tmp_path / "bin")))) as client:
        await call(client, "delegate", {"prompt": "a job to search past", "cwd": str(workdir), "mode": "sync"})
        failed, content = await call(client, tool, {"job_id": "a" * 60_000})
    assert failed and content["error"]["code"] == "JOB_NOT_FOUND"
