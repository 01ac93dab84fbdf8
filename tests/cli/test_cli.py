"""The `relay` command line, run as a real process against the fake claude."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from relay.audit import IAC_FILE, AuditLog
from relay.store import Store
from tests.conftest import SettingsFactory

RELAY = str(Path(sys.executable).with_name("relay"))


def relay(*args: str, home: Path, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RELAY_HOME": str(home)}
    return subprocess.run(
        [RELAY, *args],
        env=env,
        cwd=str(cwd),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def configured(make_settings: SettingsFactory) -> None:
    make_settings()


@pytest.mark.usefixtures("configured")
def test_run_prints_the_answer_and_jobs_lists_it(relay_home: Path, workdir: Path) -> None:
    out = relay("run", "claude", "say hi", home=relay_home, cwd=workdir)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "hi from mock\n"
    jobs = relay("jobs", home=relay_home, cwd=workdir)
    header, row = jobs.stdout.splitlines()
    assert header.split() == ["JOB", "AGENT", "VIA", "STATUS", "MODEL", "CREATED", "BRANCH", "PROMPT"]
    assert row.split()[1:4] == ["claude", "cli/run", "completed"] and row.endswith("say hi")


@pytest.mark.usefixtures("configured")
def test_jobs_filters_on_where_a_job_came_from_and_ask_records_cli_ask(relay_home: Path, workdir: Path) -> None:
    from tests.api.mock_servers import MockServer, Reply

    assert relay("run", "claude", "say hi", home=relay_home, cwd=workdir).returncode == 0
    with MockServer("anthropic") as mock:
        mock.script(Reply(text="the answer"))
        env = {
            **os.environ,
            "RELAY_HOME": str(relay_home),
            "RELAY_ANTHROPIC_BASE_URL": mock.base_url,
            "ANTHROPIC_API_KEY": "sk-ant-test-0123456789abcdefghij",
        }
        asked = subprocess.run(
            [RELAY, "ask", "sonnet", "a question"],
            env=env,
            cwd=str(workdir),
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    assert asked.returncode == 0, asked.stderr
    every = json.loads(relay("jobs", "--json", home=relay_home, cwd=workdir).stdout)
    assert [e["via"] for e in every] == ["cli/ask", "cli/run"]
    runs = json.loads(relay("jobs", "--json", "--via", "cli/run", home=relay_home, cwd=workdir).stdout)
    assert [e["job_id"] for e in runs] == [every[1]["job_id"]]
    table = relay("jobs", "--via", "cli/", home=relay_home, cwd=workdir).stdout.splitlines()
    assert [line.split()[2] for line in table[1:]] == ["cli/ask", "cli/run"]
    assert relay("jobs", "--via", "core/", home=relay_home, cwd=workdir).stdout.strip() == "no jobs"


@pytest.mark.usefixtures("configured")
def test_run_json_prints_the_envelope_and_fails_with_the_job(relay_home: Path, workdir: Path) -> None:
    out = relay("run", "claude", "x [[fake:replay=claude_stream_error_500]]", "--json", home=relay_home, cwd=workdir)
    env = json.loads(out.stdout)
    assert out.returncode == 1
    assert env["status"] == "failed" and env["error"]["code"] == "UPSTREAM_ERROR"


@pytest.mark.usefixtures("configured")
def test_show_and_tail_read_a_finished_job(relay_home: Path, workdir: Path) -> None:
    relay("run", "claude", "hi", home=relay_home, cwd=workdir)
    (job,) = Store(relay_home / "relay.db").list_jobs()
    show = relay("show", job.id[:6], home=relay_home, cwd=workdir)
    assert "status     completed" in show.stdout and "hi from mock" in show.stdout
    assert ["via", "cli/run"] in [line.split() for line in show.stdout.splitlines()]
    tail = relay("tail", job.id, home=relay_home, cwd=workdir)
    assert "[assistant] hi from mock" in tail.stdout
    raw = relay("tail", job.id, "--raw", home=relay_home, cwd=workdir)
    assert raw.stdout == (relay_home / "jobs" / job.id / "stdout").read_text()


@pytest.mark.usefixtures("configured")
def test_cancel_from_the_cli_stops_a_job_another_relay_runs(relay_home: Path, workdir: Path, tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    env = {**os.environ, "RELAY_HOME": str(relay_home), "RELAY_KILL_GRACE_S": "0.3"}
    runner = subprocess.Popen(
        [RELAY, "run", "claude", f"x [[fake:hang,pidfile={pidfile}]]"],
        env=env,
        cwd=str(workdir),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not (pidfile.exists() and pidfile.read_text()):
            assert time.monotonic() < deadline, "the fake never started"
            time.sleep(0.02)
        (job,) = Store(relay_home / "relay.db").list_jobs()
        out = relay("cancel", job.id, home=relay_home, cwd=workdir)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == f"{job.id}: cancelled"
        runner.wait(30)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == 1
    assert "CANCELLED" in (runner.stderr.read() if runner.stderr else "")


def test_an_unknown_job_is_a_clear_error(relay_home: Path, workdir: Path) -> None:
    out = relay("show", "nothing", home=relay_home, cwd=workdir)
    assert out.returncode == 2
    assert "JOB_NOT_FOUND" in out.stderr and "hint:" in out.stderr


def test_version_names_relay_the_mcp_sdk_and_python(tmp_path: Path) -> None:
    import platform
    from importlib.metadata import version

    from relay import __version__

    done = relay("--version", home=tmp_path, cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        f"relay {__version__} (mcp {version('mcp')}, Python {platform.python_version()})\n",
        "",
    )


@pytest.mark.usefixtures("configured")
def test_store_flag_points_every_command_at_a_postgresql_store(relay_home: Path, workdir: Path, pg_url: str) -> None:
    done = relay("run", "claude", "say hi", "--store", pg_url, home=relay_home, cwd=workdir)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()  # the answer
    (listed,) = json.loads(relay("jobs", "--json", "--store", pg_url, home=relay_home, cwd=workdir).stdout)
    assert listed["status"] == "completed"
    shown = relay("show", listed["job_id"], "--json", "--store", pg_url, home=relay_home, cwd=workdir)
    assert shown.returncode == 0 and json.loads(shown.stdout)["job_id"] == listed["job_id"]
    # The job went into PostgreSQL, not into the home's relay.db.
    home_jobs = json.loads(relay("jobs", "--json", home=relay_home, cwd=workdir).stdout or "[]")
    assert home_jobs == []


@pytest.mark.parametrize("command", ["serve", "worker", "workers", "jobs", "dashboard"])
def test_a_store_flag_that_is_not_a_postgresql_url_is_a_clear_error(
    command: str, relay_home: Path, workdir: Path
) -> None:
    done = relay(command, "--store", "mysql://db/relay", home=relay_home, cwd=workdir)
    assert done.returncode == 2
    assert "CONFIG_INVALID" in done.stderr and "--store" in done.stderr and "hint:" in done.stderr


@pytest.mark.usefixtures("configured")
def test_tail_follows_a_job_another_host_runs_on_a_postgresql_store_to_its_end(
    relay_home: Path, workdir: Path, tmp_path: Path, pg_url: str
) -> None:
    from relay.store import open_store

    worker_home = tmp_path / "worker-home"  # the job's files are on the worker's host, not here
    worker_home.mkdir()
    store = open_store(pg_url, home=worker_home)
    store.insert_job("far", "claude", "cli", {"prompt": "p"}, None, str(workdir))
    running = dict(pid=1, pid_start_ticks=None, boot_id="another-host", owner_pid=1, owner_start_ticks=None)
    assert store.mark_running("far", **running, deadline_at=None, idle_timeout_s=None)  # type: ignore[arg-type]
    store.append_output("far", "transcript", b"first line\n")
    env = {**os.environ, "RELAY_HOME": str(relay_home)}
    tail = subprocess.Popen(
        [RELAY, "tail", "-f", "far", "--store", pg_url],
        env=env,
        cwd=str(workdir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert tail.stdout is not None
        assert tail.stdout.readline() == "first line\n"
        store.append_output("far", "transcript", b"second line\n")
        assert tail.stdout.readline() == "second line\n"
        ended = time.monotonic()
        assert store.finish_job("far", "completed", exit_code=0, result=None, error=None, session_id=None, model=None)
        assert tail.wait(30) == 0, tail.stderr.read() if tail.stderr else ""
        # Followed to its end promptly (woken by the end's notice: about 70 ms on an idle machine, the exit of a
        # PostgreSQL client process included; the bound leaves room for the suite's five tiers on two cores).
        assert time.monotonic() - ended < 3.0
    finally:
        if tail.poll() is None:
            tail.kill()
        store.close()


def test_audit_render_writes_the_views_of_a_home_with_a_log_and_makes_no_home(tmp_path: Path, workdir: Path) -> None:
    missing = tmp_path / "no-such-home"
    out = relay("audit", "render", home=missing, cwd=workdir)
    assert out.returncode == 0 and "nothing to render" in out.stdout and not missing.exists()
    home = tmp_path / "home"
    log = AuditLog(home)
    log.append("queued", "aaaaaaaa00000001", {"agent": "claude", "prompt": "tidy the docs", "prompt_chars": 13})
    out = relay("audit", "render", home=home, cwd=workdir)
    assert out.returncode == 0 and "wrote" in out.stdout
    assert "tidy the docs" in (home / IAC_FILE).read_text()
