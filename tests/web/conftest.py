"""Shared helpers for the dashboard's tests: jobs run by a real `relay run` process, the dashboard in a TestClient."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from relay.config import Settings
from relay.store import JobRecord, Store, WorkerRecord
from relay.web import Access, build_app
from tests.conftest import SettingsFactory

RELAY = str(Path(sys.executable).with_name("relay"))
BASE_URL = "http://127.0.0.1:8766"
HTML = {"accept": "text/html"}


@dataclass(frozen=True)
class SseEvent:
    event: str
    id: str | None
    data: Any


def parse_sse(text: str) -> list[SseEvent]:
    """The events of an SSE body (comments and `retry` lines skipped)."""
    found: list[SseEvent] = []
    for block in text.split("\n\n"):
        event, event_id, data = "message", None, []
        for line in block.split("\n"):
            if line.startswith("event: "):
                event = line[len("event: ") :]
            elif line.startswith("id: "):
                event_id = line[len("id: ") :]
            elif line.startswith("data: "):
                data.append(line[len("data: ") :])
        if data:
            found.append(SseEvent(event, event_id, json.loads("\n".join(data))))
    return found


def wait_until(check: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll `check` until it returns something truthy (bounded); for state held by another process."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@dataclass
class Started:
    proc: subprocess.Popen[str]
    job: JobRecord


class Jobs:
    """Starts jobs the way a user's agent does: in another relay process (`relay run`), against the fakes."""

    def __init__(self, home: Path, cwd: Path) -> None:
        self.home = home
        self.cwd = cwd
        self.procs: list[subprocess.Popen[str]] = []
        self.store = Store(home / "relay.db")

    def start(self, prompt: str, **env: str) -> Started:
        known = {r.id for r in self.store.list_jobs(limit=1000)}
        proc = subprocess.Popen(
            [RELAY, "run", "claude", prompt],
            env={**os.environ, "RELAY_HOME": str(self.home), "RELAY_KILL_GRACE_S": "0.3", **env},
            cwd=str(self.cwd),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        job = wait_until(
            lambda: next((r for r in self.store.list_jobs(limit=1000) if r.id not in known), None), what="the job"
        )
        return Started(proc, job)

    def run(self, prompt: str) -> JobRecord:
        started = self.start(prompt)
        started.proc.wait(60)
        return self.get(started.job.id)

    def get(self, job_id: str) -> JobRecord:
        rec = self.store.get_job(job_id)
        assert rec is not None
        return rec

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(30)
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        self.store.close()


class Workers:
    """`relay worker` processes on the test's home, as a person starts them beside a relay with --no-worker."""

    def __init__(self, home: Path, cwd: Path) -> None:
        self.home = home
        self.cwd = cwd
        self.procs: list[subprocess.Popen[str]] = []
        self.store = Store(home / "relay.db")

    def start(self, name: str, *args: str, lease_s: float = 15.0) -> tuple[subprocess.Popen[str], WorkerRecord]:
        """Start one and wait until it is in the store's workers table."""
        proc = subprocess.Popen(
            [RELAY, "worker", "--name", name, *args],
            env={**os.environ, "RELAY_HOME": str(self.home), "RELAY_LEASE_S": str(lease_s)},
            cwd=str(self.cwd),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.procs.append(proc)
        found = wait_until(
            lambda: next((w for w in self.store.list_workers() if w.pid == proc.pid), None), what=f"worker {name}"
        )
        return proc, found

    def run_job(self, prompt: str) -> JobRecord:
        """A job queued by a relay that runs none itself (RELAY_RUN_JOBS=0), so a worker runs it."""
        out = subprocess.run(
            [RELAY, "run", "claude", prompt],
            env={**os.environ, "RELAY_HOME": str(self.home), "RELAY_RUN_JOBS": "0"},
            cwd=str(self.cwd),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        newest = self.store.list_jobs(limit=1)
        return newest[0]

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(30)
        self.store.close()


@pytest.fixture
def workers(settings: Settings, relay_home: Path, workdir: Path) -> Iterator[Workers]:
    runner = Workers(relay_home, workdir)
    yield runner
    runner.close()


@pytest.fixture
def settings(make_settings: SettingsFactory, request: pytest.FixtureRequest) -> Settings:
    """The dashboard's settings: the store in RELAY_HOME, or (parametrized indirectly with "postgresql") a
    PostgreSQL store."""
    if getattr(request, "param", "sqlite") == "postgresql":
        return make_settings(RELAY_STORE=request.getfixturevalue("pg_url"))
    return make_settings()


@pytest.fixture
def jobs(settings: Settings, relay_home: Path, workdir: Path) -> Iterator[Jobs]:
    runner = Jobs(relay_home, workdir)
    yield runner
    runner.close()


DashboardFactory = Callable[..., TestClient]


@pytest.fixture
def dashboard(settings: Settings) -> Iterator[DashboardFactory]:
    """A TestClient on the dashboard; keyword arguments go to `build_app` (access, feed_max_s, ...)."""
    clients: list[TestClient] = []

    def make(**kwargs: Any) -> TestClient:
        access = kwargs.pop("access", Access())
        client = TestClient(build_app(settings, access=access, **kwargs), base_url=BASE_URL)
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


def csrf_of(client: TestClient) -> str:
    """The CSRF token the dashboard gave this browser (set as a cookie by any page)."""
    client.get("/jobs", headers=HTML)
    token = client.cookies.get("relay_csrf")
    assert token
    return token
