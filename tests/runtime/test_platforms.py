"""The runtime seam: one choice at start-up from what the platform offers, and a portable path that runs
CLI jobs (cancel, timeout, re-attach) on a platform without pidfd, /proc or a subreaper, as on macOS."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import psutil
import pytest

from relay.cli.doctor_cmd import runtime_line as _runtime_line
from relay.config import load_settings
from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine, JobRequest
from relay.runtime import _linux, _portable, choice, procinfo, supervisor
from relay.runtime.invocation import Invocation
from relay.runtime.supervisor import JobFiles
from relay.store import Store
from tests.conftest import SettingsFactory

pytestmark = pytest.mark.anyio


def without_pidfd(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as on macOS: os.pidfd_open does not exist (touching it is an AttributeError)."""
    monkeypatch.delattr(os, "pidfd_open", raising=False)


async def wait_for_file(path: Path, timeout: float = 20) -> str:
    with anyio.fail_after(timeout):
        while not path.exists() or not path.read_text().strip():
            await anyio.sleep(0.02)
    return path.read_text()


# choosing ---------------------------------------------------------------------------------


@pytest.mark.linux_runtime
def test_auto_takes_the_linux_runtime_where_pidfd_proc_and_prctl_exist() -> None:
    chosen = choice.choose("auto")
    assert (chosen.name, chosen.runtime.subreaper) == ("linux", True)
    assert "pidfd" in chosen.reason


def test_without_pidfd_open_auto_takes_the_portable_runtime_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    without_pidfd(monkeypatch)
    chosen = choice.choose("auto")
    assert (chosen.name, chosen.runtime.subreaper) == ("portable", False)
    assert "os.pidfd_open is missing" in chosen.reason and "no child subreaper" in chosen.reason


def test_the_runtime_setting_forces_the_portable_runtime(relay_home: Path) -> None:
    settings = load_settings({"RELAY_HOME": str(relay_home), "RELAY_RUNTIME": "Portable"})
    assert settings.runtime == "portable"
    chosen = choice.choose(settings.runtime)
    assert chosen.name == "portable" and chosen.reason.startswith("forced by RELAY_RUNTIME=portable")
    (relay_home / "config.toml").write_text('[jobs]\nruntime = "portable"\n')
    assert load_settings({"RELAY_HOME": str(relay_home)}).runtime == "portable"
    assert load_settings({"RELAY_HOME": str(relay_home), "RELAY_RUNTIME": "auto"}).runtime == "auto"


def test_an_unknown_runtime_is_a_configuration_error_with_a_hint(relay_home: Path) -> None:
    with pytest.raises(RelayError) as caught:
        load_settings({"RELAY_HOME": str(relay_home), "RELAY_RUNTIME": "windows"})
    assert caught.value.code is ErrorCode.CONFIG_INVALID and "portable" in caught.value.hint


def test_forcing_the_linux_runtime_without_pidfd_fails_once_at_start_up(
    monkeypatch: pytest.MonkeyPatch, make_settings: SettingsFactory
) -> None:
    without_pidfd(monkeypatch)
    with pytest.raises(RelayError) as caught:
        Engine(make_settings(RELAY_RUNTIME="linux"))
    assert caught.value.code is ErrorCode.CONFIG_INVALID
    assert "os.pidfd_open is missing" in caught.value.message and "portable" in caught.value.hint


def test_relay_doctor_names_the_runtime_in_use_and_why(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _runtime_line("portable").startswith("runtime: portable (forced by RELAY_RUNTIME=portable; exits seen by")
    without_pidfd(monkeypatch)
    assert _runtime_line("auto").startswith("runtime: portable (os.pidfd_open is missing")
    assert _runtime_line("linux").startswith("runtime: none (RELAY_RUNTIME=linux cannot run here")


async def test_the_runtime_is_chosen_once_at_start_up_and_no_job_reaches_pidfd_open(
    monkeypatch: pytest.MonkeyPatch, make_settings: SettingsFactory, workdir: Path
) -> None:
    without_pidfd(monkeypatch)
    choices: list[str] = []
    original = choice.choose

    def counted(requested: str = "auto") -> choice.Choice:
        choices.append(requested)
        return original(requested)

    monkeypatch.setattr(choice, "choose", counted)
    async with Engine(make_settings(RELAY_RUNTIME="auto")).running() as engine:
        ids = [engine.submit(JobRequest(agent="claude", prompt=f"job {n}", cwd=str(workdir))) for n in range(3)]
        with anyio.fail_after(30):
            records = [await engine.wait_one(job_id, 30) for job_id in ids]
    assert [(r.status, r.exit_code) for r in records] == [("completed", 0)] * 3
    assert choices == ["auto"]  # once, when the engine was built; never per job
    assert choice.active().name == "portable"
    assert all((r.boot_id or "").startswith("btime:") for r in records)  # identity recorded by psutil


# the portable path end to end ---------------------------------------------------------------


async def test_without_pidfd_a_cli_job_runs_is_cancelled_and_is_reattached_after_relay_is_killed(
    monkeypatch: pytest.MonkeyPatch,
    make_settings: SettingsFactory,
    workdir: Path,
    relay_home: Path,
    tmp_path: Path,
    reap_groups: list[int],
) -> None:
    without_pidfd(monkeypatch)
    settings = make_settings(RELAY_RUNTIME="portable", RELAY_KILL_GRACE_S="0.3")

    # Runs and is cancelled: the agent ignores SIGTERM and leaves a grandchild; nothing of either survives.
    pidfile = tmp_path / "pids"
    async with Engine(settings).running() as engine:
        done = engine.submit(JobRequest(agent="claude", prompt="hi", cwd=str(workdir)))
        hung = engine.submit(
            JobRequest(
                agent="claude", prompt=f"x [[fake:hang,ignore_term,grandchild,pidfile={pidfile}]]", cwd=str(workdir)
            )
        )
        pids = [int(p) for p in (await wait_for_file(pidfile)).split()]
        with anyio.fail_after(30):
            finished = await engine.wait_one(done, 30)
            cancelled = await engine.cancel(hung)
    assert (finished.status, finished.exit_code) == ("completed", 0)
    assert cancelled.status == "cancelled" and cancelled.pid is not None
    reap_groups.append(cancelled.pid)
    assert procinfo.group_members(cancelled.pid) == []
    assert not any(procinfo.is_alive(p, None) for p in pids)

    # Re-attached after a restart: a relay as on macOS (no os.pidfd_open, RELAY_RUNTIME=portable) is
    # killed with SIGKILL mid-job; the next relay finds the job's process by its psutil identity.
    survivor = tmp_path / "survivor"
    code = (
        "import os, sys; del os.pidfd_open; from relay.cli.main import main; "
        f"sys.exit(main(['run', 'claude', {f'x [[fake:sleep=2,pidfile={survivor}]]'!r}, '--cwd', {str(workdir)!r}]))"
    )
    env = {**os.environ, "RELAY_HOME": str(relay_home), "RELAY_RUNTIME": "portable"}
    relay = subprocess.Popen(
        [sys.executable, "-c", code], env=env, cwd=str(workdir), stdin=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    store = Store(settings.db_path)
    try:
        await wait_for_file(survivor)
        with anyio.fail_after(20):
            while not (running := store.list_jobs(statuses=("running",))) or running[0].pid is None:
                await anyio.sleep(0.02)
        relay.send_signal(signal.SIGKILL)
        relay.wait(10)
    finally:
        if relay.poll() is None:
            relay.kill()
            relay.wait(10)
    (job,) = running
    assert job.pid is not None and (job.boot_id or "").startswith("btime:")
    reap_groups.append(job.pid)
    assert procinfo.is_alive(job.pid, job.pid_start_ticks, job.boot_id)  # the job outlived its relay
    async with Engine(settings).running() as engine:
        with anyio.fail_after(30):
            rec = await engine.wait_one(job.id, 30)
    assert (rec.status, rec.exit_code) == ("completed", 0)
    assert procinfo.group_members(job.pid) == []


# the portable pieces ------------------------------------------------------------------------


@pytest.mark.linux_runtime
def test_on_linux_psutil_and_proc_agree_on_every_start_time_so_the_runtimes_can_share_a_home() -> None:
    pids = [os.getpid(), os.getppid(), 1]
    assert [_portable.start_ticks(p) for p in pids] == [_linux.start_ticks(p) for p in pids]
    # A group of its own that holds still (the test run's own group gains and loses processes between two looks).
    group = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(_linux.group_members(group.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        members = _linux.group_members(group.pid)
        assert len(members) == 3 and group.pid in members
        assert _portable.group_members(group.pid) == members
    finally:
        os.killpg(group.pid, signal.SIGKILL)
        group.wait(10)
    # Each runtime compares only the boot ids it can read: the other one's are left to the start time.
    assert procinfo.is_alive(os.getpid(), _linux.start_ticks(os.getpid()), _portable.boot_id())
    choice.use("portable")
    assert procinfo.is_alive(os.getpid(), _portable.start_ticks(os.getpid()), _linux.boot_id())


def test_the_portable_identity_is_stable_and_tells_a_reused_pid_or_another_boot_apart() -> None:
    me = os.getpid()
    ticks = _portable.start_ticks(me)
    assert ticks is not None and ticks == _portable.start_ticks(me)
    boot = _portable.boot_id()
    assert _portable.is_alive(me, ticks, boot)
    assert not _portable.is_alive(me, ticks + 1, boot)
    moved = float(boot.removeprefix("btime:"))
    assert _portable.is_alive(me, ticks, f"btime:{moved + 30:.0f}")  # a wall-clock change, same boot
    assert not _portable.is_alive(me, ticks, f"btime:{moved - 3600:.0f}")  # an earlier boot


async def test_a_zombie_is_not_alive_and_its_exit_is_seen_by_the_poll(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    try:
        ticks = _portable.start_ticks(child.pid)
        watch = _portable.PollWatch(child.pid, ticks)
        assert not await watch.wait(0.05)  # bounded: returns while the process still runs
        with anyio.fail_after(20):
            assert await watch.wait(20)
        assert psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE  # not reaped yet: a zombie
        assert not _portable.is_alive(child.pid, ticks)
        assert _portable.PortableRuntime(kqueue=False).watch_exit(child.pid, ticks) is None
    finally:
        child.kill()
        child.wait()


async def test_the_descendants_walk_finds_a_helper_that_left_the_group_while_its_parent_lives(
    tmp_path: Path, workdir: Path, reap_groups: list[int]
) -> None:
    """What covers the missing subreaper at a cancel: psutil's parent links reach a setsid() helper."""
    choice.use("portable")
    report = tmp_path / "helper"
    code = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        f"    open({str(report)!r}, 'w').write(str(os.getpid()))\n"
        "    time.sleep(60)\n"
        "    os._exit(0)\n"
        "time.sleep(60)\n"
    )
    files = JobFiles(tmp_path / "job")
    proc = supervisor.spawn(
        Invocation(argv=(sys.executable, "-c", code), env=dict(os.environ), cwd=str(workdir)), files
    )
    reap_groups.append(proc.pid)
    try:
        helper = int(await wait_for_file(report))
        assert os.getpgid(helper) != proc.pid  # out of the job's group: killpg alone would miss it
        assert helper in procinfo.job_processes(proc.pid)
        with anyio.fail_after(20):
            await proc.kill_group(0.3)
            assert await proc.wait_exit(10)
        with anyio.fail_after(5):
            while procinfo.is_alive(helper, None):
                await anyio.sleep(0.02)
        assert procinfo.group_members(proc.pid) == []
    finally:
        proc.close()
