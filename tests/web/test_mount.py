"""The dashboard under /ui of relay's Streamable HTTP server: its own login, the MCP endpoint unchanged."""

from __future__ import annotations

from starlette.testclient import TestClient

from relay.config import Settings
from relay.server.app import build_server
from relay.server.http import build_http_app
from relay.web import for_server
from tests.web.conftest import HTML


def test_the_http_server_serves_the_dashboard_under_ui_behind_the_same_token(settings: Settings) -> None:
    app = build_http_app(build_server(settings), "0.0.0.0", 8765, "s3cret", for_server)
    with TestClient(app, base_url="http://127.0.0.1:8765") as client:
        first = client.get("/ui/jobs", headers=HTML, follow_redirects=False)
        assert first.status_code == 303 and first.headers["location"] == "/ui/login?next=%2Fjobs"
        login = client.post("/ui/login", data={"token": "s3cret", "next": "/jobs"}, follow_redirects=False)
        assert login.headers["location"] == "/ui/jobs" and "Path=/ui" in login.headers["set-cookie"]
        page = client.get("/ui/jobs", headers=HTML)
        assert page.status_code == 200 and 'href="/ui/costs"' in page.text and 'src="/ui/static/app.js"' in page.text
        assert client.get("/ui/static/app.js").status_code == 200
        mcp = client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert mcp.status_code == 401  # the MCP endpoint still wants its bearer token
        assert client.get("/ui/jobs", headers={**HTML, "host": "evil.example:8765"}).status_code == 421


def test_on_loopback_the_dashboard_under_ui_needs_no_login(settings: Settings) -> None:
    app = build_http_app(build_server(settings), "127.0.0.1", 8765, None, for_server)
    with TestClient(app, base_url="http://127.0.0.1:8765") as client:
        page = client.get("/ui/jobs", headers=HTML)
        assert page.status_code == 200 and "<h1>Jobs</h1>" in page.text
