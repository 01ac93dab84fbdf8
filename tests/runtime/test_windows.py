"""relay on Windows, simulated in this process: it starts and serves everything but CLI jobs, which it refuses
with one clear error (UNSUPPORTED_PLATFORM, hint: WSL2).

The simulation: sys.platform is "win32" (what runtime/choice.py branches on) and the POSIX process calls
Windows lacks are removed from `os` (killpg, getpgid, setsid, fork, pidfd_open, geteuid), so any code
path that reached one would fail here as it would there. What this does not prove: that every module
imports on a real Windows Python (see docs/reliability.md, "Windows").
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.cli._errors import EXIT_ERROR
from relay.cli.main import main
from relay.errors import ErrorCode, RelayError
from relay.runtime import choice, procinfo, supervisor
from relay.runtime._unsupported import UnsupportedRuntime
from relay.runtime.invocation import Invocation
from relay.runtime.supervisor import JobFiles
from relay.server.app import build_server
from tests.api.mock_servers import MockServer, Reply
from tests.conftest import SettingsFactory

pytestmark = pytest.mark.anyio

# The POSIX process calls a Windows Python does not have.
POSIX_ONLY = ("killpg", "getpgid", "setsid", "fork", "pidfd_open", "geteuid")
ANTHROPIC_KEY = "sk-ant-test-0123456789abcdefghij"


@pytest.fixture
def windows(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process as relay on Windows would see it; the runtime is chosen afresh on both sides."""
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setitem(sys.modules, "msvcrt", _msvcrt())  # file locks as Windows takes them (osfiles.lock)
    for name in POSIX_ONLY:
        monkeypatch.delattr(os, name, raising=False)
    monkeypatch.delenv("RELAY_RUNTIME", raising=False)  # the portable pass's setting cannot apply here
    choice.reset()
    yield
    choice.reset()  # the POSIX runtimes' own checks (conftest) do not apply to this one


def _msvcrt() -> types.ModuleType:
    """A stand-in for Windows' msvcrt: `locking(fd, LK_NBLCK, 1)` takes the lock or raises OSError at once."""
    import fcntl

    fake = types.ModuleType("msvcrt")

    def locking(fd: int, mode: int, nbytes: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    fake.LK_NBLCK = 2  # type: ignore[attr-defined]
    fake.locking = locking  # type: ignore[attr-defined]
    return fake


async def call(client: Client, tool: str, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    with anyio.fail_after(30):
        result = await client.call_tool(tool, args)
    assert result.structured_content is not None
    return bool(result.is_error), result.structured_content


# the runtime ------------------------------------------------------------------------------------


@pytest.mark.usefixtures("windows")
def test_on_windows_auto_chooses_the_runtime_without_cli_jobs_and_says_why() -> None:
    chosen = choice.choose("auto")
    assert isinstance(chosen.runtime, UnsupportedRuntime)
    assert (chosen.name, chosen.runtime.subreaper) == ("none", False)
    assert chosen.reason.startswith("no CLI jobs on Windows: it needs POSIX process groups")


@pytest.mark.usefixtures("windows")
@pytest.mark.parametrize("forced", ["linux", "portable"])
def test_on_windows_forcing_a_posix_runtime_is_a_configuration_error_at_start_up(forced: str) -> None:
    with pytest.raises(RelayError) as caught:
        choice.choose(forced)
    assert caught.value.code is ErrorCode.CONFIG_INVALID
    assert caught.value.message.startswith(f"RELAY_RUNTIME={forced} cannot run on Windows")
    assert "WSL2" in caught.value.hint


@pytest.mark.usefixtures("windows")
async def test_on_windows_process_queries_answer_without_posix_calls_and_a_spawn_is_refused(tmp_path: Path) -> None:
    choice.use("auto")
    me = os.getpid()
    ticks = procinfo.start_ticks(me)
    assert ticks is not None and procinfo.start_epoch(me) is not None and procinfo.boot_id()
    assert procinfo.is_alive(me, ticks, procinfo.boot_id()) and not procinfo.is_alive(me, ticks + 1)
    assert (procinfo.group_members(me), procinfo.job_processes(me)) == ([], [])
    watch = choice.active().runtime.watch_exit(me, ticks)
    assert watch is not None and not await watch.wait(0.05)
    watch.close()
    files = JobFiles(tmp_path / "job")
    with pytest.raises(RelayError) as caught:
        supervisor.spawn(Invocation(argv=("claude", "-p", "hi"), env={}, cwd=str(tmp_path)), files)
    assert caught.value.code is ErrorCode.UNSUPPORTED_PLATFORM
    assert caught.value.message.startswith("CLI jobs cannot run on Windows: relay has no job runtime here")
    assert caught.value.hint.startswith("use WSL2")
    assert not files.dir.exists()  # refused before anything was made


# the server -------------------------------------------------------------------------------------


@pytest.mark.usefixtures("windows")
async def test_on_windows_the_server_starts_lists_its_tools_answers_ask_and_refuses_delegate(
    make_settings: SettingsFactory, workdir: Path
) -> None:
    with MockServer("anthropic") as anthropic:
        anthropic.script(Reply(text="answered on windows"))
        settings = make_settings(
            RELAY_ANTHROPIC_BASE_URL=anthropic.base_url, ANTHROPIC_API_KEY=ANTHROPIC_KEY, RELAY_RUNTIME="auto"
        )
        async with Client(build_server(settings)) as client:
            with anyio.fail_after(30):
                tools = {tool.name for tool in (await client.list_tools()).tools}
            assert {"ask", "delegate", "job_list"} <= tools
            assert choice.active().name == "none"

            failed, asked = await call(client, "ask", {"prompt": "hello", "model": "sonnet", "mode": "sync"})
            assert (failed, asked["status"], asked["output"]) == (False, "completed", "answered on windows")

            failed, refused = await call(client, "delegate", {"prompt": "hi", "cwd": str(workdir), "mode": "sync"})
            assert failed
            assert refused["error"]["code"] == "UNSUPPORTED_PLATFORM"
            assert refused["error"]["message"].startswith("CLI jobs cannot run on Windows")
            assert refused["error"]["hint"].startswith("use WSL2")

            _, listed = await call(client, "job_list", {})
            assert [job["agent"] for job in listed["jobs"]] == ["anthropic"]  # the refused delegate made no job


# the command line -------------------------------------------------------------------------------


@pytest.mark.usefixtures("windows")
def test_on_windows_relay_run_prints_one_line_naming_what_is_missing_and_wsl2(
    capsys: pytest.CaptureFixture[str], workdir: Path
) -> None:
    assert main(["run", "claude", "hi", "--cwd", str(workdir)]) == EXIT_ERROR
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("relay: UNSUPPORTED_PLATFORM: CLI jobs cannot run on Windows: relay has no job runtime here")
    assert "— hint: use WSL2" in err


@pytest.mark.usefixtures("windows")
def test_on_windows_relay_doctor_names_the_runtime_without_cli_jobs(capsys: pytest.CaptureFixture[str]) -> None:
    main(["doctor"])
    out, _ = capsys.readouterr()
    assert "runtime: none (no CLI jobs on Windows" in out
