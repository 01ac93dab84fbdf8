"""A worktree ready to work in: `.worktreeinclude`'s ignored files copied in, the person's setup command run before the
agent (its output in job_result view="setup", a failure ending the job), a block of ports of its own per worktree."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.config import load_settings
from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import Engine, JobRequest
from relay.runtime import procinfo
from relay.server.app import build_server
from relay.workspaces import Workspaces, procs
from relay.workspaces.ready import (
    copy_included,
    included,
    make_ready,
    port_env,
    reserve_ports,
    setup_command_for,
)
from tests.conftest import SettingsFactory
from tests.workspaces.conftest import git, snapshot

pytestmark = pytest.mark.anyio

WAIT_S = 30.0


@pytest.fixture
def checkout(repo: Path) -> Path:
    """The repository with a committed .gitignore and .worktreeinclude, and the ignored files a project keeps."""
    (repo / ".gitignore").write_text(".env\n*.local\nnode_modules/\nlink.env\n")
    (repo / ".worktreeinclude").write_text("# what a worktree needs\n.env\nnode_modules/\ntracked.env\nlink.env\n")
    (repo / "tracked.env").write_text("TRACKED=committed\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "ignore and include")
    (repo / ".env").write_text("API_KEY=from-the-checkout\n")
    (repo / "notes.local").write_text("ignored, but not listed\n")
    (repo / "tracked.env").write_text("TRACKED=edited in the checkout\n")
    return repo


def worktree_of(repo: Path, into: Path) -> Path:
    git(repo, "worktree", "add", "-q", "-b", "wt", str(into), "HEAD")
    return into


# .worktreeinclude ----------------------------------------------------------------------------------------


def test_an_ignored_file_the_include_list_names_is_copied_and_one_it_does_not_name_is_not(
    checkout: Path, tmp_path: Path
) -> None:
    wt = worktree_of(checkout, tmp_path / "wt")
    copied = copy_included(checkout, wt)
    assert (wt / ".env").read_text() == "API_KEY=from-the-checkout\n"
    assert not (wt / "notes.local").exists()
    assert (copied.files, copied.skipped) == (1, [])
    assert copied.lines()[0] == "relay: copied from the checkout (.worktreeinclude): 1 file, 26 B"


def test_a_tracked_file_the_include_list_names_stays_as_the_branch_has_it(checkout: Path, tmp_path: Path) -> None:
    wt = worktree_of(checkout, tmp_path / "wt")
    copy_included(checkout, wt)
    assert (wt / "tracked.env").read_text() == "TRACKED=committed\n"
    assert git(wt, "status", "--porcelain") == ""


def test_a_symlink_out_of_the_checkout_is_not_followed_and_a_pattern_that_escapes_is_refused(
    checkout: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("not the project's\n")
    (checkout / "link.env").symlink_to(secret)
    with (checkout / ".worktreeinclude").open("a") as fh:
        fh.write("../outside/secret.txt\n")
    wt = worktree_of(checkout, tmp_path / "wt")
    copied = copy_included(checkout, wt)
    assert not os.path.lexists(wt / "link.env")
    assert sorted(copied.skipped) == [
        ("../outside/secret.txt", "it escapes the repository"),
        ("link.env", "a symlink out of the checkout is not followed"),
    ]
    assert (wt / ".env").is_file()


def test_a_folder_the_worktrees_branch_has_as_a_symlink_out_is_never_written_through(
    checkout: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    git(checkout, "checkout", "-q", "-b", "linked")
    (checkout / "conf").symlink_to(outside)
    git(checkout, "add", "conf")
    git(checkout, "commit", "-q", "-m", "conf is a link")
    git(checkout, "checkout", "-q", "main")
    (checkout / "conf" / "local").mkdir(parents=True)
    (checkout / "conf" / "local" / ".env").write_text("IN_CONF=1\n")
    wt = tmp_path / "wt"
    git(checkout, "worktree", "add", "-q", str(wt), "linked")
    copied = copy_included(checkout, wt)
    assert list(outside.iterdir()) == []
    assert ("conf/local/.env", "its folder in the worktree leads outside it") in copied.skipped


def test_a_large_ignored_tree_is_copied_with_its_inside_links_and_the_log_says_how_much(
    checkout: Path, tmp_path: Path
) -> None:
    for n in range(300):
        pkg = checkout / "node_modules" / f"pkg{n}"
        pkg.mkdir(parents=True)
        (pkg / "index.js").write_text(f"module.exports = {n}\n")
    (checkout / "node_modules" / ".bin").mkdir()
    (checkout / "node_modules" / ".bin" / "run").symlink_to("../pkg7/index.js")
    wt = worktree_of(checkout, tmp_path / "wt")
    copied = copy_included(checkout, wt)
    assert (wt / "node_modules" / "pkg299" / "index.js").read_text() == "module.exports = 299\n"
    assert os.readlink(wt / "node_modules" / ".bin" / "run") == "../pkg7/index.js"
    assert (wt / "node_modules" / ".bin" / "run").read_text() == "module.exports = 7\n"
    assert copied.files == 302 and copied.entries["node_modules/"][0] == 301
    assert "  node_modules/  (301 files, 6.2 kB)" in copied.lines()


def test_without_an_include_list_nothing_is_copied(repo: Path, tmp_path: Path) -> None:
    (repo / ".gitignore").write_text(".env\n")
    (repo / ".env").write_text("A=1\n")
    assert included(repo) == ([], [])


# the person's setup command, by repository ---------------------------------------------------------------


def test_the_setup_command_is_the_repositorys_by_folder_then_by_remote_url_then_everyones(
    make_settings: SettingsFactory, checkout: Path, tmp_path: Path
) -> None:
    git(checkout, "remote", "add", "origin", "git@example.com:me/app.git")
    spaces = Workspaces(make_settings())
    rec = spaces.create("j1", str(checkout), base=None, carry_changes=False)
    by_folder = f'[workspaces]\nsetup_command = "all"\n[workspaces.repos."{checkout}"]\nsetup_command = "mine"\n'
    by_url = '[workspaces]\nsetup_command = "all"\n[workspaces.repos."git@example.com:me/app"]\nsetup_command = "url"\n'
    none = '[workspaces]\nsetup_command = "all"\n[workspaces.repos."git@example.com:me/app.git/"]\nsetup_command = ""\n'
    assert setup_command_for(make_settings(by_folder), rec, None) == "mine"
    assert setup_command_for(make_settings(by_url), rec, None) == "url"
    assert setup_command_for(make_settings(by_url), rec, "https://example.com/other.git") == "all"
    assert setup_command_for(make_settings(none), rec, None) == ""
    spaces.close()


@pytest.mark.parametrize(
    "config",
    [
        '[workspaces]\nsetup_command = ["npm ci"]\n',
        '[workspaces.repos."app"]\nsetup_command = "npm ci"\n',
        '[workspaces.repos."/src/app"]\nsetup_comand = "npm ci"\n',
        '[workspaces]\nports = "80-90"\n',
        '[workspaces]\nports = "30000-30004"\nports_per_worktree = 10\n',
    ],
)
def test_a_setup_command_or_ports_config_relay_cannot_use_is_refused_with_a_hint(relay_home: Path, config: str) -> None:
    (relay_home / "config.toml").write_text(config)
    with pytest.raises(RelayError) as caught:
        load_settings({"RELAY_HOME": str(relay_home)})
    assert caught.value.code is ErrorCode.CONFIG_INVALID and "[workspaces]" in caught.value.hint


def test_a_running_setup_is_on_record_so_a_relay_killed_meanwhile_leaves_it_to_the_next_ones_sweep(
    make_settings: SettingsFactory, checkout: Path, tmp_path: Path
) -> None:
    started, gate = tmp_path / "started", tmp_path / "gate"
    setup = f"touch {started}; while [ ! -e {gate} ]; do sleep 0.05; done"
    settings = make_settings(f'[workspaces]\nsetup_command = "{setup}"\n')
    spaces = Workspaces(settings)
    rec = spaces.create("j1", str(checkout), base=None, carry_changes=False)
    outcome: list[Any] = []

    def ready() -> None:
        try:
            outcome.append(make_ready(settings, rec, tmp_path / "setup.log"))
        except RelayError as err:
            outcome.append(err)

    thread = threading.Thread(target=ready, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    (record,) = (settings.worktrees_dir / procs.PROCS).glob("*.json")
    found = json.loads(record.read_text())
    assert found["what"] == "setup" and procinfo.group_members(found["pid"])
    found["owner"] = {"pid": found["owner"]["pid"], "start": -1, "boot": found["owner"]["boot"]}  # its relay gone
    record.write_text(json.dumps(found))
    assert [k["pid"] for k in procs.kill_left_over(settings.worktrees_dir)] == [found["pid"]]
    thread.join(WAIT_S)
    assert procinfo.group_members(found["pid"]) == [] and not gate.exists()
    (failed,) = outcome  # killed: the job it belonged to would end SETUP_FAILED, had its relay lived
    assert isinstance(failed, RelayError) and failed.code is ErrorCode.SETUP_FAILED
    spaces.close()


# ports ---------------------------------------------------------------------------------------------------


def test_each_worktree_holds_its_own_block_until_it_is_removed_and_a_port_in_use_is_skipped(
    make_settings: SettingsFactory, checkout: Path
) -> None:
    settings = make_settings('[workspaces]\nports = "31000-31029"\nports_per_worktree = 10\n')
    spaces = Workspaces(settings)
    a = spaces.create("a", str(checkout), base=None, carry_changes=False)
    b = spaces.create("b", str(checkout), base=None, carry_changes=False)
    c = spaces.create("c", str(checkout), base=None, carry_changes=False)
    in_use = {31012}
    assert reserve_ports(settings, spaces.store, "a", set()) == "31000-31009"
    assert reserve_ports(settings, spaces.store, "b", set(), free=lambda p: p not in in_use) == "31020-31029"
    assert reserve_ports(settings, spaces.store, "a", set()) == "31000-31009"  # held: the same again
    with pytest.raises(RelayError) as full:
        reserve_ports(settings, spaces.store, "c", {"a", "b"}, free=lambda p: p not in in_use)
    assert full.value.code is ErrorCode.LIMIT_REACHED
    spaces.discard(a)
    assert reserve_ports(settings, spaces.store, "c", set()) == "31000-31009"
    assert port_env("31000-31009") == {"RELAY_PORT": "31000", "RELAY_PORTS": "31000-31009", "PORT": "31000"}
    assert (spaces.get("b") or b).ports == "31020-31029" and (spaces.get("c") or c).ports == "31000-31009"
    spaces.close()


def test_when_every_block_is_held_the_one_of_the_longest_idle_ended_worktree_is_taken(
    make_settings: SettingsFactory, checkout: Path
) -> None:
    settings = make_settings('[workspaces]\nports = "31100-31119"\nports_per_worktree = 10\n')
    spaces = Workspaces(settings)
    for job in ("old", "recent", "new"):
        spaces.create(job, str(checkout), base=None, carry_changes=False)
    reserve_ports(settings, spaces.store, "old", set())
    reserve_ports(settings, spaces.store, "recent", set())
    spaces.store.update("old", ended_at=1000.0)
    spaces.store.update("recent", ended_at=2000.0)
    assert reserve_ports(settings, spaces.store, "new", set()) == "31100-31109"
    assert [(spaces.get(j) or checkout).ports for j in ("old", "recent")] == [None, "31110-31119"]  # type: ignore[union-attr]
    spaces.close()


# through the server: the MCP SDK's client, the fake claude -----------------------------------------------


async def call(c: Client, tool: str, args: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    with anyio.fail_after(WAIT_S):
        result = await c.call_tool(tool, args)
    assert result.structured_content is not None, result
    return result.structured_content, bool(result.is_error)


def argv_log(tmp_path: Path) -> tuple[Path, str]:
    log = tmp_path / "argv.jsonl"
    return log, f'[agents.claude.env]\nFAKE_ARGV_LOG = "{log}"\n'


def agent_runs(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


async def test_the_setup_command_runs_in_the_new_worktree_before_the_agent_and_reads_back_with_view_setup(
    make_settings: SettingsFactory, checkout: Path, tmp_path: Path
) -> None:
    log, agent_env = argv_log(tmp_path)
    setup = "echo setting up in $(basename $PWD) for $RELAY_JOB_ID; cat .env; echo $RELAY_PORTS > setup-ran.local"
    settings = make_settings(f'[workspaces]\nsetup_command = "{setup}"\nports = "31200-31299"\n' + agent_env)
    before = snapshot(checkout)
    async with Client(build_server(settings)) as c:
        prompt = "edit [[fake:write=app.txt~edited]]"
        env, failed = await call(
            c, "delegate", {"prompt": prompt, "cwd": str(checkout), "mode": "sync", "workspace": "worktree"}
        )
        page, _ = await call(c, "job_result", {"job_id": env["job_id"], "view": "setup"})
    job_id, wt = env["job_id"], Path(env["workspace"]["path"])
    assert (failed, env["status"]) == (False, "completed")
    (run,) = agent_runs(log)
    assert run["cwd"] == str(wt) and run["env"]["RELAY_PORTS"] == "31200-31209"
    assert (wt / "setup-ran.local").read_text() == "31200-31209\n"
    assert page["text"].splitlines() == [
        "relay: copied from the checkout (.worktreeinclude): 1 file, 26 B",
        "  .env  (1 file, 26 B)",
        "relay: ports 31200-31209 for this worktree's agents (RELAY_PORT, RELAY_PORTS, PORT)",
        f"relay: $ {setup}    (in {wt}, at most 600 s)",
        f"setting up in {job_id} for {job_id}",
        "API_KEY=from-the-checkout",
        "",
        page["text"].splitlines()[-1],
    ]
    assert page["text"].splitlines()[-1].startswith("relay: the setup command ended with exit code 0 after")
    assert (page["view"], page["complete"]) == ("setup", True)
    assert env["files_changed"] == ["app.txt"]  # the copied .env and the setup's ignored file are not the branch's
    assert snapshot(checkout) == before


async def test_a_failing_setup_command_fails_the_job_with_its_output_and_the_agent_never_starts(
    make_settings: SettingsFactory, checkout: Path, tmp_path: Path
) -> None:
    log, agent_env = argv_log(tmp_path)
    setup = "echo installing; echo npm ERR! no such package >&2; exit 3"
    settings = make_settings(f'[workspaces]\nsetup_command = "{setup}"\n' + agent_env)
    async with Client(build_server(settings)) as c:
        env, failed = await call(
            c, "delegate", {"prompt": "work", "cwd": str(checkout), "mode": "sync", "workspace": "worktree"}
        )
        page, _ = await call(c, "job_result", {"job_id": env["job_id"], "view": "setup"})
    assert (failed, env["status"], env["error"]["code"]) == (True, "failed", "SETUP_FAILED")
    assert "exit code 3" in env["error"]["message"] and "npm ERR! no such package" in env["error"]["message"]
    assert "view='setup'" in env["error"]["hint"]
    assert "installing\nnpm ERR! no such package\n" in page["text"]
    assert agent_runs(log) == []


async def test_two_worktree_jobs_at_once_get_two_different_blocks_of_ports_in_their_environment(
    make_settings: SettingsFactory, checkout: Path, tmp_path: Path
) -> None:
    log, agent_env = argv_log(tmp_path)
    gate = tmp_path / "gate"
    settings = make_settings('[workspaces]\nports = "31300-31399"\nports_per_worktree = 5\n' + agent_env)
    async with Client(build_server(settings)) as c:
        prompt = f"serve [[fake:until={gate}]]"
        args = {"prompt": prompt, "cwd": str(checkout), "mode": "async", "workspace": "worktree"}
        first, _ = await call(c, "delegate", args)
        second, _ = await call(c, "delegate", args)
        with anyio.fail_after(WAIT_S):
            while len(agent_runs(log)) < 2:  # both agents started, neither ended (the gate is shut)
                await anyio.sleep(0.05)
        gate.touch()
        done, _ = await call(c, "job_wait", {"job_ids": [first["job_id"], second["job_id"]], "mode": "all"})
        status, _ = await call(c, "job_status", {"job_id": first["job_id"]})
    envs = {run["env"]["RELAY_JOB_ID"]: run["env"] for run in agent_runs(log)}
    ports = {job: (e["RELAY_PORT"], e["RELAY_PORTS"], e["PORT"]) for job, e in envs.items()}
    assert ports == {
        first["job_id"]: (ports[first["job_id"]][0], ports[first["job_id"]][1], ports[first["job_id"]][0]),
        second["job_id"]: (ports[second["job_id"]][0], ports[second["job_id"]][1], ports[second["job_id"]][0]),
    }
    assert sorted(p[1] for p in ports.values()) == ["31300-31304", "31305-31309"]
    assert done["done"] is True and status["workspace"]["ports"] == ports[first["job_id"]][1]


def test_the_port_a_dev_server_listens_on_is_not_handed_out(make_settings: SettingsFactory, checkout: Path) -> None:
    settings = make_settings('[workspaces]\nports = "31400-31409"\nports_per_worktree = 2\n')
    spaces = Workspaces(settings)
    spaces.create("a", str(checkout), base=None, carry_changes=False)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 31400))
        server.listen()
        assert reserve_ports(settings, spaces.store, "a", set()) == "31402-31403"
    spaces.close()


async def test_a_job_cancelled_during_its_setup_ends_cancelled_its_setup_killed_and_its_agent_never_started(
    make_settings: SettingsFactory, checkout: Path, tmp_path: Path
) -> None:
    log, agent_env = argv_log(tmp_path)
    pidfile = tmp_path / "setup.pid"
    setup = f"echo $$ > {pidfile}; exec sleep 60"
    settings = make_settings(f'[workspaces]\nsetup_command = "{setup}"\n' + agent_env)
    async with Client(build_server(settings)) as c:
        args = {"prompt": "work", "cwd": str(checkout), "mode": "async", "workspace": "worktree"}
        job, _ = await call(c, "delegate", args)
        with anyio.fail_after(WAIT_S):
            while not pidfile.exists() or not pidfile.read_text().strip():
                await anyio.sleep(0.05)
        pid = int(pidfile.read_text())
        with anyio.fail_after(WAIT_S):
            await c.call_tool("job_cancel", {"job_id": job["job_id"]})
        done, _ = await call(c, "job_wait", {"job_ids": [job["job_id"]], "timeout_s": 20})
    assert done["jobs"][0]["status"] == "cancelled"
    assert agent_runs(log) == []
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_a_follow_up_runs_no_setup_again_but_a_worktree_made_again_from_its_branch_is_made_ready_again(
    make_settings: SettingsFactory, checkout: Path, tmp_path: Path
) -> None:
    count = tmp_path / "setups"
    settings = make_settings(f'[workspaces]\nsetup_command = "echo ran >> {count}"\n')

    async def run(engine: Engine, req: JobRequest) -> str:
        job_id = engine.submit(req)
        with anyio.fail_after(WAIT_S):
            rec = await engine.wait_one(job_id, WAIT_S)
        assert rec.status == "completed", engine.envelope(job_id)
        return job_id

    async with Engine(settings).running() as engine:
        first = await run(engine, JobRequest(agent="claude", prompt="one", cwd=str(checkout), workspace="worktree"))
        wt = Path(engine.envelope(first)["workspace"]["path"])
        second = await run(engine, JobRequest(agent="claude", prompt="two", workspace=f"job:{first}"))
        assert count.read_text() == "ran\n"
        assert engine.read_output(second, "setup", 0, 1000)["text"] == ""
        spaces = Workspaces(settings)
        spaces.store.update(first, ended_at=1.0)  # ended long ago: the prune removes its worktree
        assert engine.prune_worktrees() == [first] and not (wt / ".env").exists()
        spaces.close()
        third = await run(engine, JobRequest(agent="claude", prompt="three", workspace=f"job:{first}"))
        assert count.read_text() == "ran\nran\n" and (wt / ".env").read_text() == "API_KEY=from-the-checkout\n"
        assert "relay: the setup command ended with exit code 0" in engine.read_output(third, "setup", 0, 9000)["text"]
