"""Self-fencing (relay.jobs.fence): a worker past the lease it last renewed kills its own jobs' process groups,
through its keeper process even while the worker itself is stopped; a restarted worker stops what its earlier
life left running. Real processes, real signals."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine
from relay.jobs.fence import FENCE_DIR, RETRY_S, Fence, Heart, sweep
from relay.runtime import fencing
from tests.conftest import SettingsFactory

# Every wait below is bounded by this.
BOUND_S = 10.0


def job_group(folder: Path) -> subprocess.Popen[bytes]:
    """A job's stand-in: a shell leading its own process group, its pid in the folder's `pid` file, with a child."""
    folder.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], start_new_session=True)
    (folder / "pid").write_text(f"{proc.pid}\n")
    return proc


def gone(proc: subprocess.Popen[bytes], within: float = BOUND_S) -> bool:
    try:
        proc.wait(within)
    except subprocess.TimeoutExpired:
        return False
    return True


def group_empty(pgid: int, within: float = BOUND_S) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def groups() -> Iterator[list[subprocess.Popen[bytes]]]:
    made: list[subprocess.Popen[bytes]] = []
    yield made
    for proc in made:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(BOUND_S)


def test_a_fence_renewed_holds_for_the_lease_less_its_margin_and_passes_after_it(tmp_path: Path) -> None:
    fence = Fence(1.0, tmp_path, timed=True)
    sent = time.monotonic()
    fence.renewed(sent)
    assert not fence.passed()
    assert fence.deadline == pytest.approx(sent + fence.window) and fence.window < 1.0
    fence.deadline = time.monotonic() - 0.001  # as if the window went by with no renewal
    assert fence.passed()
    untimed = Fence(1.0, tmp_path, timed=False)
    untimed.deadline = time.monotonic() - 1
    assert not untimed.passed() and untimed.path is None


def test_the_fence_file_written_from_several_threads_at_once_always_ends_with_the_fences_last_state(
    tmp_path: Path,
) -> None:
    # The heart renews (a thread) while the loop guards and releases jobs: the file the keeper reads must never end
    # older than the fence, or a job claimed meanwhile is one the keeper does not know to kill.
    fence = Fence(30.0, tmp_path, timed=True)
    assert fence.path is not None
    stop = threading.Event()

    def renewing() -> None:
        while not stop.is_set():
            fence.renewed(time.monotonic())

    for turn in range(5):
        heart = threading.Thread(target=renewing)
        heart.start()
        for n in range(40):
            fence.guard(f"{turn}-{n}", tmp_path / "jobs" / f"{turn}-{n}")
            if n % 3 == 0:
                fence.release(f"{turn}-{n}")
        stop.set()
        heart.join(BOUND_S)
        stop.clear()
        found = fencing.read_fence(fence.path)
        assert found is not None, "the fence file does not parse"
        assert sorted(found[1]) == sorted(str(f) for f in fence.guarded().values())
        assert found[0] == fence.deadline


def test_a_worker_past_its_fence_kills_every_guarded_jobs_group_and_marks_it_fenced(
    tmp_path: Path, groups: list[subprocess.Popen[bytes]]
) -> None:
    fence = Fence(5.0, tmp_path, timed=True)
    folders = [tmp_path / "jobs" / name for name in ("a", "b")]
    groups += [job_group(f) for f in folders]
    for name, folder in zip(("a", "b"), folders, strict=True):
        fence.guard(name, folder)
    assert fence.enforce() == []  # within its lease: nothing is touched
    fence.deadline = time.monotonic() - 0.001
    assert sorted(fence.enforce()) == ["a", "b"]
    assert all(gone(p) and group_empty(p.pid) for p in groups)  # the shells and their children
    assert all((f / fencing.FENCED_MARK).exists() for f in folders)
    assert fence.cut("a", folders[0])


def test_the_keeper_kills_the_jobs_of_a_stopped_worker_at_its_deadline(
    tmp_path: Path, groups: list[subprocess.Popen[bytes]]
) -> None:
    # The "worker" is a sleeping process that is then stopped: only its keeper can act.
    worker = subprocess.Popen(["sleep", "60"])
    job = tmp_path / "jobs" / "j"
    groups.append(job_group(job))
    fence_file = tmp_path / "fence.json"
    deadline = time.monotonic() + 0.5
    fencing.write_fence(fence_file, deadline, [job])
    script = fencing._fence_keeper.__file__  # pyright: ignore[reportPrivateUsage]
    keeper = subprocess.Popen([sys.executable, "-I", "-S", script, str(fence_file), str(worker.pid)])
    try:
        os.kill(worker.pid, signal.SIGSTOP)
        assert gone(groups[0])
        killed_at = time.monotonic()
        assert killed_at >= deadline and killed_at - deadline < 1.0, killed_at - deadline
        assert (job / fencing.FENCED_MARK).exists()
        assert keeper.poll() is None  # the worker is only stopped: its keeper stays
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(BOUND_S)
        assert gone(keeper)  # its worker gone, the keeper ends
    finally:
        for proc in (worker, keeper):
            if proc.poll() is None:
                proc.kill()
                proc.wait(BOUND_S)


def test_a_restarted_worker_stops_the_jobs_its_earlier_life_left_running_but_not_the_ones_it_adopted(
    tmp_path: Path, groups: list[subprocess.Popen[bytes]]
) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait(BOUND_S)
    left, adopted, ended = (tmp_path / "jobs" / n for n in ("left", "adopted", "ended"))
    groups += [job_group(left), job_group(adopted)]
    ended.mkdir(parents=True)
    (ended / "exit").write_text("0\n")
    (tmp_path / FENCE_DIR).mkdir()
    stale = tmp_path / FENCE_DIR / f"{dead.pid}-0000.json"
    fencing.write_fence(stale, time.monotonic() + 60, [left, adopted, ended])
    alive_file = tmp_path / FENCE_DIR / f"{os.getpid()}-1111.json"  # a live worker of this home: not touched
    fencing.write_fence(alive_file, time.monotonic() - 60, [adopted])
    killed = sweep(tmp_path, None, lambda folder: folder == adopted)
    assert killed == [left]
    assert gone(groups[0]) and groups[1].poll() is None
    assert not stale.exists() and alive_file.exists()


def test_the_heart_tries_again_within_half_a_second_of_a_failed_renewal_and_renews_the_fence(tmp_path: Path) -> None:
    fence = Fence(60.0, tmp_path, timed=True)
    calls: list[float] = []

    def renew() -> bool:
        calls.append(time.monotonic())
        if len(calls) < 3:
            raise RelayError(ErrorCode.STORE_UNAVAILABLE, "the store is away", "wait")
        return True

    before = fence.deadline
    heart = Heart(fence, renew, beat_s=30.0)
    heart.start()
    try:
        deadline = time.monotonic() + BOUND_S
        while heart.beats < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        heart.stop()
    assert heart.beats == 1 and len(calls) == 3
    assert all(b - a < RETRY_S + 0.3 for a, b in itertools.pairwise(calls))
    assert fence.deadline == pytest.approx(calls[-1] + fence.window, abs=0.1) and fence.deadline > before
    assert fence.steady(0.0)


@pytest.mark.anyio
async def test_a_worker_on_a_shared_store_has_its_keeper_running_before_it_can_claim_a_job(
    make_settings: SettingsFactory, pg_url: str
) -> None:
    def keepers() -> list[psutil.Process]:
        return [p for p in psutil.Process().children() if "_fence_keeper.py" in " ".join(p.cmdline())]

    settings = make_settings(RELAY_STORE=pg_url)
    async with Engine(settings).running():
        # Nothing awaited yet: the tending loop has not run, a job queued before could be claimed at the next turn.
        assert len(keepers()) == 1
    assert not [p for p in keepers() if p.status() != psutil.STATUS_ZOMBIE]


def test_the_fence_file_is_written_over_in_place_and_a_read_caught_mid_write_is_no_read(tmp_path: Path) -> None:
    # A job's start and end each write the fence file: over the file in one write within its first page, padded to
    # its length (a new file per write cost more than the write; a killed writer leaves it whole), so the keeper
    # checks what it reads: a write it catches half done reads as nothing, and the next look reads it.
    path = tmp_path / "fence.json"
    jobs = [tmp_path / "jobs" / name for name in ("a", "b", "c")]
    fencing.write_fence(path, 100.0, jobs)
    inode, size = path.stat().st_ino, path.stat().st_size
    fencing.write_fence(path, 200.0, jobs[:1])
    assert (path.stat().st_ino, path.stat().st_size) == (inode, size)  # in place, padded to what it held
    assert fencing.read_fence(path) == (200.0, [str(jobs[0])])
    whole, other = path.read_bytes(), fencing.fence_bytes(300.0, [], len(path.read_bytes()))
    torn = [
        other[:40] + whole[40:],  # a read caught while the new content was being copied over the old
        whole[:-3],  # cut short
        b"garbage",
    ]
    for content in torn:
        path.write_bytes(content)
        assert fencing.read_fence(path) is None, content
    path.write_bytes(other)
    assert fencing.read_fence(path) == (300.0, [])
    many = [tmp_path / "jobs" / f"job-{n:04d}-{'x' * 40}" for n in range(100)]  # past a page: replaced whole
    fencing.write_fence(path, 400.0, many)
    assert path.stat().st_ino != inode and fencing.read_fence(path) == (400.0, [str(j) for j in many])
    fencing.write_fence(path, 500.0, jobs)  # shorter again: back under a page, in place from then on
    inode = path.stat().st_ino
    fencing.write_fence(path, 600.0, jobs[:2])
    assert path.stat().st_ino == inode and fencing.read_fence(path) == (600.0, [str(j) for j in jobs[:2]])
