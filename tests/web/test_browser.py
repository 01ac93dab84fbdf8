"""The dashboard in a real headless Chromium, driven by Playwright, against `relay dashboard` and fake agents.

The browser comes from Debian's `chromium` package (installed here when running as root and missing), or
from Playwright's own download elsewhere. Under CI=true a missing browser fails the test; it never skips.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay.runtime import procinfo
from tests.web.conftest import RELAY, Jobs, Workers, wait_until

pytestmark = pytest.mark.slow

# Longest any expectation in the page may take (generous: the machine is shared).
UI_TIMEOUT_MS = 30_000


def _install_debian_chromium() -> str | None:
    """Install Debian's chromium when running as root (apt's lists are refreshed only if the first try fails)."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return None
    install = ["apt-get", "install", "-y", "-q", "chromium"]
    if subprocess.run(install, capture_output=True, timeout=900, check=False).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, timeout=900, check=False)
        subprocess.run(install, capture_output=True, timeout=900, check=False)
    return shutil.which("chromium")


def _browser_path() -> str | None:
    """Debian's chromium if present (or installable); None means Playwright's own browser should be used."""
    return shutil.which("chromium") or shutil.which("chromium-browser") or _install_debian_chromium()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:  # pragma: no cover - playwright is a pinned test dependency
        pytest.fail(f"playwright is not installed: {exc}")
    path = _browser_path()
    if path is None:
        subprocess.run([sys.executable, "-m", "playwright", "install", "chromium"], capture_output=True, timeout=900)
    with sync_playwright() as pw:
        try:
            launched = pw.chromium.launch(headless=True, executable_path=path, args=["--no-sandbox"])
        except Exception as exc:
            if os.environ.get("CI") == "true":
                pytest.fail(f"no Chromium could be had for the browser tests: {exc}")
            pytest.skip(f"no Chromium on this machine (the browser tier fails under CI=true): {exc}")
        yield launched
        launched.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(home: Path, cwd: Path, *extra: str) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    proc = subprocess.Popen(
        [RELAY, "dashboard", "--port", str(port), *extra],
        env={**os.environ, "RELAY_HOME": str(home)},
        cwd=str(cwd),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def listening() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    wait_until(listening, what="relay dashboard to listen")
    return proc, port


@pytest.fixture
def served(jobs: Jobs, relay_home: Path, workdir: Path) -> Iterator[str]:
    proc, port = _serve(relay_home, workdir)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(30)


def test_a_job_started_after_the_page_loaded_appears_live_and_cancel_kills_it(
    browser: Any, served: str, jobs: Jobs, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page = browser.new_page()
    page.goto(f"{served}/jobs")
    expect(page.locator("#live-state")).to_have_text("live", timeout=UI_TIMEOUT_MS)
    pidfile = tmp_path / "pids"
    started = jobs.start(f"a job for the browser [[fake:hang,pidfile={pidfile}]]")
    row = page.locator(f"#job-{started.job.id}")
    expect(row).to_be_visible(timeout=UI_TIMEOUT_MS)  # no reload: it came over SSE
    expect(row.locator(".badge")).to_have_text("running", timeout=UI_TIMEOUT_MS)
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), what="the fake to start")
    pid = int(pidfile.read_text().split()[0])
    row.get_by_role("button", name="Cancel").click()
    expect(page.locator(f"#job-{started.job.id} .badge")).to_have_text("cancelled", timeout=UI_TIMEOUT_MS)
    assert jobs.get(started.job.id).status == "cancelled"
    assert started.proc.wait(30) == 1
    assert not procinfo.is_alive(pid, None)
    page.close()


def test_a_job_page_streams_the_transcript_and_shows_the_end(browser: Any, served: str, jobs: Jobs) -> None:
    from playwright.sync_api import expect

    started = jobs.start("stream me [[fake:sleep=2]]")
    page = browser.new_page()
    page.goto(f"{served}/jobs/{started.job.id}")
    expect(page.locator("#transcript")).to_contain_text("[assistant] hi from mock", timeout=UI_TIMEOUT_MS)
    expect(page.locator("#job-status")).to_have_text("completed", timeout=UI_TIMEOUT_MS)
    expect(page.locator("#envelope")).to_contain_text('"output": "hi from mock"', timeout=UI_TIMEOUT_MS)
    page.close()


def test_beyond_loopback_the_browser_must_log_in_and_a_cross_site_post_is_refused(
    browser: Any, jobs: Jobs, relay_home: Path, workdir: Path
) -> None:
    from playwright.sync_api import expect

    proc, port = _serve(relay_home, workdir, "--host", "0.0.0.0", "--token", "s3cret")
    try:
        started = jobs.start("x [[fake:hang]]")
        context = browser.new_context()
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{port}/jobs")
        expect(page).to_have_url(f"http://127.0.0.1:{port}/login?next=%2Fjobs")
        page.get_by_label("Token").fill("s3cret")
        page.get_by_role("button", name="Log in").click()
        expect(page).to_have_url(f"http://127.0.0.1:{port}/jobs", timeout=UI_TIMEOUT_MS)
        expect(page.locator(f"#job-{started.job.id}")).to_be_visible(timeout=UI_TIMEOUT_MS)
        cookies = {c["name"]: c for c in context.cookies()}
        assert cookies["relay_dashboard"]["httpOnly"] and cookies["relay_dashboard"]["sameSite"] == "Strict"
        assert "s3cret" not in page.url
        # Another site (here: a page on localhost under a different port) posts a cancel form at the dashboard.
        evil = context.new_page()
        evil.set_content(
            f'<form id="f" method="post" action="http://127.0.0.1:{port}/jobs/{started.job.id}/cancel">'
            '<input name="csrf" value="guess"></form>'
        )
        with evil.expect_navigation():
            evil.evaluate("document.getElementById('f').submit()")
        assert "Cross-origin request refused" in evil.content()
        assert jobs.get(started.job.id).status in ("queued", "running")
        context.close()
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_worktree_job_page_shows_its_branch_diffstat_and_the_diff_coloured_and_escaped(
    browser: Any, served: str, jobs: Jobs, relay_home: Path, workdir: Path
) -> None:
    from playwright.sync_api import expect

    from tests.workspaces.conftest import one_commit_repo

    one_commit_repo(workdir)
    done = subprocess.run(
        [RELAY, "run", "claude", "edit [[fake:write=app.txt~<script>window.hit=1</script>\\n]]", "--worktree"],
        env={**os.environ, "RELAY_HOME": str(relay_home)},
        cwd=str(workdir),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    job = jobs.store.list_jobs(limit=1)[0]
    page = browser.new_page()
    page.goto(f"{served}/jobs/{job.id}")
    expect(page.locator("#w-branch")).to_have_text(f"relay/{job.id}", timeout=UI_TIMEOUT_MS)
    expect(page.locator("#w-stat")).to_have_text("1 commits · 1 files · +1 -1")
    added = page.locator("#diff .add", has_text="<script>window.hit=1</script>")
    removed = page.locator("#diff .del", has_text="-one")
    expect(added).to_have_count(1)
    colour = {k: v.evaluate("e => getComputedStyle(e).color") for k, v in {"add": added, "del": removed}.items()}
    context = page.locator("#diff .meta").first.evaluate("e => getComputedStyle(e).color")
    assert len({colour["add"], colour["del"], context}) == 3, colour
    assert page.evaluate("() => window.hit") is None and page.locator("#diff script").count() == 0
    page.close()


def test_the_workers_page_shows_a_worker_live_flags_it_stale_once_killed_and_links_to_the_jobs_it_ran(
    browser: Any, served: str, workers: Workers
) -> None:
    import re

    from playwright.sync_api import expect

    hostile = "<img src=x onerror=window.hit=1>"
    page = browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: dialogs.append(d.message))
    try:
        page.goto(f"{served}/workers")
        expect(page.locator("#live-state")).to_have_text("live", timeout=UI_TIMEOUT_MS)
        proc, worker = workers.start(hostile, "--labels", "gpu", lease_s=2.0)
        row = page.locator("#workers tbody tr", has_text=worker.id)
        expect(row).to_be_visible(timeout=UI_TIMEOUT_MS)  # no reload: it came over SSE
        expect(row.locator("a.name")).to_have_text(hostile)  # shown as text, never as markup
        job = workers.run_job("run by the worker")
        expect(row.locator("td.ran")).to_have_text("1", timeout=UI_TIMEOUT_MS)
        expect(row.locator(".flag")).to_be_hidden()
        proc.kill()  # no word to the store: only its heartbeat stops
        proc.wait(30)
        expect(row).to_have_class(re.compile(r"\bstale\b"), timeout=UI_TIMEOUT_MS)
        expect(row.locator(".flag")).to_have_text("stale: older than its 2 s lease")
        expect(page.locator("#n-stale")).to_have_text("1")
        row.locator("td.ran a").click()
        expect(page.locator(f"#job-{job.id}")).to_be_visible(timeout=UI_TIMEOUT_MS)
        expect(page.locator("#worker-filter strong")).to_have_text(hostile)
        assert page.evaluate("() => window.hit") is None and not dialogs
        assert page.locator("img").count() == 0
    finally:
        page.close()  # its live stream too, so the dashboard can stop
