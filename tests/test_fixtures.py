"""The shared fixtures' own promises: a job a test leaves running is killed when the test ends."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from relay.runtime import procinfo
from tests.conftest import FAKE_CLAUDE, kill_jobs_under

RELAY = str(Path(sys.executable).with_name("relay"))


def test_a_job_left_running_after_its_relay_died_is_killed_by_the_home_cleanup(
    relay_home: Path, workdir: Path, tmp_path: Path
) -> None:
    (relay_home / "config.toml").write_text(f'[agents.claude]\ncommand = "{FAKE_CLAUDE}"\n')
    pidfile = tmp_path / "pids"
    run = subprocess.Popen(
        [RELAY, "run", "claude", f"x [[fake:hang,pidfile={pidfile}]]"],
        env={**os.environ, "RELAY_HOME": str(relay_home)},
        cwd=str(workdir),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not (pidfile.exists() and pidfile.read_text().strip()):
        assert time.monotonic() < deadline, "the fake never started"
        time.sleep(0.05)
    pid = int(pidfile.read_text().split()[0])
    run.kill()  # relay dies; the job lives on, as jobs do
    run.wait(30)
    assert procinfo.is_alive(pid, None)
    assert kill_jobs_under(tmp_path / "another-home") == []
    assert len(kill_jobs_under(relay_home)) == 1
    deadline = time.monotonic() + 10
    while procinfo.is_alive(pid, None):
        assert time.monotonic() < deadline, "the job's agent outlived the cleanup"
        time.sleep(0.05)
