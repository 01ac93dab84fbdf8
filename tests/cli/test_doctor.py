"""`relay doctor`: found / missing / version / credentials for installed and missing agent CLIs."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from relay import doctor
from relay.config import load_settings
from relay.store import Store, WorkerInfo
from tests.conftest import FAKES
from tests.web.conftest import wait_until

RELAY = str(Path(sys.executable).with_name("relay"))


def write_config(home: Path, missing: str = "gemini") -> None:
    lines = []
    for name in ("claude", "codex", "copilot", "gemini"):
        command = "/nonexistent/bin/" + name if name == missing else str(FAKES / name)
        lines.append(f'[agents.{name}]\ncommand = "{command}"\n')
    (home / "config.toml").write_text("\n".join(lines))


def run_doctor(home: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RELAY, "doctor", *args],
        env={"PATH": os.environ["PATH"], "HOME": str(home), "RELAY_HOME": str(home), **env},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_doctor_json_reports_found_missing_version_and_credentials(relay_home: Path) -> None:
    write_config(relay_home)
    out = run_doctor(relay_home, "--json", env={"ANTHROPIC_API_KEY": "x", "GH_TOKEN": "t"})
    assert out.returncode == 0, out.stderr
    reports = {r["name"]: r for r in json.loads(out.stdout)["agents"]}
    assert reports["claude"] | {"path": None} == {
        "name": "claude",
        "found": True,
        "path": None,
        "version": "2.1.197",
        "version_status": "tested",
        "credentials": "env:ANTHROPIC_API_KEY",
        "note": "",
        "smoke": None,
        "protocol": "print",
        "acp_command": None,
    }
    assert reports["claude"]["path"] == str(FAKES / "claude")
    assert reports["codex"]["version"] == "0.169.0" and reports["codex"]["version_status"] == "tested"
    assert reports["codex"]["credentials"] == "missing" and "OPENAI_API_KEY" in reports["codex"]["note"]
    assert reports["copilot"]["version"] == "1.0.102" and reports["copilot"]["credentials"] == "env:GH_TOKEN"
    gemini = reports["gemini"]
    assert gemini["found"] is False and gemini["path"] is None and gemini["version_status"] == "missing"
    assert "npm" in gemini["note"]


def test_a_credentials_file_counts_as_configured(relay_home: Path) -> None:
    write_config(relay_home)
    (relay_home / ".codex").mkdir()
    (relay_home / ".codex" / "auth.json").write_text("{}")
    out = run_doctor(relay_home, "--json", env={})
    reports = {r["name"]: r for r in json.loads(out.stdout)["agents"]}
    assert reports["codex"]["credentials"] == f"file:{relay_home / '.codex' / 'auth.json'}"


def test_the_table_for_people_lists_every_agent(relay_home: Path) -> None:
    write_config(relay_home)
    out = run_doctor(relay_home, env={})
    lines = out.stdout.splitlines()
    assert lines[0].split()[:4] == ["AGENT", "FOUND", "VERSION", "STATUS"]
    assert [line.split()[0] for line in lines[1 : lines.index("")]] == ["claude", "codex", "copilot", "gemini"]


def test_smoke_runs_a_live_job_per_installed_agent(relay_home: Path, tmp_path: Path) -> None:
    write_config(relay_home, missing="gemini")
    out = subprocess.run(
        [RELAY, "doctor", "--json", "--smoke", "--smoke-timeout", "20"],
        env={"PATH": os.environ["PATH"], "HOME": str(relay_home), "RELAY_HOME": str(relay_home)},
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    reports = {r["name"]: r for r in json.loads(out.stdout)["agents"]}
    assert reports["claude"]["smoke"] == "ok"
    assert reports["codex"]["smoke"] == "ok"
    assert reports["copilot"]["smoke"] == "ok"
    assert reports["gemini"]["smoke"] is None


@pytest.mark.parametrize(
    ("version", "status"),
    [("2.1.197", "tested"), ("2.3.0", "untested"), ("9.9.9", "broken"), (None, "unknown")],
)
def test_versions_are_judged_against_the_tested_range(
    monkeypatch: pytest.MonkeyPatch, relay_home: Path, version: str | None, status: str
) -> None:
    monkeypatch.setitem(doctor.KNOWN_BROKEN, "claude", {"9.9.9": "drops the result line"})
    settings = load_settings({"RELAY_HOME": str(relay_home), "PATH": "/bin"}, cwd=relay_home)
    (report,) = [
        r
        for r in doctor.diagnose(settings, which=lambda c: f"/bin/{c}", version_of=lambda p, e: version)
        if r.name == "claude"
    ]
    assert report.version_status == status


def _queued_job(home: Path, job_id: str, labels: tuple[str, ...] = ()) -> None:
    store = Store(home / "relay.db")
    store.insert_job(job_id, "claude", "cli", {"prompt": "waiting"}, None, str(home), labels=labels)
    store.close()


def test_doctor_says_how_many_jobs_wait_and_that_no_worker_runs_them(relay_home: Path) -> None:
    write_config(relay_home)
    with (relay_home / "config.toml").open("a") as config:
        config.write("[queue]\nrun_jobs = false\n")
    _queued_job(relay_home, "aaaa000000000001")
    _queued_job(relay_home, "aaaa000000000002")
    text = run_doctor(relay_home, env={}).stdout.splitlines()
    at = next(i for i, line in enumerate(text) if line.startswith("queue:"))
    assert re.fullmatch(r"queue: 0 workers running; 2 jobs queued, the oldest for \d+s", text[at])
    assert "start `relay worker`" in text[at + 1] and "this configuration has run_jobs off" in text[at + 1]
    queue = json.loads(run_doctor(relay_home, "--json", env={}).stdout)["queue"]
    assert (queue["workers_running"], queue["stale"], queue["queued"]) == ([], [], 2)
    assert queue["hint"].startswith("no worker runs, so queued jobs wait")


def test_doctor_counts_the_running_workers_flags_a_stale_one_and_gives_no_hint_while_one_runs(
    relay_home: Path,
) -> None:
    write_config(relay_home)
    env = {"PATH": os.environ["PATH"], "HOME": str(relay_home), "RELAY_HOME": str(relay_home)}
    worker = subprocess.Popen(
        [RELAY, "worker", "--name", "host-a", "--slots", "2"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        store = Store(relay_home / "relay.db")
        wait_until(lambda: any(w.pid == worker.pid for w in store.list_workers()), what="the worker to register")
        # A worker of another host that stopped renewing its lease (0.05 s here: stale at once).
        store.register_worker(WorkerInfo("gone/1", "gone", "elsewhere", 4242, None, None, None, (), 4, 0.05))
        store.close()
        _queued_job(relay_home, "bbbb000000000001", labels=("gpu",))  # no worker has the label: it waits
        queue = json.loads(run_doctor(relay_home, "--json", env={}).stdout)["queue"]
        assert queue["workers_running"] == [{"name": "host-a", "host": socket.gethostname(), "slots": 2}]
        assert [s["name"] for s in queue["stale"]] == ["gone"] and queue["stale"][0]["lease_s"] == 0.05
        assert queue["queued"] == 1 and queue["hint"] is None
        assert re.fullmatch(
            r"queue: 1 worker running \(host-a; 2 slots\), 1 STALE \(gone: last heartbeat \d+s ago, lease 0\.05s;"
            r" gone or cut off from the store\); 1 job queued, the oldest for \d+s",
            queue["summary"],
        )
    finally:
        worker.terminate()
        worker.wait(30)
