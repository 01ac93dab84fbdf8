"""`relay mcp add|remove|import` against the store a running relay uses, with the toy SDK server behind it."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.cli.main import main
from relay.gateway import ServerRegistry, project_of
from relay.server.app import build_server
from tests.conftest import SettingsFactory
from tests.gateway.conftest import GATEWAY_ENV, TOY

RELAY = str(Path(sys.executable).with_name("relay"))
SECRET = "sk-cli-secret-31415926"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The current directory: a project of its own (no enclosing git work tree)."""
    here = tmp_path / "proj"
    here.mkdir()
    monkeypatch.chdir(here)
    assert project_of(here) == str(here.resolve())
    return here.resolve()


def relay_mcp(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["mcp", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def tool_call(make_settings: SettingsFactory, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    """One call of a gateway tool on a relay built from settings, in this directory (its project)."""

    async def go() -> dict[str, Any]:
        async with Client(build_server(make_settings(**GATEWAY_ENV))) as client:
            with anyio.fail_after(120):
                result = await client.call_tool(tool, args or {})
        assert result.structured_content is not None
        return result.structured_content

    return anyio.run(go)


def test_mcp_add_stdio_then_list_shows_it_and_the_list_mcp_servers_tool_sees_it(
    project: Path, tmp_path: Path, make_settings: SettingsFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = relay_mcp(
        capsys, "add", "toy", "--env", f"TOY_STATE_DIR={tmp_path}", "--", sys.executable, str(TOY)
    )
    assert (status, err) == (0, "")
    assert out.startswith(f"added toy (stdio) for the project {project}: {sys.executable} {TOY}\n")

    status, out, _ = relay_mcp(capsys, "list")
    assert (status, out) == (0, f"toy\tstdio\t{sys.executable}\t{project}\tconfigured\n")
    status, out, _ = relay_mcp(capsys, "list", "--json")
    [listed] = json.loads(out)["servers"]
    assert listed["args"] == [str(TOY)] and listed["project_id"] == str(project)

    servers = tool_call(make_settings, "list_mcp_servers")["servers"]
    assert [(s["name"], s["transport"], s["project_id"]) for s in servers] == [("toy", "stdio", str(project))]
    tools = tool_call(make_settings, "list_tools", {"server": "toy"})
    assert tools["success"] is True and "echo" in [t["name"] for t in tools["tools"]]


def test_mcp_add_keeps_env_and_header_values_out_of_every_output_and_record(
    project: Path, relay_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = relay_mcp(
        capsys, "add", "toy", "--command", sys.executable, f"--arg={TOY}", "--env", f"TOY_API_KEY={SECRET}"
    )
    assert (status, err) == (0, "")
    assert "  env: TOY_API_KEY=***\n" in out and SECRET not in out
    status, out, _ = relay_mcp(
        capsys, "add", "docs", "--transport", "http", "--url", "https://docs.example/mcp",
        "--header", f"Authorization: Bearer {SECRET}", "--global", "--json",
    )  # fmt: skip
    reply = json.loads(out)
    assert status == 0 and reply["server"]["headers"] == {"Authorization": "***"} and SECRET not in out
    assert reply["server"]["project_id"] is None
    _, listed, _ = relay_mcp(capsys, "list", "--json")
    assert SECRET not in listed
    assert {s["name"]: s.get("env") or s.get("headers") for s in json.loads(listed)["servers"]} == {
        "docs": {"Authorization": "***"},
        "toy": {"TOY_API_KEY": "***"},
    }
    assert SECRET.encode() not in (relay_home / "relay.db").read_bytes()
    secrets = relay_home / "mcp_secrets.json"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    stored = json.loads(secrets.read_text())
    assert stored[str(project)]["toy"]["env"] == {"TOY_API_KEY": SECRET}
    assert stored[""]["docs"]["headers"] == {"Authorization": f"Bearer {SECRET}"}  # "K: V" is a header too


def test_mcp_add_connect_prints_the_tool_count_or_the_error_with_its_hint(
    project: Path, tmp_path: Path, make_settings: SettingsFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = relay_mcp(
        capsys, "add", "toy", "--connect", "--env", f"TOY_STATE_DIR={tmp_path}", "--", sys.executable, str(TOY)
    )
    assert (status, err) == (0, "")
    summary = out.splitlines()[-1]
    tools = tool_call(make_settings, "list_tools", {"server": "toy"})["tools"]
    names = [t["name"] for t in tools]
    assert summary == f"toy: connected, {len(names)} tool(s): {', '.join(names)}"

    leak = "import os, sys; sys.stderr.write('bad key ' + os.environ['K']); sys.exit(3)"
    status, out, err = relay_mcp(
        capsys, "add", "dies", "--connect", "--env", f"K={SECRET}", "--", sys.executable, "-c", leak
    )
    assert status == 1 and out.startswith("added dies (stdio)")
    [line] = err.splitlines()
    assert line.startswith("relay: UPSTREAM_ERROR: dies failed to start") and " — hint: " in line
    assert "bad key" in line and SECRET not in line
    status, out, _ = relay_mcp(capsys, "list")
    assert "dies\tstdio" in out  # recorded all the same: fix it and add it again


@pytest.mark.parametrize(
    ("argv", "wanted"),
    [
        (["--transport", "carrier-pigeon", "--url", "https://x.example/mcp"], "transport 'carrier-pigeon' is not one"),
        (["--transport", "http", "--url", "ftp://x.example/mcp"], "does not suit transport 'http'"),
        (["--transport", "websocket", "--url", "https://x.example/mcp"], "does not suit transport 'websocket'"),
        (["--transport", "http"], "transport 'http' needs a url"),
        (["--url", "https://x.example/mcp"], "needs a --transport"),
        (["--env", SECRET, "--", "python"], "--env value is not KEY=VALUE"),
        (["--command", "python", "--", "python"], "the command is given twice"),
    ],
)
def test_mcp_add_with_a_bad_transport_or_url_is_one_error_line_and_records_nothing(
    project: Path, capsys: pytest.CaptureFixture[str], argv: list[str], wanted: str
) -> None:
    status, out, err = relay_mcp(capsys, "add", "srv", *argv)
    assert status == 2 and out == ""
    [line] = err.splitlines()
    assert line.startswith("relay: INVALID_ARGUMENT: ") and wanted in line and " — hint: " in line
    assert SECRET not in line
    assert relay_mcp(capsys, "list") == (0, "", "")


def test_mcp_add_refuses_the_name_of_a_relay_toolset_like_the_tool(
    project: Path, make_settings: SettingsFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    tool = tool_call(make_settings, "add_mcp_server", {"name": "pal", "transport": "stdio", "command": "x"})
    status, _, err = relay_mcp(capsys, "add", "pal", "--", "x")
    assert tool["success"] is False and status == 2
    assert err.startswith(f"relay: INVALID_ARGUMENT: {tool['error']} — hint: {tool['hint']}")


def test_mcp_add_shorthand_keeps_dashed_arguments_and_the_real_entry_point_answers(
    project: Path, relay_home: Path
) -> None:
    def relay(*argv: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "RELAY_HOME": str(relay_home)}
        return subprocess.run(
            [RELAY, "mcp", *argv], env=env, cwd=project, capture_output=True, text=True, timeout=120, check=False
        )

    added = relay("add", "py", "--env", "A=1", "--", sys.executable, "-u", str(TOY), "--global", "--env")
    assert added.returncode == 0, added.stderr
    listed = relay("list", "--json")
    [server] = json.loads(listed.stdout)["servers"]
    # After --, every word is the server's: --global and --env are its arguments, not relay's flags.
    assert server["args"] == ["-u", str(TOY), "--global", "--env"] and server["project_id"] == str(project)
    bad = relay("add", "x", "--transport", "http", "--url", "gopher://x")
    assert bad.returncode == 2 and bad.stdout == ""
    assert len(bad.stderr.splitlines()) == 1 and bad.stderr.startswith("relay: INVALID_ARGUMENT: url 'gopher://x'")


def test_mcp_remove_takes_the_projects_own_first_and_scope_flags_pick_one(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "https://docs.example/mcp"
    assert relay_mcp(capsys, "add", "docs", "--transport", "http", "--url", url, "--global")[0] == 0
    assert relay_mcp(capsys, "add", "docs", "--", "docs-server")[0] == 0
    status, out, _ = relay_mcp(capsys, "list")
    assert out == f"docs\tstdio\tdocs-server\t{project}\tconfigured\n"  # the project's own wins on a shared name

    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert relay_mcp(capsys, "list")[1] == f"docs\thttp\t{url}\tglobal\tconfigured\n"
    status, _, err = relay_mcp(capsys, "remove", "docs", "--project")
    assert status == 2 and err.startswith("relay: SERVER_NOT_FOUND: Server 'docs' is not a server of the project")
    assert "it is a global server" in err
    monkeypatch.chdir(project)

    status, out, _ = relay_mcp(capsys, "remove", "docs", "--global", "--json")
    assert (status, json.loads(out)) == (0, {"success": True, "removed": "docs", "project_id": None})
    assert relay_mcp(capsys, "list")[1] == f"docs\tstdio\tdocs-server\t{project}\tconfigured\n"
    status, out, _ = relay_mcp(capsys, "remove", "docs")
    assert (status, out) == (0, f"removed docs (stdio) of the project {project}\n")
    assert relay_mcp(capsys, "list") == (0, "", "")


def test_mcp_remove_of_an_unknown_server_names_the_nearest_one(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("github", "filesystem"):
        assert relay_mcp(capsys, "add", name, "--", "srv")[0] == 0
    status, out, err = relay_mcp(capsys, "remove", "githbu")
    assert status == 2 and out == ""
    [line] = err.splitlines()
    assert line.startswith("relay: SERVER_NOT_FOUND: Server 'githbu' not found — hint: did you mean `github`?")
    assert "filesystem, github" in line
    assert relay_mcp(capsys, "list")[1].count("\tstdio\t") == 2


def test_mcp_servers_added_by_the_tool_are_removed_by_the_cli_and_back(
    project: Path, make_settings: SettingsFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    added = tool_call(make_settings, "add_mcp_server", {"name": "a", "transport": "stdio", "command": "srv"})
    assert added["server"]["project_id"] == str(project)
    assert relay_mcp(capsys, "remove", "a")[:2] == (0, f"removed a (stdio) of the project {project}\n")
    assert relay_mcp(capsys, "add", "b", "--global", "--", "srv")[0] == 0
    removed = tool_call(make_settings, "remove_mcp_server", {"name": "b"})
    assert removed == {"success": True, "removed": "b", "project_id": None}


def test_mcp_import_from_a_project_records_the_chosen_servers_like_the_tool(
    project: Path, tmp_path: Path, relay_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "source"
    source.mkdir()
    servers = {
        "fs": {"command": "npx", "args": ["-y", "fs-server"]},
        "gh": {"command": "gh-mcp", "env": {"GITHUB_TOKEN": "${RELAY_TEST_UNSET_TOKEN}"}},
        "web": {"url": "https://web.example/mcp", "headers": {"X-Key": SECRET}},
    }
    (source / ".mcp.json").write_text(json.dumps({"mcpServers": servers}))

    status, out, _ = relay_mcp(capsys, "import", "--from-project", str(source), "--servers", "fs,web")
    assert (status, out) == (0, "imported: fs, web\n")
    registry = ServerRegistry(relay_home / "relay.db", relay_home)
    try:
        recorded = {c.name: c for c in registry.in_scope(str(project))}
    finally:
        registry.close()
    assert sorted(recorded) == ["fs", "web"] and recorded["web"].headers == {"X-Key": SECRET}

    status, out, _ = relay_mcp(capsys, "import", "--from-project", str(source), "--json")
    reply = json.loads(out)
    assert reply["status"] == "needs_configuration" and reply["config"]["name"] == "gh"
    assert reply["missing"] == ["RELAY_TEST_UNSET_TOKEN"] and sorted(reply["imported"]) == ["fs", "web"]
    assert SECRET not in out

    status, _, err = relay_mcp(capsys, "import", "--from-project", str(source), "--servers", "fs,nope")
    assert status == 2 and err.startswith("relay: INVALID_ARGUMENT: nope not found in")
