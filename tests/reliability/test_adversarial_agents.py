"""Adversarial agents: whatever the agent CLI does, its job reaches a final status in bounded time,
no process of its group is left afterwards, and every byte it printed is kept."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from relay.jobs.engine import Engine, JobRequest
from relay.runtime import procinfo
from tests.reliability.conftest import AdvSettings, pids_when_ready, record, settle

pytestmark = pytest.mark.anyio

GRACE_S = 0.5
# The exit status of a job relay killed is the shell's report of the signal; not asserted.
KILLED = -1


@dataclass(frozen=True)
class Case:
    directives: str
    status: str
    bound_s: float
    stop: str = "wait"  # "wait" for the job to end by itself (or by its timeouts), or "cancel" it
    children: int = 0
    timeout_s: float | None = None
    idle_timeout_s: float | None = None
    error: str | None = None
    exit_code: int = 0
    tee: bool = False


CASES = {
    "ignores_sigterm_and_hangs_until_cancelled": Case("ignore_term,hang", "cancelled", 8, "cancel", exit_code=KILLED),
    "never_exits_past_its_wall_clock_timeout": Case("hang", "timed_out", 10, timeout_s=1.0, exit_code=KILLED),
    "prints_nothing_past_its_idle_timeout": Case(
        "silent_hang,ignore_term", "timed_out", 10, idle_timeout_s=1.0, exit_code=KILLED
    ),
    "forks_grandchildren_that_hold_stdout_then_exits": Case("grandchildren=3,ignore_term", "completed", 8, children=3),
    "orphans_a_great_grandchild_that_ignores_sigterm": Case(
        "orphan,ignore_term,hang", "cancelled", 8, "cancel", children=1, exit_code=KILLED
    ),
    "forks_many_sigterm_ignoring_grandchildren_past_its_timeout": Case(
        "grandchildren=12,ignore_term,hang", "timed_out", 12, children=12, timeout_s=1.0, exit_code=KILLED
    ),
    "reads_stdin_until_eof": Case("stdin", "completed", 8),
    "floods_stdout_and_stderr": Case("flood=16,flood_err=4", "completed", 45, tee=True),
    "prints_invalid_utf8_and_binary": Case("binary,pattern=256", "completed", 10, tee=True),
    "exits_mid_line_after_its_result": Case("pattern=8,cut=result", "completed", 8, tee=True),
    "exits_mid_line_with_half_a_json_object": Case(
        "pattern=8,cut=garbage", "failed", 8, error="AGENT_FAILED", tee=True
    ),
    "kills_itself_with_sigkill_after_answering": Case("signal=KILL", "completed", 8, exit_code=137),
    "exits_non_zero_with_an_error_and_no_result": Case("cut=garbage,exit=5", "failed", 8, error="AGENT_FAILED"),
}


async def all_output(engine: Engine, job_id: str) -> bytes:
    chunks: list[bytes] = []
    offset = 0
    while True:
        data, total = engine.read_raw(job_id, offset, 1 << 20)
        chunks.append(data)
        offset += len(data)
        if not data or offset >= total:
            return b"".join(chunks)


@pytest.mark.parametrize("name", list(CASES))
async def test_a_misbehaving_agent_ends_in_bounded_time_and_leaves_no_process(
    adv_settings: AdvSettings, workdir: Path, tmp_path: Path, reap_groups: list[int], name: str
) -> None:
    case = CASES[name]
    pidfile, tee = tmp_path / "pids", tmp_path / "tee"
    extra = f",tee={tee}" if case.tee else ""
    prompt = f"misbehave [[fake:{case.directives},pidfile={pidfile}{extra}]]"
    settings = adv_settings(RELAY_KILL_GRACE_S=str(GRACE_S))
    async with Engine(settings).running() as engine:
        started = time.monotonic()
        job_id = engine.submit(
            JobRequest(
                agent="claude",
                prompt=prompt,
                cwd=str(workdir),
                timeout_s=case.timeout_s,
                idle_timeout_s=case.idle_timeout_s,
            )
        )
        with anyio.fail_after(case.bound_s):
            if case.stop == "cancel":
                pids = await pids_when_ready(pidfile, case.children)
                rec = await engine.cancel(job_id)
            else:
                rec = await engine.wait_one(job_id, case.bound_s)
                pids = await pids_when_ready(pidfile, case.children)
        elapsed = time.monotonic() - started
        assert rec.pid is not None
        reap_groups.append(rec.pid)
        stored = await all_output(engine, job_id)
        envelope = engine.envelope(job_id)
        page = engine.read_output(job_id, "events", 0, 1000)
    group_left, pids_left = await settle(rec.pid, pids)
    written = tee.read_bytes() if case.tee else stored
    figure = {"seconds_to_final": round(elapsed, 2), "processes": len(pids), "left": len(pids_left)}
    if case.tee:
        figure |= {"bytes_written": len(written), "bytes_lost": len(written) - len(stored)}
    record("adversarial", name, figure)
    assert rec.status == case.status, rec.error
    expected_code = case.error or {"cancelled": "CANCELLED", "timed_out": "TIMEOUT"}.get(case.status)
    assert (rec.error or {}).get("code") == expected_code
    assert rec.error is None or rec.error["hint"]
    if case.exit_code != KILLED:
        assert rec.exit_code == case.exit_code
    assert len(pids) == 1 + case.children
    assert group_left == [] and pids_left == []
    assert envelope["status"] == case.status
    assert page["job_id"] == job_id
    assert stored == written


async def test_a_job_cancelled_while_its_grandchildren_ignore_sigterm_is_killed_within_grace_and_confirm(
    adv_settings: AdvSettings, workdir: Path, tmp_path: Path, reap_groups: list[int]
) -> None:
    """SIGTERM, the grace, then SIGKILL: the cancel returns once the group is really gone."""
    pidfile = tmp_path / "pids"
    settings = adv_settings(RELAY_KILL_GRACE_S=str(GRACE_S))
    async with Engine(settings).running() as engine:
        job_id = engine.submit(
            JobRequest(
                agent="claude",
                prompt=f"x [[fake:grandchildren=4,orphan,ignore_term,hang,pidfile={pidfile}]]",
                cwd=str(workdir),
            )
        )
        pids = await pids_when_ready(pidfile, 5)
        pgid = engine.get(job_id).pid
        assert pgid is not None
        reap_groups.append(pgid)
        assert len(procinfo.group_members(pgid)) >= 6  # the sh shim, the leader and five children
        started = time.monotonic()
        with anyio.fail_after(10):
            rec = await engine.cancel(job_id)
        took = time.monotonic() - started
    assert rec.status == "cancelled"
    assert procinfo.group_members(pgid) == []  # no settling: cancel waited for the kernel
    assert (await settle(pgid, pids, 0.0))[1] == []
    assert GRACE_S <= took < GRACE_S + 5
