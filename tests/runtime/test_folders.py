"""Spare job folders: made ahead with the job's files empty, taken with one rename, never by two takers."""

from __future__ import annotations

import os
import time
from pathlib import Path

from relay.runtime.folders import FILES, MARKER, PENDING_MARKER, SparePool, mark_spawning
from relay.runtime.supervisor import JobFiles


def spares_in(jobs: Path) -> list[Path]:
    return sorted(p for p in jobs.iterdir() if p.name.startswith(".spare-"))


def test_a_pool_makes_whole_spares_and_a_job_takes_one_with_its_files_empty(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    pool = SparePool(jobs, size=3)
    assert not pool.take(jobs / "early")  # nothing made yet: the job makes its own folder
    assert pool.wants_fill()
    pool.fill()
    assert not pool.wants_fill()
    made = spares_in(jobs)
    assert len(made) == 3 and not any(p.name.startswith(".spare-tmp-") for p in made)
    assert all(sorted(f.name for f in p.iterdir()) == sorted(FILES) for p in made)
    dest = jobs / "0123456789abcdef"
    assert pool.take(dest)
    assert len(spares_in(jobs)) == 2
    files = JobFiles(dest)
    # Empty files read as not written yet: no pid, no exit status, no output.
    assert files.read_pid() is None and files.read_exit_code() is None and files.stderr_tail() == ""
    mark_spawning(dest)
    assert (dest / MARKER).exists() and not (dest / PENDING_MARKER).exists()


def test_a_folder_made_without_a_spare_still_gets_its_marker(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    mark_spawning(job)
    assert (job / MARKER).exists()


def test_spares_left_by_another_relay_are_adopted_and_taken_once(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    first = SparePool(jobs, size=2)
    first.fill()
    (jobs / ".spare-tmp-halfmade").mkdir()  # a spare still being made (or cut short) is never taken
    abandoned = jobs / ".spare-tmp-abandoned"
    abandoned.mkdir()
    (abandoned / "stdout").touch()
    os.utime(abandoned, (time.time() - 3600, time.time() - 3600))  # cut short by a relay killed long ago
    second = SparePool(jobs, size=2)
    second.fill()  # adopts the two whole ones: nothing new to make
    assert len(spares_in(jobs)) == 3 and not abandoned.exists()
    taken = [pool.take(jobs / f"job{i}{name}") for i in range(2) for name, pool in (("a", first), ("b", second))]
    # Both pools know the same two spares: each one is taken once, the other taker falls back.
    assert taken.count(True) == 2
    assert sorted(p.name for p in spares_in(jobs)) == [".spare-tmp-halfmade"]
