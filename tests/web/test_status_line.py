"""`relay run` on a terminal: a live status line on stderr while the job runs, erased before the answer."""

from __future__ import annotations

import os
import pty
import re
import select
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from relay.cli._status import ERASE, StatusLine
from relay.cli._watch import HOME_AND_CLEAR
from relay.events import Event
from tests.conftest import SettingsFactory
from tests.web.conftest import RELAY, Jobs


def test_the_line_tells_agent_model_elapsed_last_tool_tokens_and_cost() -> None:
    line = StatusLine("claude", None, started=100.0)
    assert line.text(now=100.4) == "relay: claude · - · 0s · starting"
    line.feed(Event("session.started", {"session_id": "s", "model": "claude-sonnet-4-5"}))
    line.feed(Event("tool.started", {"id": "1", "name": "Read", "input": {}}))
    assert line.text(now=112.0) == "relay: claude · claude-sonnet-4-5 · 12s · tool Read"
    line.feed(Event("turn.completed", {"usage": {"input": 1200, "output": 80, "cached": 0}, "cost_usd": 0.0123}))
    assert (
        line.text(now=112.0, width=120) == "relay: claude · claude-sonnet-4-5 · 12s · turn done · 1200→80 tok · $0.0123"
    )
    assert len(line.text(now=112.0, width=30)) == 29  # never wraps (a wrapped line could not be erased)


def _read_all(fd: int, proc: subprocess.Popen[bytes], timeout: float) -> bytes:
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed its end
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    return out


@pytest.mark.usefixtures("make_settings")
def test_on_a_terminal_run_shows_the_status_line_and_erases_it_before_the_answer(
    make_settings: SettingsFactory, relay_home: Path, workdir: Path
) -> None:
    make_settings()
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [RELAY, "run", "claude", "hi [[fake:sleep=1.2]]"],
        env={**os.environ, "RELAY_HOME": str(relay_home)},
        cwd=str(workdir),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
    )
    os.close(slave)
    try:
        terminal = _read_all(master, proc, 60)
        stdout = proc.stdout.read() if proc.stdout else b""
        assert proc.wait(30) == 0
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
        if proc.stdout:
            proc.stdout.close()
    text = terminal.decode()
    assert "relay: claude" in text and "s · " in text
    assert text.endswith(ERASE)  # the last thing written to the terminal erases the line
    assert stdout == b"hi from mock\n"  # the answer alone, on stdout


@pytest.mark.usefixtures("make_settings")
def test_without_a_terminal_stderr_stays_clean(make_settings: SettingsFactory, relay_home: Path, workdir: Path) -> None:
    make_settings()
    out = subprocess.run(
        [RELAY, "run", "claude", "hi [[fake:sleep=0.5]]"],
        env={**os.environ, "RELAY_HOME": str(relay_home)},
        cwd=str(workdir),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    assert (out.returncode, out.stdout, out.stderr) == (0, b"hi from mock\n", b"")


def _pane(sock: Path) -> str:
    out = subprocess.run(["tmux", "-S", str(sock), "capture-pane", "-p", "-t", "t"], capture_output=True, text=True)
    return out.stdout


@pytest.mark.slow
def test_in_tmux_the_line_updates_while_the_fake_runs_and_only_the_answer_reaches_stdout(
    make_settings: SettingsFactory, relay_home: Path, workdir: Path, tmp_path: Path
) -> None:
    make_settings()
    sock = tmp_path / "tmux.sock"
    answer = tmp_path / "answer.txt"
    env = f"RELAY_HOME={shlex.quote(str(relay_home))} PATH={shlex.quote(os.environ['PATH'])}"
    subprocess.run(
        ["tmux", "-S", str(sock), "new-session", "-d", "-s", "t", "-x", "150", "-y", "10", "-c", str(workdir)],
        check=True,
        env={**os.environ, "TMUX": ""},
    )
    try:
        command = (
            f"{env} {shlex.quote(RELAY)} run claude 'hi [[fake:sleep=4]]' > {shlex.quote(str(answer))}; echo END$?"
        )
        subprocess.run(["tmux", "-S", str(sock), "send-keys", "-t", "t", command, "Enter"], check=True)
        elapsed: list[str] = []
        deadline = time.monotonic() + 60
        while "END0" not in (pane := _pane(sock)):
            assert time.monotonic() < deadline, pane
            for line in pane.splitlines():
                if line.startswith("relay: claude · "):
                    elapsed.append(line.split(" · ")[2])
            time.sleep(0.2)
        assert len(set(elapsed)) >= 2, elapsed  # the line updates as the job runs (elapsed moves on)
        assert not any(line.startswith("relay: claude · ") for line in pane.splitlines())  # erased at the end
        assert answer.read_text() == "hi from mock\n"
    finally:
        subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True)


HOME_CLEAR = HOME_AND_CLEAR.encode()


def test_jobs_watch_on_a_terminal_redraws_the_table_as_a_job_changes_and_stops_on_ctrl_c(
    jobs: Jobs, relay_home: Path, workdir: Path
) -> None:
    started = jobs.start("watch me [[fake:sleep=2]]")
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [RELAY, "jobs", "--watch"],
        env={**os.environ, "RELAY_HOME": str(relay_home)},
        cwd=str(workdir),
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=subprocess.PIPE,
    )
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 60
        while not re.search(rf"{started.job.id}\s+claude\s+cli/run\s+completed".encode(), seen.split(HOME_CLEAR)[-1]):
            assert time.monotonic() < deadline, seen[-2000:]
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                seen += os.read(master, 65536)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
        if proc.stderr:
            proc.stderr.close()
    frames = seen.split(HOME_CLEAR)
    assert any(re.search(rf"{started.job.id}\s+claude\s+cli/run\s+running".encode(), f) for f in frames)


def test_jobs_watch_without_a_terminal_prints_the_table_once(jobs: Jobs, relay_home: Path, workdir: Path) -> None:
    job = jobs.run("once")
    out = subprocess.run(
        [RELAY, "jobs", "--watch"],
        env={**os.environ, "RELAY_HOME": str(relay_home)},
        cwd=str(workdir),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    assert out.returncode == 0
    lines = out.stdout.decode().splitlines()
    assert lines[0].split() == ["JOB", "AGENT", "VIA", "STATUS", "MODEL", "CREATED", "BRANCH", "PROMPT"]
    assert lines[1].split()[:4] == [job.id, "claude", "cli/run", "completed"] and len(lines) == 2


def test_on_a_terminal_ask_shows_the_status_line_until_the_answer_streams(tmp_path: Path, workdir: Path) -> None:
    from tests.api.mock_servers import MockServer, Reply

    home = tmp_path / "ask-home"
    home.mkdir()
    with MockServer("anthropic") as mock:
        mock.script(Reply(text="the answer"))
        env = {
            **os.environ,
            "RELAY_HOME": str(home),
            "RELAY_ANTHROPIC_BASE_URL": mock.base_url,
            "ANTHROPIC_API_KEY": "sk-ant-test-0123456789abcdefghij",
        }
        master, slave = pty.openpty()
        proc = subprocess.Popen(
            [RELAY, "ask", "sonnet", "a question"],
            env=env,
            cwd=str(workdir),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=slave,
        )
        os.close(slave)
        try:
            terminal = _read_all(master, proc, 60).decode()
            stdout = proc.stdout.read() if proc.stdout else b""
            assert proc.wait(30) == 0, terminal
        finally:
            os.close(master)
            if proc.poll() is None:
                proc.kill()
            if proc.stdout:
                proc.stdout.close()
    status_at = terminal.index("relay: ")
    assert ERASE in terminal[status_at:]  # drawn, then erased
    after = terminal.split(ERASE)[-1]  # what the terminal shows once the line is erased
    assert "relay: " not in after and after.startswith("[anthropic:") and "--continuation-id" in after
    assert stdout == b"the answer\n"
