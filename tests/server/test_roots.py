"""Allowed roots from the client: the folders an MCP client declares (`roots`) are allowed job folders too."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.types import ListRootsResult, Root

from relay.config import Settings
from relay.server import roots
from relay.server.app import build_server
from tests.conftest import SettingsFactory

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore:The roots capability is deprecated")]
RELAY = str(Path(sys.executable).with_name("relay"))

ROOTS_WAIT_S = 10.0


class Folders:
    """What the test client answers to roots/list (changeable), and how often it was asked."""

    def __init__(self, *paths: Path) -> None:
        self.paths = list(paths)
        self.asked = 0

    async def __call__(self, _context: Any) -> ListRootsResult:
        self.asked += 1
        return ListRootsResult(roots=[Root(uri=p.as_uri(), name=p.name) for p in self.paths])  # pyright: ignore[reportArgumentType]


async def answered(settings: Settings, count: int) -> None:
    """Wait (bounded) until the server has recorded the client's `count`-th roots/list answer."""
    assert await anyio.to_thread.run_sync(settings.client_roots.wait_updates, count, ROOTS_WAIT_S)


async def delegate(c: Client, cwd: Path) -> dict[str, Any]:
    with anyio.fail_after(30):
        result = await c.call_tool("delegate", {"prompt": "hi", "cwd": str(cwd), "mode": "sync"})
    assert result.structured_content is not None
    return result.structured_content


async def status_roots(c: Client) -> list[tuple[str, str]]:
    with anyio.fail_after(30):
        result = await c.call_tool("status", {})
    assert result.structured_content is not None
    return [(r["path"], r["source"]) for r in result.structured_content["allowed_roots"]]


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A project outside relay's configured root (the work folder)."""
    path = tmp_path / "projects" / "app"
    path.mkdir(parents=True)
    return path.resolve()


async def test_a_job_runs_in_the_clients_root_outside_the_configured_roots(
    make_settings: SettingsFactory, workdir: Path, elsewhere: Path
) -> None:
    settings = make_settings()
    folders = Folders(elsewhere)
    async with Client(build_server(settings), mode="legacy", list_roots_callback=folders) as c:
        await answered(settings, 1)
        env = await delegate(c, elsewhere)
        assert (env["status"], env["error"]) == ("completed", None)
        assert await status_roots(c) == [
            (str(workdir.resolve()), "the folder relay started in"),
            (str(elsewhere), "the MCP client's roots (mcp)"),
        ]
    assert folders.asked == 1


async def test_when_the_client_changes_its_roots_the_next_job_sees_the_change(
    make_settings: SettingsFactory, tmp_path: Path, elsewhere: Path
) -> None:
    settings = make_settings()
    other = tmp_path / "other"
    other.mkdir()
    folders = Folders(elsewhere)
    async with Client(build_server(settings), mode="legacy", list_roots_callback=folders) as c:
        await answered(settings, 1)
        assert (await delegate(c, elsewhere))["status"] == "completed"
        folders.paths = [other]
        await c.send_roots_list_changed()
        await answered(settings, 2)
        refused = await delegate(c, elsewhere)
        assert refused["error"]["code"] == "CWD_NOT_ALLOWED"
        assert str(other.resolve()) in refused["error"]["hint"] and "allowed_roots" in refused["error"]["hint"]
        assert (await delegate(c, other))["status"] == "completed"
    assert folders.asked == 2


async def test_without_client_roots_a_folder_outside_the_configured_roots_is_refused_with_how_to_add_it(
    make_settings: SettingsFactory, workdir: Path, elsewhere: Path
) -> None:
    settings = make_settings()
    async with Client(build_server(settings), mode="legacy") as c:  # no roots capability: never asked
        refused = await delegate(c, elsewhere)
        assert refused["error"]["code"] == "CWD_NOT_ALLOWED"
        assert str(workdir.resolve()) in refused["error"]["hint"] and "allowed_roots" in refused["error"]["hint"]
        assert await status_roots(c) == [(str(workdir.resolve()), "the folder relay started in")]
    assert settings.client_roots.updates == 0


async def test_client_roots_can_be_turned_off_and_configured_roots_say_where_they_came_from(
    make_settings: SettingsFactory, elsewhere: Path, tmp_path: Path
) -> None:
    settings = make_settings(RELAY_CLIENT_ROOTS="0", RELAY_ALLOWED_ROOTS=str(tmp_path / "projects"))
    folders = Folders(elsewhere)
    async with Client(build_server(settings), mode="legacy", list_roots_callback=folders) as c:
        assert await status_roots(c) == [(str((tmp_path / "projects").resolve()), "RELAY_ALLOWED_ROOTS")]
    assert folders.asked == 0


def test_over_http_client_roots_are_off_unless_configured(make_settings: SettingsFactory) -> None:
    assert roots.enabled(make_settings(), http=False) is True
    assert roots.enabled(make_settings(), http=True) is False
    assert roots.enabled(make_settings("[security]\nclient_roots = true\n"), http=True) is True
    assert make_settings("[security]\nallowed_roots = ['/tmp']\n").configured_roots_from == (
        "config.toml [security] allowed_roots"
    )


def test_only_existing_local_folders_among_the_roots_count(tmp_path: Path) -> None:
    (tmp_path / "a file").write_text("x")
    (tmp_path / "dir with space").mkdir()
    given = [
        Root(uri=(tmp_path / "dir with space").as_uri()),  # pyright: ignore[reportArgumentType]
        Root(uri=(tmp_path / "a file").as_uri()),  # pyright: ignore[reportArgumentType]
        Root(uri=(tmp_path / "missing").as_uri()),  # pyright: ignore[reportArgumentType]
        Root(uri="file://otherhost/srv"),  # pyright: ignore[reportArgumentType]
    ]
    assert roots.folders(given) == ((tmp_path / "dir with space").resolve(),)


@pytest.mark.parametrize("front", ["1", "0"])
async def test_over_stdio_the_first_call_already_runs_in_a_root_the_client_declared(
    make_settings: SettingsFactory, relay_home: Path, workdir: Path, elsewhere: Path, front: str
) -> None:
    """Through the stdio front (or without it), a delegate sent right after initialize waits for roots/list."""
    make_settings()  # config.toml with the fake claude
    env = {**os.environ, "RELAY_HOME": str(relay_home), "RELAY_STDIO_FRONT": front}
    params = StdioServerParameters(command=RELAY, args=["serve"], env=env, cwd=str(workdir))
    folders = Folders(elsewhere)
    with anyio.fail_after(60):
        async with Client(params, mode="legacy", list_roots_callback=folders) as c:
            env_ = await delegate(c, elsewhere)
            listed = await status_roots(c)
    assert (env_["status"], env_["output"]) == ("completed", "hi from mock")
    assert (str(elsewhere), "the MCP client's roots (mcp)") in listed
    assert folders.asked == 1
