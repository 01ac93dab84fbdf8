"""A worktree belongs to the principal whose job made it: another user can neither follow up in it nor land it."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine, JobRequest
from relay.principal import Principal, acting_as
from tests.conftest import SettingsFactory

pytestmark = pytest.mark.anyio

ALICE = Principal("alice", "user")
BOB = Principal("bob", "user")


async def test_another_users_follow_up_or_land_in_a_jobs_worktree_is_not_found(
    make_settings: SettingsFactory, repo: Path
) -> None:
    async with Engine(make_settings()).running() as engine:
        with acting_as(ALICE):
            first = engine.submit(
                JobRequest(agent="claude", prompt="one [[fake:write=a.txt~1]]", cwd=str(repo), workspace="worktree")
            )
            with anyio.fail_after(20):
                await engine.wait_one(first, 20)
        with acting_as(BOB):
            with pytest.raises(RelayError) as follow_up:
                engine.submit(JobRequest(agent="claude", prompt="two", workspace=f"job:{first}"))
            with pytest.raises(RelayError) as land:
                await engine.land(first)
        with acting_as(ALICE):
            second = engine.submit(JobRequest(agent="claude", prompt="two", workspace=f"job:{first}"))
            with anyio.fail_after(20):
                await engine.wait_one(second, 20)
            branch = (engine.envelope(second)["workspace"] or {}).get("branch")
    assert follow_up.value.code is land.value.code is ErrorCode.JOB_NOT_FOUND
    assert branch == f"relay/{first}"
