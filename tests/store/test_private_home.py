"""RELAY_HOME is private: made 0700 with relay.db 0600, and an existing home that others could read is made private."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import anyio
import pytest

from relay.cli.main import main
from relay.gateway import ServerRegistry
from relay.jobs.engine import Engine, JobRequest
from relay.store import Store
from tests.conftest import SettingsFactory


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def open_to_others(home: Path) -> list[str]:
    """Everything under `home` (itself included) that its group or other users may read, write or enter."""
    found = [str(home)] if mode(home) & 0o077 else []
    for root, dirs, files in os.walk(home):
        paths = [Path(root) / n for n in (*dirs, *files)]
        found += [str(p) for p in paths if not p.is_symlink() and mode(p) & 0o077]
    return found


@pytest.mark.anyio
async def test_the_home_and_relay_db_are_private_after_a_job(
    make_settings: SettingsFactory, workdir: Path, relay_home: Path
) -> None:
    home = relay_home
    home.chmod(0o755)  # as a home was made before this rule
    async with Engine(make_settings()).running() as engine:
        job_id = engine.submit(JobRequest(agent="claude", prompt="a private prompt", cwd=str(workdir)))
        with anyio.fail_after(60):
            await engine.wait_one(job_id, 60)
    assert mode(home) == 0o700
    assert {p.name: mode(p) for p in home.glob("relay.db*")}["relay.db"] == 0o600
    assert all(mode(p) == 0o600 for p in home.glob("relay.db*")), {p.name: oct(mode(p)) for p in home.glob("relay.db*")}
    assert mode(home / "audit.jsonl") == 0o600


def test_an_existing_home_others_could_read_is_made_private_on_upgrade(tmp_path: Path) -> None:
    home = tmp_path / "old-home"
    (home / "jobs" / "j1").mkdir(parents=True)
    (home / "jobs" / "j1" / "stdout").write_text("an old job's output")
    (home / "config.toml").write_text("")
    Store(home / "relay.db").close()  # made the old way below
    for path in (home, home / "jobs", home / "jobs" / "j1"):
        path.chmod(0o755)
    for path in (home / "relay.db", home / "config.toml", home / "jobs" / "j1" / "stdout"):
        path.chmod(0o644)
    (home / "link").symlink_to("/etc/hostname")  # a link is never followed
    before = mode(Path("/etc/hostname"))
    assert len(open_to_others(home)) == 6

    Store(home / "relay.db").close()
    assert open_to_others(home) == []
    assert mode(home / "jobs" / "j1" / "stdout") == 0o600 and mode(home / "jobs" / "j1") == 0o700
    assert mode(Path("/etc/hostname")) == before


def test_relay_mcp_on_a_fresh_home_makes_it_private(tmp_path: Path, relay_home: Path) -> None:
    relay_home.rmdir()
    ServerRegistry(relay_home / "relay.db", relay_home).close()
    assert mode(relay_home) == 0o700


def test_doctor_says_which_sandbox_is_in_force_and_what_the_fallback_cannot_stop(
    relay_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELAY_SANDBOX_BWRAP", "0")
    main(["doctor"])
    out = capsys.readouterr().out
    [line] = [line for line in out.splitlines() if line.startswith("sandbox (execute_code): ")]
    expected = "rlimits+nobody" if os.geteuid() == 0 else "rlimits"
    assert line.startswith(f"sandbox (execute_code): {expected}: no bubblewrap")
    assert "cannot stop: the network, loopback included" in line
    main(["doctor", "--json"])
    import json

    sandbox = json.loads(capsys.readouterr().out)["sandbox"]
    assert sandbox["mode"] == expected and sandbox["network"] is True
    assert any("loopback" in gap for gap in sandbox["cannot_stop"])
    assert sys.platform != "win32"
