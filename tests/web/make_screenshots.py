"""Screenshots of every dashboard page, light and dark, for docs/dashboard/ (run: python -m tests.web.make_screenshots).

Seeds a throwaway RELAY_HOME with jobs run by the fake claude, a thread and some tasks, serves
`relay dashboard` on it and photographs each page in headless Chromium at 1280 px (and the jobs
page at phone width).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from relay.config import load_settings
from relay.threads import NewTurn, Threads, new_thread_id
from relay.tracker import TaskStore, resolve_project
from tests.conftest import kill_jobs_under

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "docs" / "dashboard"
RELAY = str(Path(sys.executable).with_name("relay"))
PAGES = ("jobs", "workers", "job", "costs", "threads", "thread", "tasks", "servers", "audit")


def main() -> None:
    from playwright.sync_api import sync_playwright

    root = Path(tempfile.mkdtemp(prefix="relay-shots-"))
    home, work = root / "home", root / "work"
    home.mkdir()
    work.mkdir()
    (home / "config.toml").write_text(f'[agents.claude]\ncommand = "{REPO / "tests" / "fakes" / "claude"}"\n')
    env = {**os.environ, "RELAY_HOME": str(home)}
    for prompt in ("Review the diff in src/relay/web", "Summarise the failing tests", "Write the changelog entry"):
        subprocess.run([RELAY, "run", "claude", prompt], env=env, cwd=work, capture_output=True, check=False)
    subprocess.run(
        [RELAY, "run", "claude", "Refactor the parser [[fake:replay=claude_stream_error_500]]"],
        env=env,
        cwd=work,
        capture_output=True,
        check=False,
    )
    workers = [
        subprocess.Popen(
            [RELAY, "worker", "--name", "build-box-1", "--slots", "4", "--labels", "gpu,big-repo"],
            env=env,
            cwd=work,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ),
        subprocess.Popen(
            [RELAY, "worker", "--name", "laptop", "--agents", "claude"],
            env=env | {"RELAY_LEASE_S": "1"},
            cwd=work,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ),
    ]
    time.sleep(2)
    subprocess.run(
        [RELAY, "run", "claude", "Triage the flaky test"],
        env=env | {"RELAY_RUN_JOBS": "0"},
        cwd=work,
        capture_output=True,
        check=False,
    )
    workers[1].kill()  # stops renewing its lease: the page flags it stale
    running = subprocess.Popen(
        [RELAY, "run", "claude", "Port the importer to the new API [[fake:hang]]"],
        env=env,
        cwd=work,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    settings = load_settings({"RELAY_HOME": str(home)}, cwd=work)
    threads = Threads.open(settings)
    thread = threads.add_turns(
        new_thread_id(),
        [
            NewTurn("user", "Is the retry loop in connection.py safe?"),
            NewTurn("assistant", "Mostly; the backoff is unbounded.", provider="openai", model="gpt-5"),
        ],
        tool="chat",
        title="retry loop review",
    )
    threads.add_turns(
        thread.id, [NewTurn("assistant", "Agreed; cap it at 30 s.", provider="xai", model="grok-4")], tool="consensus"
    )
    threads.close()
    store = TaskStore.open(settings)
    project = resolve_project(work)
    base = store.create(project, "Design the audit view")
    top = store.create(project, "Ship the dashboard")
    store.add_dependency(project, top.id, base.id)
    store.close_task(project, store.create(project, "Pick the chart style").id)
    store.close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([RELAY, "dashboard", "--port", str(port)], env=env, cwd=work)
    try:
        time.sleep(2)
        job_id = next(
            line.split()[0]
            for line in subprocess.run(
                [RELAY, "jobs"], env=env, cwd=work, capture_output=True, text=True, check=False
            ).stdout.splitlines()[1:]
            if "Review" in line
        )
        urls = {
            "jobs": "/jobs",
            "workers": "/workers",
            "job": f"/jobs/{job_id}",
            "costs": "/costs",
            "threads": "/threads",
            "thread": f"/threads/{thread.id}",
            "tasks": f"/tasks?project={work}",
            "servers": "/servers",
            "audit": "/audit",
        }
        OUT.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(headless=True, executable_path=shutil.which("chromium"), args=["--no-sandbox"])
            for scheme in ("light", "dark"):
                page = browser.new_page(viewport={"width": 1280, "height": 800}, color_scheme=scheme)
                for name in PAGES:
                    page.goto(f"http://127.0.0.1:{port}{urls[name]}")
                    page.wait_for_timeout(600)
                    page.screenshot(path=str(OUT / f"{name}-{scheme}.png"), full_page=True)
                page.close()
            phone = browser.new_page(viewport={"width": 390, "height": 800}, color_scheme="light")
            phone.goto(f"http://127.0.0.1:{port}/jobs")
            phone.wait_for_timeout(600)
            phone.screenshot(path=str(OUT / "jobs-phone.png"), full_page=True)
            browser.close()
    finally:
        server.terminate()
        running.terminate()
        for worker in workers:
            worker.terminate()
            worker.wait(30)
        server.wait(30)
        running.wait(30)
        kill_jobs_under(home)  # the running job outlives its `relay run`, as jobs do
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
