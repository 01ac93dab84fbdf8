"""The dashboard's login with named tokens, through real HTTP against `relay dashboard` (and `/ui` of the server).

The dashboard is admin-only: it shows every principal's work, so once config names a token (of any role)
it asks for a login on loopback too, and only an admin's token (or the one `--token`) opens it. The
README's own example names only `user` tokens: that dashboard opens to nobody until an admin is named.
Every route the app has is tried, read from the app itself, so a route added later is covered too.
"""

from __future__ import annotations

import http.client
import os
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.routing import Mount, Route
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from relay.config import Settings
from relay.store import Store
from relay.tracker import TaskStore, resolve_project
from relay.web import Access, build_app
from relay.web.security import SESSION_LABEL
from tests.conftest import SettingsFactory
from tests.web.conftest import HTML, RELAY, Jobs, wait_until
from tests.web.test_browser import UI_TIMEOUT_MS, browser  # noqa: F401 (the real Chromium fixture)

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef"
ROOT = "root-token-0123456789abcdef"
TOKEN_ENV = {"RELAY_TOKEN_ALICE": ALICE, "RELAY_TOKEN_BOB": BOB, "RELAY_TOKEN_ROOT": ROOT}
# The README's example, for two people: named tokens, each of the default role `user`.
README_TOKENS = """
[server.tokens.alice]
token_env = "RELAY_TOKEN_ALICE"
role = "user"
[server.tokens.bob]
token_env = "RELAY_TOKEN_BOB"
"""
WITH_ADMIN = README_TOKENS + '[server.tokens.root]\ntoken_env = "RELAY_TOKEN_ROOT"\nrole = "admin"\n'
BOBS_JOB = "bbbb0001"
BOBS_PROMPT = "the secret plan of bob 7731"  # nothing HTML escapes: a leak shows verbatim
# Values for a route's path parameters: bob's job wherever a job is named.
PATH_VALUES = {"job_id": BOBS_JOB, "thread_id": "t0001", "task_id": "rl-0001"}


def _seed_bobs_job(relay_home: Path) -> None:
    store = Store(relay_home / "relay.db")
    try:
        store.insert_job(BOBS_JOB, "claude", "cli", {"prompt": BOBS_PROMPT}, None, "/w", principal="bob")
        store.finish_job(BOBS_JOB, "completed", exit_code=0, result={}, error=None, session_id=None, model=None)
    finally:
        store.close()


def app_routes(settings: Settings) -> list[tuple[str, str, bool]]:
    """(method, path, public) for every route the dashboard's app serves, its path parameters filled in."""
    app: Any = build_app(settings)
    found: list[tuple[str, str, bool]] = []
    for route in app.app.routes:
        if isinstance(route, Route):
            path = re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: PATH_VALUES[m.group(1)], route.path)
            found += [(method, path, path == "/login") for method in sorted(route.methods or ())]
        elif isinstance(route, Mount) and route.path == "/static":
            found.append(("GET", "/static/app.js", True))
        else:  # a WebSocket route, or a mount of something else: this test must learn to try it
            pytest.fail(f"teach this test the dashboard's new kind of route: {route!r}")
    return found


class Served:
    """`relay dashboard` (or `relay serve --http`, the dashboard under `prefix`) on a free loopback port, and plain
    HTTP requests to it (no redirects followed)."""

    def __init__(self, home: Path, cwd: Path, command: tuple[str, ...], prefix: str = "") -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.prefix = prefix
        self.log = home / "served.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [RELAY, *command, "--port", str(self.port)],
                env={**os.environ, "RELAY_HOME": str(home), **TOKEN_ENV},
                cwd=str(cwd),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )

        def listening() -> bool:
            assert self.proc.poll() is None, self.log.read_text()
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", self.port)) == 0

        wait_until(listening, what="relay dashboard to listen")

    def request(
        self, method: str, path: str, headers: dict[str, str] | None = None, form: str | None = None
    ) -> tuple[int, http.client.HTTPMessage, str]:
        """Status, headers and body (not read from an event stream, which would not end)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            sent = {"host": f"127.0.0.1:{self.port}", **(headers or {})}
            if form is not None:
                sent["content-type"] = "application/x-www-form-urlencoded"
            conn.request(method, self.prefix + path, body=form, headers=sent)
            resp = conn.getresponse()
            streaming = "text/event-stream" in resp.headers.get("content-type", "")
            body = "" if streaming or method == "HEAD" else resp.read().decode("utf-8", "replace")
            return resp.status, resp.headers, body
        finally:
            conn.close()

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


@pytest.fixture
def serve(relay_home: Path, workdir: Path) -> Iterator[Any]:
    started: list[Served] = []

    def make(*command: str, prefix: str = "") -> Served:
        started.append(Served(relay_home, workdir, command or ("dashboard",), prefix))
        return started[-1]

    yield make
    for one in started:
        one.close()


def _refused(status: int, headers: http.client.HTTPMessage) -> bool:
    """A refusal: 401, or (a browser's page) 303 to the login form."""
    return status == 401 or (
        status == 303 and re.match(r"(/ui)?/login\?next=", headers.get("location", "")) is not None
    )


def _csrf(served: Served) -> str:
    """A CSRF cookie from the public login form (every page sets one)."""
    _, headers, _ = served.request("GET", "/login", HTML)
    found = re.search(r"relay_csrf=(\w+)", headers.get("set-cookie", ""))
    assert found, headers
    return found.group(1)


def _open_routes(served: Served, settings: Settings) -> list[str]:
    """Every route of the app, tried with no login three ways (a script, a browser, JSON): the ones that answered."""
    routes = app_routes(settings)
    assert {path for _, path, public in routes if not public} >= {"/jobs", f"/jobs/{BOBS_JOB}/cancel", "/audit"}
    answered: list[str] = []
    for method, path, public in routes:
        for headers in ({}, HTML, {"accept": "application/json"}):
            status, got, body = served.request(method, path, headers, form="" if method == "POST" else None)
            if BOBS_PROMPT in body or not (public or _refused(status, got)):
                answered.append(f"{method} {path} {headers} -> {status}")
    return answered


def test_with_only_user_tokens_configured_every_route_of_the_served_dashboard_wants_a_login(
    make_settings: SettingsFactory, relay_home: Path, serve: Any
) -> None:
    settings = make_settings(README_TOKENS, **TOKEN_ENV)
    _seed_bobs_job(relay_home)
    served = serve()
    assert _open_routes(served, settings) == []
    status, _, login_page = served.request("GET", "/login", HTML)  # public, and says why nobody may log in
    assert status == 200 and "No token opens this dashboard" in login_page


def test_under_ui_of_the_http_server_only_user_tokens_leave_the_dashboard_closed_on_loopback(
    make_settings: SettingsFactory, relay_home: Path, serve: Any
) -> None:
    settings = make_settings(README_TOKENS, **TOKEN_ENV)
    _seed_bobs_job(relay_home)
    served = serve("serve", "--http", prefix="/ui")
    assert _open_routes(served, settings) == []
    status, _, _ = served.request("GET", "/jobs", {"authorization": f"Bearer {ALICE}"})
    assert status == 401


def test_a_wrong_token_a_user_token_and_a_forged_cookie_are_each_refused(
    make_settings: SettingsFactory, relay_home: Path, serve: Any
) -> None:
    import hashlib
    import hmac

    make_settings(README_TOKENS, **TOKEN_ENV)
    _seed_bobs_job(relay_home)
    served = serve()
    for token in ("not-a-token-at-all", ALICE):
        status, headers, body = served.request("POST", "/login", HTML, form=f"token={token}&next=%2Fjobs")
        assert status == 401 and "relay_dashboard=" not in headers.get("set-cookie", ""), token
        assert BOBS_PROMPT not in body
        status, _, body = served.request("GET", "/jobs", {"authorization": f"Bearer {token}"})
        assert status == 401 and BOBS_PROMPT not in body
    forged = hmac.new(ALICE.encode(), SESSION_LABEL, hashlib.sha256).hexdigest()  # what her login would have set
    status, _, body = served.request("GET", "/jobs", {"cookie": f"relay_dashboard={forged}"})
    assert status == 401 and BOBS_PROMPT not in body
    status, _, body = served.request("GET", "/jobs", {"authorization": f"Bearer {ALICE}", "accept": "application/json"})
    assert status == 401 and '"code":"AUTH_INVALID"' in body.replace(" ", "") and "admin" in body


def test_a_user_token_cannot_see_or_cancel_another_principals_job(
    make_settings: SettingsFactory, relay_home: Path, workdir: Path, serve: Any
) -> None:
    make_settings(README_TOKENS, **TOKEN_ENV)
    _seed_bobs_job(relay_home)
    jobs = Jobs(relay_home, workdir)
    try:
        running = jobs.start("the local user's job [[fake:hang]]", **TOKEN_ENV)
        served = serve()
        alice = {"authorization": f"Bearer {ALICE}"}
        for path in (f"/jobs/{BOBS_JOB}", f"/jobs/{BOBS_JOB}/transcript", f"/events/jobs/{BOBS_JOB}", "/events/jobs"):
            status, _, body = served.request("GET", path, alice)
            assert status == 401 and BOBS_PROMPT not in body, path
        csrf = _csrf(served)
        status, _, _ = served.request(
            "POST",
            f"/jobs/{running.job.id}/cancel",
            {**alice, "cookie": f"relay_csrf={csrf}", "origin": f"http://127.0.0.1:{served.port}"},
            form=f"csrf={csrf}",
        )
        assert status == 401
        assert jobs.get(running.job.id).status in ("queued", "running")
    finally:
        jobs.close()


def test_an_admins_login_opens_every_page_and_the_dashboard_acts_as_that_admin(
    make_settings: SettingsFactory, relay_home: Path, workdir: Path, serve: Any
) -> None:
    settings = make_settings(WITH_ADMIN, **TOKEN_ENV)
    _seed_bobs_job(relay_home)
    tasks = TaskStore.open(settings)
    project = resolve_project(workdir)
    try:
        task = tasks.create(project, "write the docs")
    finally:
        tasks.close()
    served = serve()
    status, headers, _ = served.request("POST", "/login", HTML, form=f"token={ROOT}&next=%2Fjobs")
    cookie = re.search(r"relay_dashboard=(\w+)", headers.get("set-cookie", ""))
    assert status == 303 and cookie is not None and ROOT not in headers.get("set-cookie", "")
    session = f"relay_dashboard={cookie.group(1)}"
    status, _, page = served.request("GET", f"/jobs/{BOBS_JOB}", {**HTML, "cookie": session})
    assert status == 200 and BOBS_PROMPT in page
    csrf = _csrf(served)
    status, _, _ = served.request(
        "POST",
        f"/tasks/{task.id}/status",
        {"cookie": f"{session}; relay_csrf={csrf}", "origin": f"http://127.0.0.1:{served.port}"},
        form=f"csrf={csrf}&status=in_progress&project={workdir}",
    )
    assert status == 303
    tasks = TaskStore.open(settings)
    try:
        changed = tasks.get(project, task.id)
    finally:
        tasks.close()
    assert (changed.status, changed.changed_by) == ("in_progress", "root")


def test_a_dashboard_built_without_its_config_tokens_still_closes_on_them(make_settings: SettingsFactory) -> None:
    settings = make_settings(README_TOKENS, **TOKEN_ENV)
    with TestClient(build_app(settings, access=Access()), base_url="http://127.0.0.1:8766") as client:
        assert client.get("/jobs").status_code == 401
        with pytest.raises(WebSocketDisconnect) as closed, client.websocket_connect("ws://127.0.0.1:8766/jobs"):
            pass
    assert closed.value.code == 1008  # a WebSocket is refused at the door too (policy violation), not by the router


@pytest.mark.slow
def test_in_a_real_browser_the_readme_config_shows_a_login_a_user_token_cannot_pass_and_an_admins_can(
    browser: Any,  # noqa: F811 (the fixture imported above)
    make_settings: SettingsFactory,
    relay_home: Path,
    serve: Any,
) -> None:
    from playwright.sync_api import expect

    make_settings(README_TOKENS, **TOKEN_ENV)
    _seed_bobs_job(relay_home)
    closed = serve()
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"http://127.0.0.1:{closed.port}/jobs/{BOBS_JOB}")
    expect(page).to_have_url(re.compile(r"/login\?next="), timeout=UI_TIMEOUT_MS)
    expect(page.get_by_role("alert")).to_contain_text("No token opens this dashboard")
    page.get_by_label("Token").fill(ALICE)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("alert").last).to_contain_text("a user's token", timeout=UI_TIMEOUT_MS)
    assert BOBS_PROMPT not in page.content() and ALICE not in page.url
    assert "relay_dashboard" not in {c["name"] for c in context.cookies()}
    context.close()

    make_settings(WITH_ADMIN, **TOKEN_ENV)
    opened = serve()
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"http://127.0.0.1:{opened.port}/jobs")
    page.get_by_label("Token").fill(ROOT)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(f"http://127.0.0.1:{opened.port}/jobs", timeout=UI_TIMEOUT_MS)
    expect(page.locator(f"#job-{BOBS_JOB}")).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(page.locator("#live-state")).to_have_text("live", timeout=UI_TIMEOUT_MS)  # the SSE stream opened too
    session = {c["name"]: c for c in context.cookies()}["relay_dashboard"]
    assert session["httpOnly"] and session["sameSite"] == "Strict" and ROOT not in session["value"]
    context.close()
