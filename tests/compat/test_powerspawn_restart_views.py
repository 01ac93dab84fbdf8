"""Profile `powerspawn` (seed 004 §5): CONTEXT.md after `relay serve --profile powerspawn` is killed and started again.

CONTEXT.md shows the active agents. Over a restart, an agent that outlived the killed server is still active (`list`
and `result` say it runs) and one that ended meanwhile is not: the restarted server's CONTEXT.md says so before it
answers its first call, and keeps saying so as it renders again.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from relay.audit import CONTEXT_FILE
from relay.runtime import procinfo
from tests.compat.conftest import CALL_TIMEOUT_S, call, data
from tests.conftest import FAKES

pytestmark = pytest.mark.anyio

RELAY = str(Path(sys.executable).with_name("relay"))
# A row of CONTEXT.md's table of active agents: | `<agent id>` | agent (model) | task | started |
ROW = re.compile(r"^\| `([0-9a-f]{8})` \|", re.MULTILINE)


def relay_serve(relay_home: Path, workdir: Path) -> Client:
    """A client of a real `relay serve --profile powerspawn` over stdio, its CLIs the fakes."""
    env = {**os.environ, "RELAY_HOME": str(relay_home)}
    params = StdioServerParameters(command=RELAY, args=["serve", "--profile", "powerspawn"], env=env, cwd=str(workdir))
    return Client(params)


def shown(workdir: Path) -> set[str]:
    """The agent ids CONTEXT.md lists as active."""
    path = workdir / CONTEXT_FILE
    return set(ROW.findall(path.read_text(encoding="utf-8"))) if path.exists() else set()


async def running(c: Client) -> set[str]:
    return {row["id"] for row in data(await call(c, "list"))["running"]}


async def until_shown(workdir: Path, wanted: Callable[[set[str]], bool]) -> set[str]:
    """Wait (bounded) until CONTEXT.md's agents are as wanted (it is rendered in a worker thread after a change)."""
    with anyio.fail_after(CALL_TIMEOUT_S):
        while not wanted(ids := shown(workdir)):
            await anyio.sleep(0.05)
    return ids


def job_dir(relay_home: Path, agent_id: str) -> Path:
    (found,) = (relay_home / "jobs").glob(f"{agent_id}*")
    return found


def job_pid(relay_home: Path, agent_id: str) -> int:
    """The pid of an agent's job process (the leader of its process group)."""
    with sqlite3.connect(relay_home / "relay.db") as db:
        (pid,) = db.execute("SELECT pid FROM jobs WHERE id LIKE ?", (f"{agent_id}%",)).fetchone()
    return int(pid)


def server_pid(relay_home: Path) -> int:
    """The pid of the relay that owns the running jobs (one server ran them)."""
    with sqlite3.connect(relay_home / "relay.db") as db:
        (pid,) = {int(row[0]) for row in db.execute("SELECT owner_pid FROM jobs WHERE owner_pid IS NOT NULL")}
    return pid


async def spawn_and_kill(c: Client, relay_home: Path, workdir: Path, gate: Path) -> dict[str, str]:
    """Three agents (one done, two running and shown in CONTEXT.md), then the server killed with SIGKILL; the
    second running one ends once `gate` exists, which is made right after the kill (it ends while no relay runs)."""
    ids = {"quick": data(await call(c, "spawn_codex", prompt="quick [[fake:echo]]"))["agent_id"]}
    ids["survivor"] = data(await call(c, "spawn_codex", prompt="survivor [[fake:sleep=60]]"))["agent_id"]
    ends_later = f"ends while relay is down [[fake:until={gate}]]"
    ids["ended"] = data(await call(c, "spawn_codex", prompt=ends_later))["agent_id"]
    active = {ids["survivor"], ids["ended"]}
    await until_shown(workdir, lambda shown_ids: shown_ids == active)
    assert await running(c) == active
    killed = server_pid(relay_home)
    os.kill(killed, signal.SIGKILL)
    with anyio.fail_after(CALL_TIMEOUT_S):
        while procinfo.is_alive(killed, None):
            await anyio.sleep(0.02)
    gate.touch()
    return ids


async def test_context_md_right_after_a_restart_lists_the_agents_list_shows_running(
    relay_home: Path, workdir: Path, tmp_path: Path
) -> None:
    (relay_home / "config.toml").write_text(f'[agents.codex]\ncommand = "{FAKES / "codex"}"\n')
    ids: dict[str, str] = {}
    try:
        async with relay_serve(relay_home, workdir) as c:
            ids = await spawn_and_kill(c, relay_home, workdir, tmp_path / "gate")
            await call(c, "list")  # the dead server cannot answer
    except (Exception, BaseExceptionGroup):
        if not ids:
            raise  # it failed before the kill
    quick, survivor, ended = ids["quick"], ids["survivor"], ids["ended"]
    exit_file, pid = job_dir(relay_home, ended) / "exit", job_pid(relay_home, ended)
    with anyio.fail_after(CALL_TIMEOUT_S):
        while not exit_file.exists() or procinfo.is_alive(pid, None):  # it ended while no relay watched it
            await anyio.sleep(0.05)
    assert shown(workdir) == {survivor, ended}  # the killed server's view

    async with relay_serve(relay_home, workdir) as c:
        at_start = shown(workdir)  # before any call to the restarted server
        listed = await running(c)
        result = data(await call(c, "result", agent_id=survivor))
        later = data(await call(c, "spawn_codex", prompt="spawned after the restart [[fake:sleep=60]]"))["agent_id"]
        afterwards = await until_shown(workdir, lambda ids: later in ids)
        listed_afterwards = await running(c)
        ended_result = data(await call(c, "result", agent_id=ended))
    assert listed == {survivor} and result["status"] == "running"
    assert at_start == listed
    assert afterwards == listed_afterwards == {survivor, later}
    assert ended_result["success"] is True and quick not in at_start | afterwards
