"""A repository host that takes the connection and never answers fails a fetch within the connect timeout.

Each transport gets its bound (relay.workspaces._connect): ssh's ConnectTimeout, git's http low-speed limit,
and for git:// relay's own first request; the fetch's overall timeout (600 s) is never waited out.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.config import load_settings
from relay.errors import ErrorCode, RelayError
from relay.workspaces import _connect, remote
from relay.workspaces.records import WorkspaceStore

# The fetch's own timeout in these tests: far above the connect timeout, so only the latter can end them.
OVERALL_S = 120.0
CONNECT_S = 1.0


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port on 127.0.0.1 that takes connections (the kernel's backlog) and never sends a byte."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield int(s.getsockname()[1])


@pytest.mark.parametrize("scheme", ["git", "ssh", "http"])
def test_a_fetch_from_a_host_that_never_answers_fails_within_the_connect_timeout_with_a_hint(
    scheme: str, silent_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("GIT_SSH_COMMAND", "GIT_SSH", "GIT_HTTP_LOW_SPEED_LIMIT"):
        monkeypatch.delenv(name, raising=False)
    url = f"{scheme}://127.0.0.1:{silent_port}/app.git"
    store = WorkspaceStore(tmp_path / "relay.db")
    started = time.monotonic()
    try:
        with pytest.raises(RelayError) as caught:
            remote.place(
                tmp_path / "repos", tmp_path / "wt", store, "job1", url, timeout_s=OVERALL_S, connect_s=CONNECT_S
            )
    finally:
        store.close()
    took = time.monotonic() - started
    err = caught.value
    assert err.code is ErrorCode.UPSTREAM_ERROR and f"did not answer a fetch within {CONNECT_S:g} s" in err.message
    assert "git ls-remote" in err.hint and "connect_timeout_s" in err.hint
    assert took < OVERALL_S / 4, took  # the connect timeout ended it, not the fetch's own
    assert not remote.cache_of(tmp_path / "repos", url).exists() and not (tmp_path / "wt" / "job1").exists()


def test_a_cancel_ends_the_wait_for_a_silent_git_host(silent_port: int, tmp_path: Path) -> None:
    with pytest.raises(RelayError) as caught:
        _connect.probe(f"git://127.0.0.1:{silent_port}/a.git", "shown", "fetch", OVERALL_S, stop=lambda: True)
    assert caught.value.code is ErrorCode.CANCELLED


def test_the_users_own_ssh_command_and_low_speed_limit_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("GIT_SSH_COMMAND", "GIT_SSH", "GIT_HTTP_LOW_SPEED_LIMIT"):
        monkeypatch.delenv(name, raising=False)
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path)], check=True)
    assert _connect.env_for("git@h:o/a.git", tmp_path, 5) == {"GIT_SSH_COMMAND": "ssh -o ConnectTimeout=5"}
    assert _connect.env_for("https://h/a.git", tmp_path, 5) == {
        "GIT_HTTP_LOW_SPEED_LIMIT": "1",
        "GIT_HTTP_LOW_SPEED_TIME": "5",
    }
    assert _connect.env_for("file:///x.git", tmp_path, 5) == {}
    subprocess.run(["git", "config", "core.sshCommand", "ssh -i key"], cwd=tmp_path, check=True)
    subprocess.run(["git", "config", "http.https://h/.lowSpeedLimit", "100"], cwd=tmp_path, check=True)
    assert _connect.env_for("ssh://h/a.git", tmp_path, 5) == {}
    assert _connect.env_for("https://h/a.git", tmp_path, 5) == {}
    assert "GIT_HTTP_LOW_SPEED_LIMIT" in _connect.env_for("https://other/a.git", tmp_path, 5)
    monkeypatch.setenv("GIT_SSH_COMMAND", "ssh -v")
    assert _connect.env_for("ssh://other/a.git", tmp_path, 5) == {}


def test_the_connect_timeout_and_the_repos_retention_are_settings(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("[workspaces]\nconnect_timeout_s = 7\nrepos_keep_days = 3\n")
    from_file = load_settings({"RELAY_HOME": str(tmp_path)}, cwd=tmp_path)
    env = {"RELAY_HOME": str(tmp_path), "RELAY_GIT_CONNECT_TIMEOUT_S": "2.5", "RELAY_REPOS_KEEP_DAYS": "1"}
    from_env = load_settings(env, cwd=tmp_path)
    defaults = load_settings({"RELAY_HOME": str(tmp_path / "other")}, cwd=tmp_path)
    assert (from_file.git_connect_timeout_s, from_file.repos_keep_s) == (7.0, 3 * 86400.0)
    assert (from_env.git_connect_timeout_s, from_env.repos_keep_s) == (2.5, 86400.0)
    assert (defaults.git_connect_timeout_s, defaults.repos_keep_s) == (30.0, 30 * 86400.0)
