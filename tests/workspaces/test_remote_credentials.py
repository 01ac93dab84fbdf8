"""A password or token in a job's repository URL is never written down: refused at submit, masked in every message.

The request of a job is stored (the queue, job_list, the dashboard, `relay show`, the audit log) and read by any
worker, so a URL with a credential is refused before anything is recorded; workers use their own git credentials.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client

from relay.errors import ErrorCode, RelayError
from relay.server.app import build_server
from relay.store import Store
from relay.workspaces import _net, check_remote
from tests.conftest import SettingsFactory

pytestmark = pytest.mark.anyio

SECRET = "s3cret-t0ken-4711"
TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4"  # shaped like a GitHub token


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens there once the socket closes


def files_holding(home: Path, *needles: str) -> list[str]:
    """Every file under `home` whose bytes hold one of `needles`."""
    found: list[str] = []
    for path in home.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            if any(n.encode() in data for n in needles):
                found.append(str(path.relative_to(home)))
    return found


@pytest.mark.parametrize(
    ("url", "instead"),
    [
        (f"https://me:{SECRET}@git.example.invalid/app.git", "https://me@git.example.invalid/app.git"),
        (f"ssh://git:{SECRET}@git.example.invalid/app.git", "ssh://git@git.example.invalid/app.git"),
        (f"https://{TOKEN}@github.com/o/app.git", "https://github.com/o/app.git"),
        (f"https://x-access-token:{TOKEN}@github.com/o/app.git", "https://x-access-token@github.com/o/app.git"),
    ],
)
def test_a_url_carrying_a_password_or_token_is_refused_with_the_url_to_pass_instead(url: str, instead: str) -> None:
    with pytest.raises(RelayError) as caught:
        check_remote(url, None, "")
    err = caught.value
    assert err.code is ErrorCode.INVALID_ARGUMENT and "password or token" in err.message
    assert "credential helper on the workers, not in the URL" in err.hint and repr(instead) in err.hint
    assert SECRET not in str(err.to_dict()) and TOKEN not in str(err.to_dict())


@pytest.mark.parametrize(
    "url",
    ["https://me@git.example.invalid/app.git", "git@github.com:o/app.git", "ssh://git@h/app.git", "https://h/a.git"],
)
def test_a_url_with_a_user_name_only_is_taken(url: str) -> None:
    assert check_remote(url, None, "") == ""


async def test_a_job_by_a_url_with_a_password_is_refused_over_mcp_and_nothing_under_the_home_holds_the_password(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    settings = make_settings()
    taken = f"https://me@127.0.0.1:{closed_port()}/app.git"  # taken: the worker fails to reach it, stored as is
    async with Client(build_server(settings)) as c:
        with anyio.fail_after(60):
            refused = await c.call_tool("delegate", {"prompt": "x", "repo": taken.replace("me@", f"me:{SECRET}@")})
            args = {"prompt": "x", "repo": taken, "cwd": str(workdir), "mode": "async"}
            queued = await c.call_tool("delegate", args)
            listed = await c.call_tool("call_tool", {"server_name": "jobs", "tool_name": "job_list", "arguments": {}})
    said = " ".join(getattr(part, "text", "") for part in refused.content)
    assert refused.is_error and "INVALID_ARGUMENT" in said and "credential helper" in said and SECRET not in said
    assert not queued.is_error and SECRET not in str(listed.content)
    store = Store(settings.db_path)
    try:
        rows = store.list_jobs(limit=100)
    finally:
        store.close()
    assert [r.request["repo"] for r in rows] == [taken]
    assert (settings.home / "audit.jsonl").is_file()
    assert files_holding(settings.home, SECRET) == []  # relay.db (with its WAL), the audit log, job folders


def test_relay_run_with_a_password_in_repo_exits_with_the_hint_and_stores_nothing(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    settings = make_settings()
    relay = str(Path(sys.executable).with_name("relay"))
    url = f"https://me:{SECRET}@git.example.invalid/app.git"
    env = {**os.environ, "RELAY_HOME": str(settings.home)}
    ran = subprocess.run(
        [relay, "run", "claude", "x", "--repo", url], env=env, cwd=workdir, capture_output=True, text=True, timeout=60
    )
    assert ran.returncode != 0 and "credential helper" in ran.stderr and "https://me:***@" in ran.stderr
    assert SECRET not in ran.stdout + ran.stderr
    assert files_holding(settings.home, SECRET) == []


@pytest.mark.parametrize("op", ["fetch", "push"])
def test_what_git_prints_about_a_url_with_a_password_reaches_no_error(op: str, tmp_path: Path) -> None:
    url = f"http://me:{SECRET}@127.0.0.1:{closed_port()}/app.git"  # past check_url: git names it when it fails
    args = ["ls-remote", url] if op == "fetch" else ["push", url, "HEAD:refs/heads/x"]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    who = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", *who, "commit", "-q", "--allow-empty", "-m", "one"], cwd=tmp_path, check=True)
    with pytest.raises(RelayError) as caught:
        _net.run(args, tmp_path, url=url, op=op, timeout=30)  # type: ignore[arg-type]
    assert caught.value.code is ErrorCode.UPSTREAM_ERROR
    assert SECRET not in str(caught.value.to_dict()) and "me:***@" in caught.value.message


def test_a_token_given_as_the_user_name_is_masked_in_git_s_words() -> None:
    said = f"fatal: unable to access 'https://{TOKEN}@github.com/o/app.git/': Could not resolve host: github.com"
    err = _net.translate("fetch", "https://github.com/o/app.git", said)
    assert TOKEN not in err.message and "https://***@github.com" in err.message
