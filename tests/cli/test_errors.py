"""Errors people see at the CLI: one line on stderr and a non-zero exit for every command; a traceback only with --debug.

Each test runs the real `relay` entry point as a process, with RELAY_HOME in a temporary folder, a PATH
that holds no agent CLI and an environment without API keys.
"""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

RELAY = str(Path(sys.executable).with_name("relay"))
# Bounds for a relay process that should answer at once (generous: the test machine is shared).
RUN_TIMEOUT_S = 60
BANNER_TIMEOUT_S = 30


@pytest.fixture
def bare_env(tmp_path: Path, relay_home: Path) -> dict[str, str]:
    """No agent CLI on PATH, no API key anywhere, RELAY_HOME and HOME in the test's folder."""
    empty_bin = tmp_path / "empty-bin"
    empty_bin.mkdir()
    return {"RELAY_HOME": str(relay_home), "HOME": str(relay_home), "PATH": str(empty_bin), "LANG": "C.UTF-8"}


def relay(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RELAY, *args],
        env=env,
        cwd=str(cwd),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )


def one_error_line(out: subprocess.CompletedProcess[str]) -> str:
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


# (command line, the one line expected on stderr, exit status)
CASES = {
    "serve": (
        ["serve", "--http", "--host", "0.0.0.0"],
        "relay: INVALID_ARGUMENT: refusing to serve HTTP on 0.0.0.0 without a token"
        " — hint: pass --token SECRET (or set RELAY_TOKEN, or name tokens in [server.tokens.NAME]), or bind 127.0.0.1",
        2,
    ),
    "run": (
        ["run", "claude", "hi"],
        "relay: AGENT_NOT_INSTALLED: claude is not installed ('claude' not found)"
        " — hint: npm i -g @anthropic-ai/claude-code, or set agents.claude.command in config.toml",
        2,
    ),
    "show": (
        ["show", "nosuchjob"],
        "relay: JOB_NOT_FOUND: no job 'nosuchjob' — hint: list jobs with job_list (or `relay jobs`)",
        2,
    ),
    "tail": (
        ["tail", "nosuchjob", "-f"],
        "relay: JOB_NOT_FOUND: no job 'nosuchjob' — hint: list jobs with job_list (or `relay jobs`)",
        2,
    ),
    "cancel": (
        ["cancel", "nosuchjob"],
        "relay: JOB_NOT_FOUND: no job 'nosuchjob' — hint: list jobs with job_list (or `relay jobs`)",
        2,
    ),
}


@pytest.mark.parametrize("command", list(CASES))
def test_a_relay_error_is_one_line_on_stderr_and_a_nonzero_exit(
    command: str, bare_env: dict[str, str], workdir: Path
) -> None:
    argv, line, status = CASES[command]
    out = relay(bare_env, workdir, *argv)
    assert (one_error_line(out), out.returncode, out.stdout) == (line, status, "")


def test_ask_without_a_key_is_one_line_naming_the_variable_to_set(bare_env: dict[str, str], workdir: Path) -> None:
    out = relay(bare_env, workdir, "ask", "sonnet", "hi")
    line = one_error_line(out)
    assert line.startswith("relay: AUTH_MISSING: no API key for anthropic — hint: set ANTHROPIC_API_KEY"), line
    assert out.returncode == 2


def test_doctor_with_a_broken_config_is_one_line(bare_env: dict[str, str], workdir: Path, relay_home: Path) -> None:
    (relay_home / "config.toml").write_text('[agents]\nclaude = "not a table"\n')
    out = relay(bare_env, workdir, "doctor")
    assert one_error_line(out) == "relay: CONFIG_INVALID: [agents.claude] must be a table — hint: fix config.toml"
    assert out.returncode == 2


def test_doctor_without_any_agent_cli_reports_and_prints_no_error(bare_env: dict[str, str], workdir: Path) -> None:
    out = relay(bare_env, workdir, "doctor", "--json")
    assert (out.returncode, out.stderr) == (0, "")


def test_an_unexpected_exception_is_one_internal_line_that_says_to_rerun_with_debug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from relay.cli import main as cli_main

    def broken(args: object) -> int:
        raise ValueError("something relay did not expect")

    monkeypatch.setitem(cli_main.COMMANDS, "jobs", broken)
    assert cli_main.main(["jobs"]) == 70
    assert capsys.readouterr().err == (
        "relay: INTERNAL: ValueError: something relay did not expect — hint: rerun with --debug and report it\n"
    )


def test_a_damaged_db_is_one_store_damaged_line(bare_env: dict[str, str], workdir: Path, relay_home: Path) -> None:
    (relay_home / "relay.db").write_bytes(b"this is no SQLite database, it is a corrupted file" * 40)
    out = relay(bare_env, workdir, "jobs")
    assert one_error_line(out).startswith("relay: STORE_DAMAGED: ")
    assert out.returncode == 74


@pytest.mark.parametrize("where", ["before the command", "after the command"])
def test_debug_prints_the_traceback_and_still_ends_with_the_one_line(
    where: str, bare_env: dict[str, str], workdir: Path
) -> None:
    argv = ["--debug", "run", "claude", "hi"] if where == "before the command" else ["run", "claude", "hi", "--debug"]
    out = relay(bare_env, workdir, *argv)
    lines = out.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):" or lines[0].startswith("  + Exception Group Traceback")
    assert "relay.errors.RelayError: AGENT_NOT_INSTALLED" in out.stderr
    assert lines[-1].startswith("relay: AGENT_NOT_INSTALLED: claude is not installed")
    assert out.returncode == 2


def test_a_failed_job_prints_its_error_as_one_line(bare_env: dict[str, str], workdir: Path, relay_home: Path) -> None:
    fake = Path(__file__).resolve().parents[1] / "fakes" / "claude"
    (relay_home / "config.toml").write_text(f'[agents.claude]\ncommand = "{fake}"\n')
    env = {**bare_env, "PATH": os.environ["PATH"]}
    out = relay(env, workdir, "run", "claude", "x [[fake:replay=claude_stream_error_500]]")
    line = one_error_line(out)
    assert line.startswith("relay: UPSTREAM_ERROR: ") and " — hint: " in line
    assert out.returncode == 1


def test_serve_on_a_terminal_says_it_is_an_mcp_server_and_how_to_add_it(
    bare_env: dict[str, str], workdir: Path
) -> None:
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [RELAY, "serve"], env=bare_env, cwd=str(workdir), stdin=slave, stdout=slave, stderr=subprocess.PIPE
    )
    os.close(slave)
    assert proc.stderr is not None
    seen = b""
    try:
        deadline = time.monotonic() + BANNER_TIMEOUT_S
        while b"gemini mcp add" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stderr], [], [], 1.0)
            if ready:
                chunk = os.read(proc.stderr.fileno(), 4096)
                if not chunk:
                    break
                seen += chunk
        assert proc.poll() is None, "the server must keep serving after the banner"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(RUN_TIMEOUT_S)
        proc.stderr.close()
        os.close(master)
    text = seen.decode()
    assert "MCP server" in text and "waiting for an MCP client on stdin/stdout" in text
    assert f"claude mcp add relay -- {RELAY} serve" in text or "claude mcp add relay -- relay serve" in text
    assert "[mcp_servers.relay]" in text


def test_serve_started_by_a_client_prints_nothing_on_stderr(bare_env: dict[str, str], workdir: Path) -> None:
    out = relay(bare_env, workdir, "serve")  # stdin is /dev/null: the "client" hangs up at once
    assert (out.returncode, out.stderr) == (0, "")
