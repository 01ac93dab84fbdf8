"""Process supervision with real processes: output to files, exit status on disk, whole-group kills."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import anyio
import pytest

from relay.agents.base import Invocation
from relay.runtime import procinfo, supervisor
from relay.runtime.supervisor import JobFiles

pytestmark = pytest.mark.anyio

PY = sys.executable


def run_py(code: str, cwd: Path) -> Invocation:
    return Invocation(argv=(PY, "-c", code), env={"PATH": os.environ["PATH"]}, cwd=str(cwd))


async def test_a_job_writes_stdout_stderr_and_its_exit_status_to_files(tmp_path: Path) -> None:
    files = JobFiles(tmp_path / "job")
    code = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(7)"
    proc = supervisor.spawn(run_py(code, tmp_path), files)
    with anyio.fail_after(10):
        while not await proc.wait_exit(1):
            pass
    assert proc.exit_code() == 7
    assert files.read_exit_code() == 7  # on disk by the time relay sees the end
    assert files.stdout.read_text() == "out\n"
    assert files.stderr.read_text() == "err\n"
    proc.close()


async def test_the_child_never_sees_relays_stdin(tmp_path: Path) -> None:
    files = JobFiles(tmp_path / "job")
    proc = supervisor.spawn(run_py("import sys; print(repr(sys.stdin.read()))", tmp_path), files)
    with anyio.fail_after(10):
        while not await proc.wait_exit(1):
            pass
    assert files.stdout.read_text() == "''\n"
    proc.close()


async def test_a_prompt_for_stdin_is_fed_from_a_file(tmp_path: Path) -> None:
    files = JobFiles(tmp_path / "job")
    inv = Invocation(
        argv=(PY, "-c", "import sys; print(sys.stdin.read()[::-1])"),
        env={},
        cwd=str(tmp_path),
        stdin_text="abc",
    )
    proc = supervisor.spawn(inv, files)
    with anyio.fail_after(10):
        while not await proc.wait_exit(1):
            pass
    assert files.stdout.read_text() == "cba\n"
    proc.close()


async def test_killing_the_group_ends_a_child_that_ignores_sigterm_and_its_grandchild(
    tmp_path: Path, reap_groups: list[int]
) -> None:
    files = JobFiles(tmp_path / "job")
    code = (
        "import os, signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "if os.fork() == 0:\n"
        "    time.sleep(3600)\n"
        "print('ready', flush=True)\n"
        "time.sleep(3600)\n"
    )
    proc = supervisor.spawn(run_py(code, tmp_path), files)
    reap_groups.append(proc.pid)
    with anyio.fail_after(10):
        while b"ready" not in files.stdout.read_bytes():
            await proc.wait_exit(0.05)
    assert len(procinfo.group_members(proc.pid)) >= 3  # shim, child, grandchild
    started = time.monotonic()
    with anyio.fail_after(15):
        await proc.kill_group(grace=0.5)
    assert time.monotonic() - started >= 0.5
    assert procinfo.group_members(proc.pid) == []
    proc.close()


async def test_a_grandchild_left_after_the_agent_exits_is_killed_before_the_shim_exits(
    tmp_path: Path, reap_groups: list[int]
) -> None:
    files = JobFiles(tmp_path / "job")
    code = "import os, time\nif os.fork() == 0:\n    time.sleep(3600)\nprint('bye')\n"
    proc = supervisor.spawn(run_py(code, tmp_path), files)
    reap_groups.append(proc.pid)
    with anyio.fail_after(10):
        while not await proc.wait_exit(1):
            pass
    assert procinfo.group_members(proc.pid) == []
    assert proc.exit_code() == 0
    proc.close()


async def test_an_attached_process_is_seen_to_exit_and_its_status_read_from_disk(tmp_path: Path) -> None:
    files = JobFiles(tmp_path / "job")
    proc = supervisor.spawn(run_py("import time; time.sleep(0.3); raise SystemExit(4)", tmp_path), files)
    attached = supervisor.attach(proc.pid, proc.start_ticks, files)
    with anyio.fail_after(10):
        while not await attached.wait_exit(1):
            pass
    assert attached.exit_code() == 4
    attached.close()
    proc.close()


def test_a_pid_with_another_start_time_is_not_ours() -> None:
    me = os.getpid()
    ticks = procinfo.start_ticks(me)
    assert ticks is not None
    assert procinfo.is_alive(me, ticks)
    assert not procinfo.is_alive(me, ticks + 1)
    assert not procinfo.is_alive(me, ticks, expected_boot="another-boot")
