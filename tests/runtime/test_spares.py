"""Spare job shims (runtime/spares.py): made ahead by the spawn helper, each runs one job as the `sh` shim would.

Every test here first waits for spares to be ready and checks that its job really went through one
(`via_spare`, or `launcher.start_job` answering), so the path under test is the spare's, not the
ordinary spawn the other runtime tests cover.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from relay.agents.base import Invocation
from relay.runtime import choice, launcher, procinfo, supervisor
from relay.runtime.supervisor import JobFiles

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="Linux runtime only")]

SETSID_AGENT = Path(__file__).resolve().parent / "setsid_agent"
ORPHAN_REPORTS_ITS_PARENT = textwrap.dedent(
    """
    import os, sys, time
    if os.fork() == 0:
        if os.fork() == 0:
            time.sleep(0.3)
            with open(sys.argv[1], "w") as fh:
                fh.write(str(os.getppid()))
            os._exit(0)
        os._exit(0)
    time.sleep(1.0)
    """
)
# Bound on anything here (generous: the test machine is shared).
BOUND_S = 30


@pytest.fixture(autouse=True)
def spares_ready() -> Iterator[None]:
    if not choice.active().runtime.subreaper:
        pytest.skip("spares serve the Linux runtime (the portable runtime has no subreaper)")
    launcher.warm()
    deadline = time.monotonic() + BOUND_S
    while launcher.spares_ready() < 1:
        assert time.monotonic() < deadline, "the spawn helper made no spare"
        time.sleep(0.01)
    yield


def gone(pid: int, ticks: int | None) -> bool:
    deadline = time.monotonic() + BOUND_S
    while procinfo.is_alive(pid, ticks):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


async def finished(proc: supervisor.SpawnedProcess) -> None:
    with anyio.fail_after(BOUND_S):
        while not await proc.wait_exit(1):
            pass


async def test_a_spare_runs_the_job_in_its_cwd_with_its_env_and_stdin_and_tells_its_status(tmp_path: Path) -> None:
    files = JobFiles(tmp_path / "job")
    code = (
        "import os, sys; print(os.getcwd()); print(sorted(os.environ.items())); print(sys.stdin.read()); "
        "print('err', file=sys.stderr); sys.exit(5)"
    )
    inv = Invocation(argv=(sys.executable, "-c", code), env={"ONLY": "this"}, cwd=str(tmp_path), stdin_text="fed")
    proc = supervisor.spawn(inv, files)
    assert proc.via_spare
    await finished(proc)
    assert proc.exit_code() == 5
    lines = files.stdout.read_text().splitlines()
    # Only the job's env (the interpreter itself may add LC_CTYPE when it coerces the C locale).
    assert (lines[0], lines[2]) == (str(tmp_path), "fed")
    assert ("ONLY", "this") in eval(lines[1]) and {k for k, _ in eval(lines[1])} <= {"ONLY", "LC_CTYPE"}
    assert files.stderr.read_text() == "err\n"
    assert files.read_pid() == proc.pid  # the spare is the job's process: its pid on disk, as the shim's
    assert gone(proc.pid, proc.start_ticks) and files.read_exit_code() == 5
    proc.close()


async def test_the_job_leads_its_own_session_and_a_term_for_the_job_ends_the_agent_not_the_spare(
    tmp_path: Path,
) -> None:
    files = JobFiles(tmp_path / "job")
    inv = Invocation(argv=(sys.executable, "-c", "import time; time.sleep(30)"), env={}, cwd=str(tmp_path))
    proc = supervisor.spawn(inv, files)
    assert proc.via_spare
    assert os.getsid(proc.pid) == proc.pid and os.getpgid(proc.pid) == proc.pid
    deadline = time.monotonic() + BOUND_S
    while not procinfo.group_members(proc.pid)[1:] and time.monotonic() < deadline:
        time.sleep(0.01)  # the agent is in the group
    os.killpg(proc.pid, signal.SIGTERM)
    await finished(proc)
    assert proc.exit_code() == 128 + signal.SIGTERM  # what `sh` reports for an agent killed by a signal
    proc.close()


async def test_what_the_agent_orphans_reparents_to_the_spare_and_dies_with_the_job(tmp_path: Path) -> None:
    report = tmp_path / "ppid"
    files = JobFiles(tmp_path / "job")
    inv = Invocation(argv=(sys.executable, "-c", ORPHAN_REPORTS_ITS_PARENT, str(report)), env={}, cwd=str(tmp_path))
    proc = supervisor.spawn(inv, files)
    assert proc.via_spare
    await finished(proc)
    assert int(report.read_text()) == proc.pid
    assert proc.exit_code() == 0
    assert procinfo.job_processes(proc.pid) == []
    proc.close()


async def test_setsid_helpers_left_by_an_agent_that_exits_are_killed_before_the_job_ends(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    files = JobFiles(tmp_path / "job")
    argv = (str(SETSID_AGENT), "-p", f"x [[setsid:exit,pidfile={pidfile}]]")
    proc = supervisor.spawn(Invocation(argv=argv, env=dict(os.environ), cwd=str(tmp_path)), files)
    assert proc.via_spare
    await finished(proc)
    sleepers = {int(p): int(t) for p, _, t in (ln.partition(" ") for ln in pidfile.read_text().splitlines()) if t}
    try:
        assert len(sleepers) == 2
        assert proc.exit_code() == 0
        assert [pid for pid, ticks in sleepers.items() if procinfo.is_alive(pid, ticks)] == []
    finally:
        for pid, ticks in sleepers.items():
            if procinfo.is_alive(pid, ticks):
                os.kill(pid, signal.SIGKILL)
        proc.close()


async def test_a_spare_does_not_run_the_job_outside_the_cwd_relay_checked(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)  # as if swapped in after relay resolved and checked the path
    marker = tmp_path / "ran"
    launch = launcher.Launch(
        argv=["/bin/sh", "-c", f"touch {marker}"],
        env={},
        cwd=str(link),
        stdin=None,
        stdout=tmp_path / "out",
        stderr=tmp_path / "err",
    )
    with pytest.raises(launcher.CwdChanged) as caught:
        launcher.start_job(tmp_path, launch)
    assert (caught.value.expected, caught.value.actual) == (str(link), str(real))
    time.sleep(0.2)
    assert not marker.exists()


async def test_an_agent_that_cannot_be_executed_ends_the_job_as_sh_would(tmp_path: Path) -> None:
    files = JobFiles(tmp_path / "job")
    missing = tmp_path / "no-such-agent"
    proc = supervisor.spawn(Invocation(argv=(str(missing), "-p", "hi"), env={}, cwd=str(tmp_path)), files)
    assert proc.via_spare
    await finished(proc)
    assert proc.exit_code() == 127
    assert str(missing) in files.stderr.read_text()
    proc.close()


async def test_a_command_without_a_slash_is_looked_up_on_the_jobs_path(tmp_path: Path) -> None:
    tool = tmp_path / "bin" / "hello-agent"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho hello from $0\n")
    tool.chmod(0o755)
    files = JobFiles(tmp_path / "job")
    env = {"PATH": f"/nonexistent:{tool.parent}"}
    proc = supervisor.spawn(Invocation(argv=("hello-agent",), env=env, cwd=str(tmp_path)), files)
    assert proc.via_spare
    await finished(proc)
    assert (proc.exit_code(), files.stdout.read_text()) == (0, f"hello from {tool}\n")
    proc.close()


async def test_a_spare_killed_while_idle_is_passed_over_and_the_job_still_starts(tmp_path: Path) -> None:
    pool = launcher._zygote.spares  # pyright: ignore[reportPrivateUsage]
    assert pool is not None
    for spare in list(pool._ready):  # pyright: ignore[reportPrivateUsage]
        os.kill(spare.pid, signal.SIGKILL)
    files = JobFiles(tmp_path / "job")
    proc = supervisor.spawn(Invocation(argv=("/bin/sh", "-c", "exit 3"), env={}, cwd=str(tmp_path)), files)
    await finished(proc)
    assert proc.exit_code() == 3
    proc.close()


RELAY_THAT_DIES = """
import json, os, sys, time
sys.path[:0] = {paths!r}
from pathlib import Path
from relay.agents.base import Invocation
from relay.runtime import launcher, supervisor
launcher.warm()
while launcher.spares_ready() < 2:
    time.sleep(0.01)
pool = launcher._zygote.spares
idle = [s.pid for s in pool._ready]
files = supervisor.JobFiles(Path({job!r}))
inv = Invocation(argv=("/bin/sh", "-c", "sleep 0.5; exit 4"), env={{}}, cwd={cwd!r})
proc = supervisor.spawn(inv, files)
print(json.dumps({{"job": proc.pid, "via_spare": proc.via_spare, "idle": [p for p in idle if p != proc.pid]}}), flush=True)
os._exit(0)
"""


def test_when_relay_dies_its_idle_spares_go_and_a_running_job_still_records_its_status(tmp_path: Path) -> None:
    job = tmp_path / "job"
    script = RELAY_THAT_DIES.format(paths=sys.path, job=str(job), cwd=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=BOUND_S, check=True)
    told = json.loads(out.stdout)
    assert told["via_spare"] and told["idle"]
    for pid in told["idle"]:
        assert gone(pid, None), f"idle spare {pid} outlived the relay that owned it"
    assert gone(told["job"], None)
    assert JobFiles(job).read_exit_code() == 4
