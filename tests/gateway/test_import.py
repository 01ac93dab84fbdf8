"""import_mcp_server: a project's existing client configs, a git repository's manifest, an MCP registry."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import anyio
import pytest
from mcp import Client

from relay.gateway import ServerRegistry, make_config
from relay.gateway.discover import launch_from_manifest, server_name
from relay.gateway.importer import from_project_files
from relay.server.app import build_server
from tests.conftest import SettingsFactory
from tests.gateway.conftest import GATEWAY_ENV, TOY

pytestmark = pytest.mark.anyio


async def call(c: Client, tool: str, args: dict[str, Any] | None = None) -> tuple[bool, Any]:
    with anyio.fail_after(120):
        result = await c.call_tool(tool, args or {})
    assert result.structured_content is not None
    return bool(result.is_error), result.structured_content


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project whose five clients each name MCP servers (Claude Code's file wins on a shared name)."""
    root = tmp_path / "other-project"
    write(
        root / ".mcp.json",
        json.dumps(
            {
                "mcpServers": {
                    "toy": {"command": sys.executable, "args": [str(TOY)], "env": {"TOY_STATE_DIR": str(tmp_path)}},
                    "keyed": {"command": "npx", "args": ["-y", "keyed-mcp"], "env": {"KEYED_TOKEN": "${KEYED_TOKEN}"}},
                }
            }
        ),
    )
    write(
        root / ".cursor" / "mcp.json",
        json.dumps({"mcpServers": {"docs": {"url": "https://docs.example/mcp", "headers": {"X-Team": "core"}}}}),
    )
    write(
        root / ".vscode" / "mcp.json",
        json.dumps(
            {
                "inputs": [{"id": "tok", "type": "promptString"}],
                "servers": {
                    "vs": {"type": "stdio", "command": "node", "args": ["vs.js"]},
                    "asks": {
                        "type": "http",
                        "url": "https://asks.example/mcp",
                        "headers": {"Authorization": "${input:tok}"},
                    },
                    "toy": {"type": "stdio", "command": "ignored"},
                },
            }
        ),
    )
    write(
        root / ".gemini" / "settings.json", json.dumps({"mcpServers": {"gem": {"httpUrl": "https://gem.example/mcp"}}})
    )
    write(
        root / ".codex" / "config.toml",
        '[mcp_servers.cdx]\ncommand = "uvx"\nargs = ["cdx-mcp"]\n\n[mcp_servers.sock]\nurl = "ws://127.0.0.1:1/"\n',
    )
    return root


def test_every_clients_project_file_is_read(project: Path) -> None:
    found = from_project_files(project, "/here", {"PATH": "/bin"})
    by_name = {
        c.config.name: (c.config.transport, c.config.command or c.config.url, c.missing, c.source)
        for c in found.candidates
    }
    assert by_name == {
        "toy": ("stdio", sys.executable, (), "import:.mcp.json"),
        "keyed": ("stdio", "npx", ("KEYED_TOKEN",), "import:.mcp.json"),
        "docs": ("http", "https://docs.example/mcp", (), "import:.cursor/mcp.json"),
        "vs": ("stdio", "node", (), "import:.vscode/mcp.json"),
        "asks": ("http", "https://asks.example/mcp", ("Authorization",), "import:.vscode/mcp.json"),
        "gem": ("http", "https://gem.example/mcp", (), "import:.gemini/settings.json"),
        "cdx": ("stdio", "uvx", (), "import:.codex/config.toml"),
        "sock": ("websocket", "ws://127.0.0.1:1/", (), "import:.codex/config.toml"),
    }
    assert found.skipped == {}
    assert {c.config.scope for c in found.candidates} == {"/here"}


def test_env_references_are_filled_from_relays_environment(project: Path) -> None:
    found = from_project_files(project, "/here", {"KEYED_TOKEN": "tok-123456789"})
    keyed = next(c for c in found.candidates if c.config.name == "keyed")
    assert keyed.missing == ()
    assert dict(keyed.config.env) == {"KEYED_TOKEN": "tok-123456789"}


async def test_importing_a_project_records_what_is_complete_and_asks_for_the_rest(
    make_settings: SettingsFactory, project: Path
) -> None:
    async with Client(build_server(make_settings(**GATEWAY_ENV))) as c:
        _, reply = await call(
            c, "import_mcp_server", {"from_project": str(project), "servers": ["toy", "keyed", "docs"]}
        )
        assert reply["status"] == "needs_configuration"
        assert reply["missing"] == ["KEYED_TOKEN"]
        assert reply["config"]["command"] == "npx" and reply["config"]["env"] == {"KEYED_TOKEN": ""}
        assert sorted(reply["imported"]) == ["docs", "toy"]
        _, servers = await call(c, "list_mcp_servers")
        assert sorted(s["name"] for s in servers["servers"]) == ["docs", "toy"]
        _, called = await call(
            c, "call_tool", {"server_name": "toy", "tool_name": "echo", "arguments": {"text": "imported"}}
        )
        assert called["success"] is True

        failed, unknown = await call(c, "import_mcp_server", {"from_project": str(project), "servers": ["nope"]})
        assert failed and "nope not found" in unknown["error"]
        failed, none = await call(c, "import_mcp_server", {})
        assert failed and none["error"] == "Must provide one of: from_project, github_url, or query"


async def test_relays_own_records_for_a_project_are_imported(
    make_settings: SettingsFactory, relay_home: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    registry = ServerRegistry(relay_home / "relay.db", relay_home)
    registry.put(
        make_config(
            name="kept",
            transport="stdio",
            command=sys.executable,
            args=[str(TOY)],
            env={"TOY_API_KEY": "sk-kept-0123456789"},
            scope=str(elsewhere),
        )
    )
    registry.close()
    async with Client(build_server(make_settings(**GATEWAY_ENV))) as c:
        _, reply = await call(c, "import_mcp_server", {"from_project": str(elsewhere)})
        assert reply == {"success": True, "imported": ["kept"]}
        _, servers = await call(c, "list_mcp_servers")
        [kept] = servers["servers"]
        assert kept["name"] == "kept" and kept["project_id"] != str(elsewhere)
    assert "sk-kept-0123456789" not in json.dumps(reply)


def git_repo(path: Path, files: dict[str, str]) -> str:
    for name, text in files.items():
        write(path / name, text)
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "PATH": "/usr/bin:/bin",
    }
    for cmd in (["git", "init", "-q"], ["git", "add", "."], ["git", "commit", "-qm", "init"]):
        subprocess.run(cmd, cwd=path, check=True, env=env)
    return f"file://{path}"


async def test_a_git_repository_with_an_npm_bin_becomes_an_npx_launch_that_needs_its_keys(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    url = git_repo(
        tmp_path / "weather-repo",
        {
            "package.json": json.dumps({"name": "@acme/weather-mcp-server", "bin": {"weather-mcp": "dist/index.js"}}),
            "README.md": 'Set `WEATHER_API_KEY`.\n```json\n{"env": {"WEATHER_API_KEY": "...", "WEATHER_UNITS": "metric"}}\n```\n',
        },
    )
    async with Client(build_server(make_settings(**GATEWAY_ENV))) as c:
        _, reply = await call(c, "import_mcp_server", {"github_url": url})
    assert reply == {
        "status": "needs_configuration",
        "config": {
            "name": "weather",
            "transport": "stdio",
            "command": "npx",
            "args": ["-y", "@acme/weather-mcp-server"],
            "env": {"WEATHER_API_KEY": "", "WEATHER_UNITS": ""},
            "enabled": True,
            "project_id": reply["config"]["project_id"],
        },
        "missing": ["WEATHER_API_KEY", "WEATHER_UNITS"],
    }


async def test_a_git_repository_with_a_python_package_is_imported_as_uvx(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    url = git_repo(
        tmp_path / "py-repo",
        {"pyproject.toml": '[project]\nname = "mcp-server-clock"\n[project.scripts]\nclock = "clock:main"\n'},
    )
    async with Client(build_server(make_settings(**GATEWAY_ENV))) as c:
        _, reply = await call(c, "import_mcp_server", {"github_url": url})
        assert reply == {"success": True, "imported": ["clock"]}
        _, servers = await call(c, "list_mcp_servers")
        assert [s["name"] for s in servers["servers"]] == ["clock"]
        failed, bad = await call(c, "import_mcp_server", {"github_url": f"file://{tmp_path}/missing-repo"})
        assert failed and "git clone" in bad["error"]


def test_manifests_name_the_launch_command(tmp_path: Path) -> None:
    write(tmp_path / "a" / "package.json", json.dumps({"name": "mcp-server-notes", "bin": "index.js"}))
    write(tmp_path / "b" / "pyproject.toml", '[project]\nname = "notes-mcp"\n')
    assert launch_from_manifest(tmp_path / "a") == ("notes", "npx", ["-y", "mcp-server-notes"])
    assert launch_from_manifest(tmp_path / "b") == ("notes", "uvx", ["notes-mcp"])
    assert [server_name(n) for n in ("@modelcontextprotocol/server-filesystem", "io.github.acme/weather", "x")] == [
        "filesystem",
        "weather",
        "x",
    ]


REGISTRY_PAGE = {
    "servers": [
        {
            "server": {
                "name": "io.github.acme/weather",
                "description": "Weather forecasts",
                "version": "1.2.0",
                "packages": [
                    {
                        "registryType": "npm",
                        "identifier": "@acme/weather-mcp",
                        "version": "1.2.0",
                        "transport": {"type": "stdio"},
                        "environmentVariables": [
                            {"name": "WEATHER_API_KEY", "isRequired": True, "isSecret": True},
                            {"name": "WEATHER_UNITS", "isRequired": False, "default": "metric"},
                        ],
                    }
                ],
            },
            "_meta": {"io.modelcontextprotocol.registry/official": {"status": "active"}},
        },
        {
            "server": {
                "name": "io.github.acme/remote-weather",
                "remotes": [{"type": "streamable-http", "url": "https://w.example/mcp"}],
            }
        },
    ],
    "metadata": {"count": 2},
}


@pytest.fixture
def mock_registry() -> Iterator[tuple[str, list[dict[str, list[str]]]]]:
    """A local server speaking the official MCP Registry API's GET /v0/servers."""
    seen: list[dict[str, list[str]]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parsed = urlparse(self.path)
            seen.append(parse_qs(parsed.query))
            if parsed.path != "/v0/servers":
                self.send_response(404)
                self.end_headers()
                return
            query = parse_qs(parsed.query).get("search", [""])[0]
            body = json.dumps(
                REGISTRY_PAGE if "weather" in query else {"servers": [], "metadata": {"count": 0}}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()


async def test_a_registry_query_imports_the_best_match_or_asks_for_its_keys(
    make_settings: SettingsFactory, mock_registry: tuple[str, list[dict[str, list[str]]]]
) -> None:
    url, seen = mock_registry
    async with Client(build_server(make_settings(**GATEWAY_ENV, RELAY_MCP_REGISTRY_URL=url))) as c:
        _, reply = await call(c, "import_mcp_server", {"query": "weather forecasts"})
        assert reply["status"] == "needs_configuration"
        assert reply["missing"] == ["WEATHER_API_KEY"]
        assert reply["config"]["args"] == ["-y", "@acme/weather-mcp@1.2.0"]
        assert reply["config"]["env"] == {"WEATHER_API_KEY": "", "WEATHER_UNITS": "***"}
        assert reply["candidates"] == ["weather", "remote-weather"]
        failed, nothing = await call(c, "import_mcp_server", {"query": "nothing like it"})
        assert failed and "no server" in nothing["error"]
    assert seen[0]["search"] == ["weather forecasts"]


async def test_a_registry_that_cannot_be_reached_is_a_clear_error(make_settings: SettingsFactory) -> None:
    async with Client(build_server(make_settings(**GATEWAY_ENV, RELAY_MCP_REGISTRY_URL="http://127.0.0.1:9"))) as c:
        failed, reply = await call(c, "import_mcp_server", {"query": "weather"})
    assert failed and "cannot be reached" in reply["error"] and "RELAY_MCP_REGISTRY_URL" in reply["hint"]


async def test_a_server_named_like_one_of_relays_toolsets_is_skipped_not_imported(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    root = tmp_path / "clashing"
    entry = {"command": sys.executable, "args": [str(TOY)], "env": {"TOY_STATE_DIR": str(tmp_path)}}
    write(root / ".mcp.json", json.dumps({"mcpServers": {"zen": entry, "toy": entry}}))
    async with Client(build_server(make_settings(**GATEWAY_ENV))) as c:
        _, reply = await call(c, "import_mcp_server", {"from_project": str(root)})
        assert reply["imported"] == ["toy"]
        assert "relay's own toolsets" in reply["skipped"]["zen"]
        _, servers = await call(c, "list_mcp_servers")
        assert [s["name"] for s in servers["servers"]] == ["toy"]


async def test_a_key_whose_variable_is_unset_shows_empty_in_needs_configuration(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    root = tmp_path / "renamed-var"
    entry = {"command": "npx", "args": ["-y", "gh-mcp"], "env": {"GITHUB_TOKEN": "${MY_UNSET_GH}", "MODE": "ro"}}
    write(root / ".mcp.json", json.dumps({"mcpServers": {"gh": entry}}))
    async with Client(build_server(make_settings(**GATEWAY_ENV))) as c:
        _, reply = await call(c, "import_mcp_server", {"from_project": str(root)})
    assert reply["status"] == "needs_configuration" and reply["missing"] == ["MY_UNSET_GH"]
    assert reply["config"]["env"] == {"GITHUB_TOKEN": "", "MODE": "***"}
