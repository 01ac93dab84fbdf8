"""A command a caller names is a `full` action: job_land's and best_of's test commands, a stdio MCP server added or
imported. Above the grant it runs only with the person's yes (asked through MCP elicitation, in both eras); without
one it is refused and never started; either way it is on the audit record. A command the person configured runs
without asking.

Every command here would leave a marker file when run, so "refused" is seen as the marker's absence.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from relay.cli.main import main
from relay.server.app import build_server
from tests.conftest import SettingsFactory
from tests.gateway.conftest import TOY
from tests.server.test_grants import ERAS, Person, audit, call, serving_http
from tests.server.test_principals import ALICE, BOB, TOKENS, as_
from tests.workspaces.conftest import git, one_commit_repo

pytestmark = pytest.mark.anyio

TOOLSETS = "core,workspaces,gateway"


@pytest.fixture
def repo(workdir: Path) -> Path:
    return one_commit_repo(workdir)


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "ran"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """relay's own folder (the gateway's project): a folder of its own, not this repository."""
    here = tmp_path / "proj"
    here.mkdir()
    monkeypatch.chdir(here)
    yield here


def touch(marker: Path) -> str:
    return f"touch {shlex.quote(str(marker))}"


def client(settings: Any, person: Person | None = None, era: Any = "legacy") -> Client:
    return Client(build_server(settings), elicitation_callback=person, mode=era)


def relay_settings(make_settings: SettingsFactory, config: str = "", **env: str) -> Any:
    return make_settings(config, RELAY_TOOLSETS=TOOLSETS, RELAY_GATEWAY_LIST_WAIT_S="30", **env)


async def worktree_job(c: Client, repo: Path) -> str:
    failed, env = await call(
        c,
        "delegate",
        {"prompt": "edit [[fake:write=new.txt~x]]", "cwd": str(repo), "workspace": "worktree", "mode": "sync"},
    )
    assert not failed and env["status"] == "completed", env["error"]
    return str(env["job_id"])


def permitted(home: Path) -> list[dict[str, Any]]:
    return [e["data"] for e in audit(home, "command.permitted")]


def refused(home: Path) -> list[dict[str, Any]]:
    return [e["data"] for e in audit(home, "permission.refused")]


# job_land ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("grant", ["read-only", "edit"])
async def test_job_lands_test_command_without_a_way_to_ask_is_refused_never_runs_and_is_on_record(
    make_settings: SettingsFactory, repo: Path, marker: Path, relay_home: Path, grant: str
) -> None:
    settings = relay_settings(make_settings, RELAY_GRANT=grant)
    before = git(repo, "rev-parse", "main")
    async with client(settings) as c:
        job = await worktree_job(c, repo)
        failed, body = await call(c, "job_land", {"job_id": job, "test_command": touch(marker)})
    assert failed and body["error"]["code"] == "PERMISSION_NOT_GRANTED", body
    assert "land without test_command" in body["error"]["hint"]
    assert not marker.exists() and git(repo, "rev-parse", "main") == before
    [entry] = refused(relay_home)
    assert {k: entry[k] for k in ("agent", "permission", "grant", "answer", "via", "task")} == {
        "agent": "job_land's test command",
        "permission": "full",
        "grant": grant,
        "answer": "unavailable",
        "via": "workspaces/job_land",
        "task": touch(marker),
    }
    assert permitted(relay_home) == []


@ERAS
async def test_job_lands_test_command_runs_when_the_person_accepts_and_is_on_record(
    make_settings: SettingsFactory, repo: Path, marker: Path, relay_home: Path, era: Any
) -> None:
    person = Person("accept")
    async with client(relay_settings(make_settings), person, era) as c:
        job = await worktree_job(c, repo)
        failed, landed = await call(c, "job_land", {"job_id": job, "test_command": touch(marker)})
    assert not failed and landed["landed"] is True and landed["test"]["passed"], landed
    assert marker.exists()
    [asked] = person.asked
    assert "job_land's test command" in asked.message and touch(marker) in asked.message
    [entry] = permitted(relay_home)
    assert entry == {
        "command": touch(marker),
        "what": "job_land's test command",
        "cwd": entry["cwd"],
        "via": "workspaces/job_land",
        "permission": "full",
        "grant": "edit",
        "grant_source": "default",
        "by": "confirmation",
        "for_session": False,
        "principal": "local (mcp)",
    }
    assert refused(relay_home) == []


async def test_a_test_command_the_person_configured_runs_without_asking(
    make_settings: SettingsFactory, repo: Path, marker: Path, relay_home: Path
) -> None:
    config = f"[workspaces]\ntest_command = [{json.dumps('true')}, {json.dumps(touch(marker))}]\n"
    async with client(relay_settings(make_settings, config)) as c:  # no way to ask: none is needed
        job = await worktree_job(c, repo)
        failed, landed = await call(c, "job_land", {"job_id": job, "test_command": touch(marker)})
    assert not failed and landed["landed"] is True, landed
    assert marker.exists()
    [entry] = permitted(relay_home)
    assert entry["by"] == "person" and entry["command"] == touch(marker)


def test_relay_land_test_on_a_terminal_is_the_persons_own_command(
    make_settings: SettingsFactory, repo: Path, marker: Path, relay_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import anyio

    settings = relay_settings(make_settings)

    async def make_job() -> str:
        async with client(settings) as c:
            return await worktree_job(c, repo)

    job = anyio.run(make_job)
    status = main(["land", job, "--test", touch(marker)])
    assert status == 0, capsys.readouterr().err
    assert marker.exists()
    [entry] = permitted(relay_home)
    assert entry["by"] == "person"


# best_of ----------------------------------------------------------------------------------------------------------


def best_of_args(repo: Path, command: str, **more: Any) -> dict[str, Any]:
    return {
        "prompt": "Write it [[fake:write=answer.txt~42\\n]]",
        "agents": ["claude"],
        "n": 2,
        "cwd": str(repo),
        "test_command": command,
        "mode": "sync",
    } | more


@pytest.mark.parametrize("grant", ["read-only", "edit"])
async def test_best_ofs_test_command_without_a_way_to_ask_is_refused_before_any_candidate_starts(
    make_settings: SettingsFactory, repo: Path, marker: Path, relay_home: Path, grant: str
) -> None:
    async with client(relay_settings(make_settings, RELAY_GRANT=grant)) as c:
        failed, body = await call(c, "best_of", best_of_args(repo, touch(marker)))
        _, listed = await call(c, "job_list", {})
    assert failed and body["error"]["code"] == "PERMISSION_NOT_GRANTED", body
    assert listed["jobs"] == [] and not marker.exists()
    # At read-only the candidates (edit) are asked about first, in a form that names the command too.
    [entry] = refused(relay_home)
    assert touch(marker) in f"{entry['agent']} {entry['task']}" and entry["via"] == "workspaces/best_of"
    assert entry["answer"] == "unavailable" and entry["grant"] == grant


@ERAS
async def test_best_ofs_test_command_asks_once_and_runs_in_each_worktree_when_the_person_accepts(
    make_settings: SettingsFactory, repo: Path, tmp_path: Path, relay_home: Path, era: Any
) -> None:
    person = Person("accept")
    marks = tmp_path / "marks"
    marks.mkdir()
    command = f"grep -q 42 answer.txt && mktemp -p {shlex.quote(str(marks))}"
    async with client(relay_settings(make_settings), person, era) as c:
        failed, env = await call(c, "best_of", best_of_args(repo, command))
    assert not failed, env
    candidates = json.loads(env["output"])["candidates"]
    assert [c["test"]["passed"] for c in candidates] == [True, True]
    assert len(list(marks.iterdir())) == 2
    [asked] = person.asked
    assert "best_of's test command" in asked.message and "grep -q 42 answer.txt" in asked.message
    [entry] = permitted(relay_home)
    assert entry["by"] == "confirmation" and entry["via"] == "workspaces/best_of"


async def test_best_of_at_full_with_a_test_command_names_both_in_one_form(
    make_settings: SettingsFactory, repo: Path, marker: Path, relay_home: Path
) -> None:
    person = Person("accept")
    async with client(relay_settings(make_settings), person) as c:
        failed, env = await call(c, "best_of", best_of_args(repo, touch(marker), permission="full"))
    assert not failed, env
    [asked] = person.asked
    assert "run claude, then the test command" in asked.message and touch(marker) in asked.message
    assert marker.exists()


async def test_best_ofs_configured_test_command_runs_without_asking(
    make_settings: SettingsFactory, repo: Path, marker: Path, relay_home: Path
) -> None:
    config = f"[workspaces]\ntest_command = {json.dumps(touch(marker))}\n"
    async with client(relay_settings(make_settings, config)) as c:
        failed, env = await call(c, "best_of", best_of_args(repo, touch(marker)))
    assert not failed, env
    assert marker.exists()
    [entry] = permitted(relay_home)
    assert entry["by"] == "person"


# add_mcp_server (stdio) ------------------------------------------------------------------------------------------


def marking_server(marker: Path, state: Path) -> tuple[str, list[str]]:
    """The toy MCP server, started through a shell that first leaves `marker`."""
    return "/bin/sh", ["-c", f"{touch(marker)}; exec {shlex.quote(sys.executable)} {shlex.quote(str(TOY))}"]


def stdio_args(marker: Path, state: Path, name: str = "toy") -> dict[str, Any]:
    command, args = marking_server(marker, state)
    return {"name": name, "transport": "stdio", "command": command, "args": args, "env": {"TOY_STATE_DIR": str(state)}}


@pytest.mark.parametrize("grant", ["read-only", "edit"])
async def test_a_stdio_server_a_caller_adds_without_a_way_to_ask_is_refused_never_started_nor_recorded(
    make_settings: SettingsFactory, project: Path, marker: Path, tmp_path: Path, relay_home: Path, grant: str
) -> None:
    async with client(relay_settings(make_settings, RELAY_GRANT=grant)) as c:
        failed, body = await call(c, "add_mcp_server", stdio_args(marker, tmp_path))
        _, servers = await call(c, "list_mcp_servers", {})
    assert failed and body["code"] == "PERMISSION_NOT_GRANTED", body
    assert servers["servers"] == [] and not marker.exists()
    [entry] = refused(relay_home)
    assert entry["agent"] == "the stdio MCP server toy" and entry["via"] == "gateway/add_mcp_server"
    assert "TOY_STATE_DIR=***" in entry["task"] and "/bin/sh -c" in entry["task"]


@ERAS
async def test_a_stdio_server_a_caller_adds_starts_when_the_person_accepts_and_is_on_record(
    make_settings: SettingsFactory, project: Path, marker: Path, tmp_path: Path, relay_home: Path, era: Any
) -> None:
    person = Person("accept")
    async with client(relay_settings(make_settings), person, era) as c:
        failed, added = await call(c, "add_mcp_server", stdio_args(marker, tmp_path))
        _, echoed = await call(c, "call_tool", {"server_name": "toy", "tool_name": "echo", "arguments": {"text": "hi"}})
    assert not failed and added["state"] == "connected", added
    assert echoed["success"] is True and marker.exists()
    [asked] = person.asked
    assert "the stdio MCP server toy" in asked.message and str(TOY) in asked.message
    [entry] = permitted(relay_home)
    assert entry["by"] == "confirmation" and entry["what"] == "the stdio MCP server toy"


def test_a_stdio_server_the_person_added_with_relay_mcp_add_runs_without_asking(
    make_settings: SettingsFactory,
    project: Path,
    marker: Path,
    tmp_path: Path,
    relay_home: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import anyio

    settings = relay_settings(make_settings)
    command, args = marking_server(marker, tmp_path)
    assert main(["mcp", "add", "toy", "--env", f"TOY_STATE_DIR={tmp_path}", "--", command, *args]) == 0
    assert not marker.exists()  # recorded, not started

    async def go() -> dict[str, Any]:
        async with client(settings) as c:  # a caller that cannot ask: none is needed
            return (
                await call(c, "call_tool", {"server_name": "toy", "tool_name": "echo", "arguments": {"text": "x"}})
            )[1]

    assert anyio.run(go)["success"] is True and marker.exists()
    [entry] = permitted(relay_home)
    assert entry["by"] == "person" and entry["what"] == "the stdio MCP server toy"


# import_mcp_server, then call_tool --------------------------------------------------------------------------------


@pytest.fixture
def other_project(tmp_path: Path, marker: Path) -> Path:
    """A project whose .mcp.json (a file any model can write) names a stdio server that leaves the marker."""
    root = tmp_path / "other"
    root.mkdir()
    command, args = marking_server(marker, tmp_path)
    entry = {"command": command, "args": args, "env": {"TOY_STATE_DIR": str(tmp_path)}}
    (root / ".mcp.json").write_text(json.dumps({"mcpServers": {"planted": entry}}))
    return root


@pytest.mark.parametrize("grant", ["read-only", "edit"])
async def test_an_imported_stdio_server_without_a_way_to_ask_is_refused_and_call_tool_cannot_start_it(
    make_settings: SettingsFactory,
    project: Path,
    other_project: Path,
    marker: Path,
    relay_home: Path,
    grant: str,
) -> None:
    async with client(relay_settings(make_settings, RELAY_GRANT=grant)) as c:
        failed, body = await call(c, "import_mcp_server", {"from_project": str(other_project)})
        called_failed, called = await call(
            c, "call_tool", {"server_name": "planted", "tool_name": "echo", "arguments": {"text": "x"}}
        )
        _, servers = await call(c, "list_mcp_servers", {})
    assert failed and body["code"] == "PERMISSION_NOT_GRANTED", body
    assert called_failed and called["code"] == "SERVER_NOT_FOUND"
    assert servers["servers"] == [] and not marker.exists()
    [entry] = refused(relay_home)
    assert entry["agent"] == "the stdio MCP server planted" and entry["via"] == "gateway/import_mcp_server"


@ERAS
async def test_an_imported_stdio_server_runs_on_call_tool_once_the_person_accepted_the_import(
    make_settings: SettingsFactory,
    project: Path,
    other_project: Path,
    marker: Path,
    relay_home: Path,
    era: Any,
) -> None:
    person = Person("accept")
    async with client(relay_settings(make_settings), person, era) as c:
        failed, body = await call(c, "import_mcp_server", {"from_project": str(other_project)})
        assert not failed and body["imported"] == ["planted"], body
        assert not marker.exists()  # recorded, started by the first call
        _, called = await call(
            c, "call_tool", {"server_name": "planted", "tool_name": "echo", "arguments": {"text": "x"}}
        )
    assert called["success"] is True and marker.exists()
    [asked] = person.asked
    assert "the stdio MCP server planted" in asked.message
    [entry] = permitted(relay_home)
    assert entry["by"] == "confirmation" and entry["via"] == "gateway/import_mcp_server"


# over HTTP, as a user token -----------------------------------------------------------------------------------------


async def test_a_user_token_cannot_use_a_test_command_to_read_another_principals_prompts_out_of_relay_db(
    make_settings: SettingsFactory, repo: Path, marker: Path, relay_home: Path
) -> None:
    make_settings(TOKENS)
    steal = f"grep -a 'bob secret plan' {shlex.quote(str(relay_home / 'relay.db'))} > {shlex.quote(str(marker))}"
    async with serving_http(relay_home, repo, "--toolsets", TOOLSETS) as (port, _):
        async with as_(port, BOB) as bob:
            failed, _ = await call(bob, "delegate", {"prompt": "bob secret plan", "cwd": str(repo), "mode": "sync"})
            assert not failed
        async with as_(port, ALICE) as alice:
            job = await worktree_job(alice, repo)
            failed, body = await call(alice, "job_land", {"job_id": job, "test_command": steal})
    assert failed and body["error"]["code"] == "PERMISSION_NOT_GRANTED", body
    assert not marker.exists()
    [entry] = refused(relay_home)
    assert entry["principal"].startswith("alice") and entry["task"] == steal and entry["via"] == "workspaces/job_land"


@pytest.mark.parametrize("url", ["--upload-pack=touch {marker}", "ext::sh -c touch% {marker}", "-c core.x=y"])
async def test_a_git_url_to_import_from_never_becomes_a_flag_nor_a_command(
    make_settings: SettingsFactory, project: Path, marker: Path, url: str
) -> None:
    async with client(relay_settings(make_settings, RELAY_GRANT="full")) as c:  # the grant is not what stops it
        failed, body = await call(c, "import_mcp_server", {"github_url": url.format(marker=marker)})
    assert failed and body["code"] == "INVALID_ARGUMENT", body
    assert not marker.exists()
