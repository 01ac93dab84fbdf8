"""Job shims start as child subreapers, through the spawn helper and directly alike."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest

from relay.runtime import launcher, procinfo

pytestmark = pytest.mark.anyio

# Forks a child that forks a grandchild and exits at once; the orphaned grandchild writes its new
# parent's pid, which is the launched process only if that process is a child subreaper.
ORPHAN_REPORTS_ITS_PARENT = """
import os, sys, time
if os.fork() == 0:
    if os.fork() == 0:
        time.sleep(0.3)  # let the middle process exit first
        with open(sys.argv[1], "w") as fh:
            fh.write(str(os.getppid()))
        os._exit(0)
    os._exit(0)
time.sleep(30)
"""
# Bound on the helper answering or a process starting (generous: the test machine is shared).
BOUND_S = 30


def launch_of(tmp_path: Path, report: Path) -> launcher.Launch:
    return launcher.Launch(
        argv=[sys.executable, "-c", ORPHAN_REPORTS_ITS_PARENT, str(report)],
        env={"PATH": os.environ.get("PATH", "")},
        cwd=str(tmp_path),
        stdin=None,
        stdout=tmp_path / "out",
        stderr=tmp_path / "err",
    )


async def new_parent_of_the_orphan(pid: int, report: Path) -> int:
    try:
        with anyio.fail_after(BOUND_S):
            while not report.exists() or not report.read_text():
                await anyio.sleep(0.02)
        return int(report.read_text())
    finally:
        os.killpg(pid, 9)


async def test_a_directly_spawned_shim_adopts_what_its_children_orphan(tmp_path: Path) -> None:
    report = tmp_path / "ppid"
    popen = launcher.spawn_direct(launch_of(tmp_path, report))
    assert os.getsid(popen.pid) == popen.pid
    assert await new_parent_of_the_orphan(popen.pid, report) == popen.pid
    popen.wait(BOUND_S)


async def test_a_shim_from_the_spawn_helper_adopts_what_its_children_orphan(tmp_path: Path) -> None:
    with anyio.fail_after(BOUND_S):
        while True:  # the first spawns go direct while the helper starts
            report = tmp_path / "ppid"
            report.unlink(missing_ok=True)
            pid, popen = launcher.spawn(launch_of(tmp_path, report))
            if popen is None:
                break
            os.killpg(pid, 9)
            popen.wait(BOUND_S)
            await anyio.sleep(0.05)
    assert procinfo.is_alive(pid, None) and os.getsid(pid) == pid
    assert await new_parent_of_the_orphan(pid, report) == pid


async def test_the_spawn_helper_reports_a_missing_cwd_as_the_oserror_a_direct_spawn_raises(tmp_path: Path) -> None:
    def launch(cwd: Path) -> launcher.Launch:
        return launcher.Launch(
            argv=["/bin/true"], env={}, cwd=str(cwd), stdin=None, stdout=tmp_path / "o", stderr=tmp_path / "e"
        )

    missing = launch(tmp_path / "gone")
    with pytest.raises(FileNotFoundError):
        launcher.spawn_direct(missing)
    with anyio.fail_after(BOUND_S):
        while launcher.spawn(launch(tmp_path))[1] is not None:  # until the helper answers
            await anyio.sleep(0.05)
    with pytest.raises(FileNotFoundError):
        launcher.spawn(missing)
    assert launcher.spawn(launch(tmp_path))[1] is None  # and the helper still serves


async def test_a_spawn_helper_that_died_is_replaced_and_no_spawn_fails_meanwhile(tmp_path: Path) -> None:
    def launch() -> launcher.Launch:
        return launcher.Launch(
            argv=["/bin/true"], env={}, cwd=str(tmp_path), stdin=None, stdout=tmp_path / "o", stderr=tmp_path / "e"
        )

    with anyio.fail_after(BOUND_S):
        while launcher.spawn(launch())[1] is not None:  # until the helper answers
            await anyio.sleep(0.05)
    helper = launcher._zygote._proc  # pyright: ignore[reportPrivateUsage]
    assert helper is not None
    helper.kill()
    helper.wait(BOUND_S)
    with anyio.fail_after(BOUND_S):
        while launcher.spawn(launch())[1] is not None:  # direct spawns until a new helper answers
            await anyio.sleep(0.05)
    assert launcher._zygote._proc is not helper  # pyright: ignore[reportPrivateUsage]


async def until_the_helper_answers(launch: launcher.Launch) -> None:
    with anyio.fail_after(BOUND_S):
        while True:  # the first spawns go direct while the helper starts
            pid, popen = launcher.spawn(launch)
            with contextlib.suppress(ProcessLookupError):  # a short program may be gone already
                os.killpg(pid, 9)
            if popen is None:
                return
            popen.wait(BOUND_S)
            await anyio.sleep(0.05)


async def test_the_spawn_helper_answers_only_once_its_child_has_execd_as_the_leader_of_its_own_group(
    tmp_path: Path,
) -> None:
    argv = ["/bin/sleep", "30"]
    launch = launcher.Launch(
        argv=argv, env={}, cwd=str(tmp_path), stdin=None, stdout=tmp_path / "o", stderr=tmp_path / "e"
    )
    await until_the_helper_answers(launch)
    seen: list[tuple[bool, bytes]] = []
    for _ in range(20):
        pid, popen = launcher.spawn(launch)
        assert popen is None
        # Read at once, as relay may signal the group at once: the child must already be the new program.
        seen.append((os.getsid(pid) == pid and os.getpgid(pid) == pid, Path(f"/proc/{pid}/cmdline").read_bytes()))
        os.killpg(pid, 9)  # ESRCH here would mean the group did not exist yet
    assert seen == [(True, b"\0".join(a.encode() for a in argv) + b"\0")] * 20


async def test_the_spawn_helper_reports_a_failed_exec_as_the_oserror_a_direct_spawn_raises(tmp_path: Path) -> None:
    def launch(program: str) -> launcher.Launch:
        return launcher.Launch(
            argv=[program], env={}, cwd=str(tmp_path), stdin=None, stdout=tmp_path / "o", stderr=tmp_path / "e"
        )

    missing = launch(str(tmp_path / "no-such-program"))
    with pytest.raises(FileNotFoundError):
        launcher.spawn_direct(missing)
    await until_the_helper_answers(launch("/bin/true"))
    with pytest.raises(FileNotFoundError):
        launcher.spawn(missing)
    assert launcher.spawn(launch("/bin/true"))[1] is None  # and the helper still serves


def test_the_helper_replies_with_the_pid_at_eof_with_the_errno_a_child_wrote_and_kills_a_child_that_never_execs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from relay.runtime import _zygote

    monkeypatch.setattr(_zygote, "CHILD_START_S", 0.3)
    with subprocess.Popen(["/bin/sleep", "30"]) as child:
        assert _zygote.Starting(1, child.pid, -1).feed(b"") == {"pid": child.pid}  # EOF: it exec'd
        failed = _zygote.Starting(2, child.pid, -1)
        assert failed.feed(b"2:[Errno 2] No such file") is None
        assert failed.feed(b" or directory: '/x'") is None
        assert failed.feed(b"") == {"errno": 2, "error": "[Errno 2] No such file or directory: '/x'"}
        stuck = _zygote.Starting(3, child.pid, -1)
        assert stuck.deadline <= time.monotonic() + 0.3
        assert child.poll() is None
        assert stuck.expire() == {"errno": errno.ETIMEDOUT, "error": "the job's process did not start within 0.3 s"}
        assert child.wait(BOUND_S) == -9  # killed: it would never have been recorded as a job


async def test_spawns_in_flight_together_each_get_the_pid_of_their_own_program(tmp_path: Path) -> None:
    def launch(n: int) -> launcher.Launch:
        return launcher.Launch(
            argv=["/bin/sleep", f"30.{n}"],
            env={},
            cwd=str(tmp_path),
            stdin=None,
            stdout=tmp_path / "o",
            stderr=tmp_path / "e",
        )

    await until_the_helper_answers(launch(0))
    results: dict[int, tuple[int, subprocess.Popen[bytes] | None]] = {}

    def spawn(n: int) -> None:
        results[n] = launcher.spawn(launch(n))

    threads = [threading.Thread(target=spawn, args=(n,)) for n in range(1, 13)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(BOUND_S)
    try:
        assert sorted(results) == list(range(1, 13))
        assert all(popen is None for _, popen in results.values())  # all through the helper
        for n, (pid, _) in results.items():
            assert Path(f"/proc/{pid}/cmdline").read_bytes() == f"/bin/sleep\x0030.{n}\x00".encode()
            assert os.getsid(pid) == pid
    finally:
        for pid, _ in results.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, 9)
