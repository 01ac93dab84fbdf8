"""Land and Discard from a worktree job's page in a real headless Chromium (Playwright) against `relay dashboard`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SettingsFactory
from tests.web.test_browser import UI_TIMEOUT_MS, _serve, browser  # noqa: F401 (the real Chromium fixture)
from tests.web.test_land_page import GATED, worktree_job
from tests.workspaces.conftest import git, one_commit_repo

pytestmark = pytest.mark.slow


@pytest.fixture
def gated(make_settings: SettingsFactory, relay_home: Path, workdir: Path) -> Iterator[str]:
    """`relay dashboard` on a home whose config names the gate, over a one-commit checkout."""
    make_settings(GATED)
    one_commit_repo(workdir)
    proc, port = _serve(relay_home, workdir)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(30)


def test_land_from_the_job_page_moves_main_and_shows_the_gate_and_discard_removes_worktree_and_branch(
    browser: Any,  # noqa: F811 (the fixture imported above)
    gated: str,
    relay_home: Path,
    workdir: Path,
) -> None:
    from playwright.sync_api import expect

    landing = worktree_job(relay_home, workdir, "app.txt~landed\\n")
    dropped = worktree_job(relay_home, workdir, "other.txt~not wanted\\n")
    page = browser.new_page()
    try:
        page.goto(f"{gated}/jobs")
        expect(page.locator(f"#job-{landing} td.cwd")).to_have_text(
            f"{workdir.name} @ relay/{landing} \u2192 main", timeout=UI_TIMEOUT_MS
        )
        page.goto(f"{gated}/jobs/{landing}")
        page.locator("#land-form").get_by_role("button", name="Land").click()
        expect(page.locator("#land-said")).to_contain_text("Landed", timeout=UI_TIMEOUT_MS)
        expect(page.locator("#land-output")).to_have_text(f"gate-ran-in-{landing}\n")
        expect(page.locator("#w-state")).to_have_text("landed into main")
        expect(page.locator("#land-form")).to_have_count(0)
        assert git(workdir, "rev-parse", "main") == git(workdir, "rev-parse", f"relay/{landing}")
        assert (workdir / "app.txt").read_text() == "landed\n"

        page.goto(f"{gated}/jobs/{dropped}")
        page.locator("#discard-form").get_by_role("button").click()
        expect(page.locator("#w-state")).to_have_text("discarded", timeout=UI_TIMEOUT_MS)
        expect(page.locator("#discard-form")).to_have_count(0)
        assert page.url == f"{gated}/jobs/{dropped}"
        assert not (relay_home / "worktrees" / dropped).exists()
        assert not git(workdir, "branch", "--list", f"relay/{dropped}")
        assert "other.txt" not in git(workdir, "ls-tree", "--name-only", "main")
    finally:
        page.close()
