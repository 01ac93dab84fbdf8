"""A job starts only in the directory relay checked.

relay resolves a job's cwd and checks it against the allowed roots just before the spawn; a symlink
swapped into the path after that check is caught where the path is used: the process about to exec
the job changes into the path, finds itself in another directory and does not exec. The job fails
with CWD_NOT_ALLOWED and its agent never runs. Real processes, on both runtimes (this file is run
again with RELAY_RUNTIME=portable) and through every spawn path (the helper, a direct spawn with and
without a subreaper).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from relay.config import load_settings
from relay.errors import ErrorCode, RelayError
from relay.jobs import lifecycle
from relay.jobs.engine import Engine, JobRequest
from relay.runtime import launcher, supervisor
from relay.runtime.invocation import Invocation
from relay.runtime.supervisor import JobFiles
from tests.conftest import PORTABLE_PASS

pytestmark = pytest.mark.anyio

BOUND_S = 30
# A complete Claude stream (what the agent prints when it runs).
STREAM = (
    '{"type":"system","subtype":"init","session_id":"c3d00000-0000-4000-8000-000000000001","model":"m"}',
    '{"type":"result","subtype":"success","is_error":false,"result":"done","num_turns":1,'
    '"session_id":"c3d00000-0000-4000-8000-000000000001","total_cost_usd":0.0001,"usage":{"input_tokens":1,"output_tokens":1}}',
)
# What a job's process writes where it runs: a file named `ran` in its working directory, and that
# directory's real path appended to the log given as $1 (relative "ran": only where the process is).
MARKS = ': > ran; pwd -P >> "$1"'  # the mark first: once the log names a cwd, its mark is there


def swap_for_a_symlink(path: Path, target: Path) -> None:
    """What another process could do to a job's cwd: replace the directory by a symlink out of the roots."""
    path.rename(path.with_name(path.name + ".was"))
    path.symlink_to(target, target_is_directory=True)


def marking_agent(path: Path, log: Path) -> Path:
    """A /bin/sh agent that marks where it runs (MARKS), then prints a complete Claude stream."""
    lines = " ".join(f"'{line}'" for line in STREAM)
    path.write_text(f"#!/bin/sh\nset -- {log}\n{MARKS}\nprintf '%s\\n' {lines}\n")
    path.chmod(0o755)
    return path


def logged(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


async def test_a_cwd_swapped_for_a_symlink_after_relays_check_fails_the_job_and_the_agent_never_runs(
    relay_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    project, other = root / "project", root / "other"
    project.mkdir(parents=True)
    other.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    log = tmp_path / "cwds.log"
    agent = marking_agent(tmp_path / "agent", log)
    (relay_home / "config.toml").write_text(
        f'[agents.claude]\ncommand = "{agent}"\n[security]\nallowed_roots = ["{root}"]\n'
    )
    env = {"RELAY_HOME": str(relay_home), "PATH": os.environ.get("PATH", ""), "HOME": str(relay_home)}
    if PORTABLE_PASS:
        env["RELAY_RUNTIME"] = "portable"
    settings = load_settings(env, cwd=root)

    # The seam: the point-of-use check passes, then the directory is swapped before the spawn.
    checked = lifecycle.check_cwd_unchanged
    swapped: list[str] = []

    def check_then_swap(settings_: object, cwd: str) -> None:
        checked(settings_, cwd)  # pyright: ignore[reportArgumentType]
        if cwd == str(project):
            swap_for_a_symlink(project, outside)
            swapped.append(cwd)

    monkeypatch.setattr(lifecycle, "check_cwd_unchanged", check_then_swap)
    async with Engine(settings).running() as engine:
        with anyio.fail_after(BOUND_S):
            normal = await engine.wait_one(engine.submit(JobRequest(agent="claude", prompt="a", cwd=str(other))), 30)
            attacked = await engine.wait_one(
                engine.submit(JobRequest(agent="claude", prompt="b", cwd=str(project))), 30
            )
            after = await engine.wait_one(engine.submit(JobRequest(agent="claude", prompt="c", cwd=str(other))), 30)

    assert swapped == [str(project)]  # the swap came after the check had passed
    assert attacked.status == "failed", attacked
    assert attacked.error is not None and attacked.error["code"] == "CWD_NOT_ALLOWED", attacked.error
    assert str(project) in attacked.error["message"] and str(outside) in attacked.error["message"]
    assert attacked.error["hint"]
    assert not (outside / "ran").exists()  # the agent never ran in the swapped directory
    assert logged(log) == [str(other), str(other)]  # nor anywhere else: only the two other jobs ran
    assert normal.status == "completed" and after.status == "completed"
    assert (other / "ran").exists()


async def test_a_spawn_into_a_path_that_now_leads_elsewhere_is_refused_with_both_paths(tmp_path: Path) -> None:
    real, outside = tmp_path / "real", tmp_path / "outside"
    real.mkdir()
    outside.mkdir()
    log = tmp_path / "cwds.log"

    def invocation(cwd: Path) -> Invocation:
        return Invocation(argv=("/bin/sh", "-c", MARKS, "marks", str(log)), env={}, cwd=str(cwd))

    for n in range(3):  # several: on Linux the first spawns go direct while the helper starts
        job = real / f"job{n}"
        job.mkdir()
        proc = supervisor.spawn(invocation(job), JobFiles(tmp_path / f"ok{n}"))
        with anyio.fail_after(BOUND_S):
            while not await proc.wait_exit(1):
                pass
        assert proc.exit_code() == 0
        proc.close()
        swap_for_a_symlink(job, outside)  # checked as a real directory; now the path leads out
        with pytest.raises(RelayError) as refused:
            supervisor.spawn(invocation(job), JobFiles(tmp_path / f"swapped{n}"))
        assert refused.value.code is ErrorCode.CWD_NOT_ALLOWED
        assert str(job) in refused.value.message and repr(str(outside)) in refused.value.message
    assert not (outside / "ran").exists()
    assert logged(log) == [str(real / f"job{n}") for n in range(3)]


def launch_in(cwd: Path, tmp_path: Path, log: Path) -> launcher.Launch:
    return launcher.Launch(
        argv=["/bin/sh", "-c", MARKS, "marks", str(log)],
        env={},
        cwd=str(cwd),
        stdin=None,
        stdout=tmp_path / "out",
        stderr=tmp_path / "err",
    )


@pytest.mark.parametrize(
    ("subreaper", "fd_links"),
    [(True, True), (False, True), (False, False)],
    # The Linux runtime's direct spawn (preexec_fn); the portable one on Linux (the directory held
    # open, entered through /proc/self/fd) and where there is no /proc (macOS, the BSDs: preexec_fn).
    ids=["subreaper", "portable", "portable-without-proc"],
)
async def test_a_direct_spawn_does_not_exec_in_a_swapped_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, subreaper: bool, fd_links: bool
) -> None:
    if not fd_links:
        monkeypatch.setattr(launcher, "_HAS_FD_LINKS", False)
    checked, outside, log = tmp_path / "checked", tmp_path / "outside", tmp_path / "cwds.log"
    checked.mkdir()
    outside.mkdir()
    popen = launcher.spawn_direct(launch_in(checked, tmp_path, log), subreaper=subreaper)
    assert popen.wait(BOUND_S) == 0 and (checked / "ran").exists()  # the normal path
    swap_for_a_symlink(checked, outside)
    with pytest.raises(launcher.CwdChanged) as refused:
        launcher.spawn_direct(launch_in(checked, tmp_path, log), subreaper=subreaper)
    assert (refused.value.expected, refused.value.actual) == (str(checked), str(outside))
    assert not (outside / "ran").exists()
    assert logged(log) == [str(checked)]


async def test_a_direct_spawn_still_reports_other_preexec_failures_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> None:
        raise RuntimeError("not the cwd")

    monkeypatch.setattr(launcher, "_prctl_subreaper", broken)
    with pytest.raises(subprocess.SubprocessError) as failed:
        launcher.spawn_direct(launch_in(tmp_path, tmp_path, tmp_path / "log"))
    assert not isinstance(failed.value, launcher.CwdChanged)


@pytest.mark.linux_runtime
async def test_the_spawn_helpers_child_does_not_exec_in_a_swapped_cwd_and_the_helper_still_serves(
    tmp_path: Path,
) -> None:
    warm, checked, outside = tmp_path / "warm", tmp_path / "checked", tmp_path / "outside"
    for path in (warm, checked, outside):
        path.mkdir()
    log = tmp_path / "cwds.log"
    with anyio.fail_after(BOUND_S):
        while True:  # the first spawns go direct while the helper starts
            _, popen = launcher.spawn(launch_in(warm, tmp_path, tmp_path / "warm.log"))
            if popen is None:
                break
            popen.wait(BOUND_S)
            await anyio.sleep(0.05)
    helper = launcher._zygote._proc  # pyright: ignore[reportPrivateUsage]
    swap_for_a_symlink(checked, outside)
    with pytest.raises(launcher.CwdChanged) as refused:
        launcher.spawn(launch_in(checked, tmp_path, log))
    assert (refused.value.expected, refused.value.actual) == (str(checked), str(outside))
    assert launcher._zygote._proc is helper  # pyright: ignore[reportPrivateUsage]
    outside.rename(tmp_path / "moved")  # the symlink dangles now: the path leads nowhere
    with pytest.raises(FileNotFoundError):
        launcher.spawn(launch_in(checked, tmp_path, log))
    checked.unlink()
    checked.mkdir()
    _, popen = launcher.spawn(launch_in(checked, tmp_path, log))
    assert popen is None  # the helper still serves, and the normal path works
    with anyio.fail_after(BOUND_S):
        while not logged(log):
            await anyio.sleep(0.02)
    assert logged(log) == [str(checked)] and (checked / "ran").exists()
    assert not (tmp_path / "moved" / "ran").exists()


def test_on_macos_the_cwd_check_ignores_case_and_unicode_normalization(monkeypatch: pytest.MonkeyPatch) -> None:
    from relay.runtime.launcher import same_place

    typed, stored = "/Users/me/Work/Proj\u00e9t", "/Users/me/work/Proje\u0301t"  # NFC vs NFD, W vs w
    assert not same_place(typed, stored)  # exact where names are exact (Linux)
    assert same_place(typed, typed)
    monkeypatch.setattr(sys, "platform", "darwin")
    assert same_place(typed, stored)
    assert not same_place(typed, "/Users/me/elsewhere")
    assert not same_place(typed, "")  # the directory was removed
