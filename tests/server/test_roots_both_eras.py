"""Client roots on both eras of MCP: a folder the client declares is an allowed job folder however it connects.

`legacy` opens with initialize, and relay asks `roots/list` as a request of its own; the default
speaks 2026-07-28, where a server sends no requests: the call answers `InputRequiredResult` with a
`roots/list` input request, the client's retry carries its roots, and relay keeps them for a while.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.types import ErrorData, InputRequiredResult, ListRootsRequest, ListRootsResult, Root

from relay.server import roots
from relay.server.app import build_server
from tests.conftest import SettingsFactory

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore:The roots capability is deprecated")]

# `legacy`: the 2025 handshake; `auto`: the SDK's default, which discovers and speaks 2026-07-28.
ERAS = pytest.mark.parametrize("era", ["legacy", "auto"])
ROOTS_WAIT_S = 10.0


class Folders:
    """What the test client answers to roots/list, and how often it was asked."""

    def __init__(self, *paths: Path) -> None:
        self.paths = list(paths)
        self.asked = 0

    async def __call__(self, context: ClientRequestContext) -> ListRootsResult | ErrorData:
        self.asked += 1
        return ListRootsResult(roots=[Root(uri=p.as_uri(), name=p.name) for p in self.paths])  # pyright: ignore[reportArgumentType]


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A project outside relay's configured root (the work folder)."""
    path = tmp_path / "projects" / "app"
    path.mkdir(parents=True)
    return path.resolve()


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder neither configured nor declared by the client."""
    path = tmp_path / "other"
    path.mkdir()
    return path.resolve()


async def delegate(c: Client, cwd: Path) -> dict[str, Any]:
    with anyio.fail_after(30):
        result = await c.call_tool("delegate", {"prompt": "hi", "cwd": str(cwd), "mode": "sync"})
    assert result.structured_content is not None
    return result.structured_content


async def settled(c: Client, era: str) -> None:
    """On the legacy era relay asks roots/list after initialize: wait (bounded) for the first answer."""
    if era == "legacy":
        await c.call_tool("status", {})


@ERAS
async def test_a_root_the_client_declares_allows_a_folder_inside_it_and_not_one_outside(
    make_settings: SettingsFactory, elsewhere: Path, outside: Path, era: Any
) -> None:
    settings = make_settings()
    folders = Folders(elsewhere.parent)
    inside = elsewhere  # projects/app, under the declared projects/
    async with Client(build_server(settings), mode=era, list_roots_callback=folders) as c:
        with anyio.fail_after(ROOTS_WAIT_S):
            await settled(c, era)
        allowed = await delegate(c, inside)
        refused = await delegate(c, outside)
    assert (allowed["status"], allowed["error"]) == ("completed", None)
    assert refused["error"]["code"] == "CWD_NOT_ALLOWED"
    assert str(elsewhere.parent) in refused["error"]["hint"]
    assert folders.asked == 1  # the new era keeps the answer: the second call does not ask again


async def test_on_the_new_era_the_call_asks_for_the_roots_in_its_result_and_the_retry_brings_them(
    make_settings: SettingsFactory, elsewhere: Path
) -> None:
    settings = make_settings()
    args = {"prompt": "hi", "cwd": str(elsewhere), "mode": "sync"}
    async with Client(build_server(settings), list_roots_callback=Folders(elsewhere)) as c:
        with anyio.fail_after(30):
            asked = await c.session.call_tool("delegate", args, allow_input_required=True)
            assert isinstance(asked, InputRequiredResult) and asked.input_requests is not None
            [(key, request)] = asked.input_requests.items()
            assert isinstance(request, ListRootsRequest)
            answer = ListRootsResult(roots=[Root(uri=elsewhere.as_uri())])  # pyright: ignore[reportArgumentType]
            done = await c.session.call_tool("delegate", args, input_responses={key: answer})
    assert done.structured_content is not None and done.structured_content["status"] == "completed"


async def test_on_the_new_era_roots_are_kept_per_client_for_a_while_then_asked_again(
    make_settings: SettingsFactory, elsewhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings()
    folders = Folders(elsewhere)
    args = {"prompt": "hi", "cwd": str(elsewhere), "mode": "sync"}
    async with Client(build_server(settings), list_roots_callback=folders) as c:
        assert (await delegate(c, elsewhere))["status"] == "completed"
        assert (await delegate(c, elsewhere))["status"] == "completed"
        assert folders.asked == 1
        with monkeypatch.context() as m, anyio.fail_after(30):  # another client of the same principal is asked
            m.setattr(roots, "client_name", lambda _ctx: "another-client")  # pyright: ignore[reportUnknownLambdaType]
            asked = await c.session.call_tool("delegate", args, allow_input_required=True)
        assert isinstance(asked, InputRequiredResult) and asked.input_requests is not None
        assert list(asked.input_requests) == [roots.ROOTS_INPUT_KEY]
        later = roots.now() + roots.SESSIONLESS_ROOTS_TTL_S + 1
        monkeypatch.setattr(roots, "now", lambda: later)
        folders.paths = []  # the client dropped the folder: once the kept answer is stale, the job is refused
        refused = await delegate(c, elsewhere)
    assert folders.asked == 2 and refused["error"]["code"] == "CWD_NOT_ALLOWED", refused


async def test_on_the_new_era_only_a_client_that_declared_roots_is_asked_and_over_http_only_when_configured(
    make_settings: SettingsFactory, elsewhere: Path
) -> None:
    declared, undeclared_http, configured_http = Folders(elsewhere), Folders(elsewhere), Folders(elsewhere)
    async with Client(build_server(make_settings())) as c:  # no roots capability: never asked
        assert (await delegate(c, elsewhere))["error"]["code"] == "CWD_NOT_ALLOWED"
    async with Client(build_server(make_settings(), port=1), list_roots_callback=undeclared_http) as c:  # as over HTTP
        assert (await delegate(c, elsewhere))["error"]["code"] == "CWD_NOT_ALLOWED"
    settings = make_settings(RELAY_CLIENT_ROOTS="1")
    async with Client(build_server(settings, port=1), list_roots_callback=configured_http) as c:
        assert (await delegate(c, elsewhere))["status"] == "completed"
    async with Client(build_server(make_settings()), list_roots_callback=declared) as c:
        assert (await delegate(c, elsewhere))["status"] == "completed"
    assert (declared.asked, undeclared_http.asked, configured_http.asked) == (1, 0, 1)
