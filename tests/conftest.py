"""Shared fixtures: every test gets its own RELAY_HOME; fakes of the agent CLIs live in tests/fakes."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp.client.session import ClientSession
from mcp.types import CallToolResult

from relay.config import Settings, load_settings
from relay.gateway import _glossary
from relay.runtime import choice, procinfo
from tests import session_costs
from tests.postgres import Cluster, pg_bin

FAKES = Path(__file__).resolve().parent / "fakes"
FAKE_CLAUDE = FAKES / "claude"
REPO = Path(__file__).resolve().parents[1]
RECORDINGS = FAKES / "recordings"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# The tests that exercise the process runtime carry the `runtime` marker; scripts/test runs them a
# second time with RELAY_RUNTIME=portable (`pytest -m runtime`), as on macOS: os.pidfd_open is then
# removed, so nothing may reach it, and every engine, spawn and identity check uses the portable path.
RUNTIME_TESTS = (
    "tests/jobs/",
    "tests/runtime/",
    "tests/reliability/test_adversarial_agents.py",
    "tests/reliability/test_restarts.py",
)
# What only the Linux runtime promises (a subreaper shim adopts what a job orphans): not run again
# under the portable runtime, and skipped where the Linux runtime cannot run.
LINUX_ONLY = ("tests/runtime/test_launcher.py", "tests/runtime/test_no_escape.py")
PORTABLE_PASS = os.environ.get("RELAY_RUNTIME") == "portable"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "runtime: exercises the process runtime (run again with RELAY_RUNTIME=portable)")
    config.addinivalue_line("markers", "linux_runtime: needs the Linux runtime (pidfd, /proc, a subreaper)")
    config.addinivalue_line(
        "markers", "cluster: hosts simulated by network namespaces (root and `ip`; fails under CI=true without)"
    )
    config.add_cleanup(session_costs.tools_built_once())
    config.add_cleanup(session_costs.python3_without_shim())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    linux_missing = choice.linux_missing()
    for item in items:
        where = Path(str(item.path)).relative_to(REPO).as_posix()
        if where.startswith(LINUX_ONLY) or item.get_closest_marker("linux_runtime"):
            item.add_marker(pytest.mark.linux_runtime)
            if linux_missing:
                item.add_marker(pytest.mark.skip(reason=f"the Linux runtime cannot run here: {linux_missing}"))
        elif where.startswith(RUNTIME_TESTS):
            item.add_marker(pytest.mark.runtime)


@pytest.fixture(scope="session")
def empty_glossary_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("no-glossary")


@pytest.fixture(autouse=True)
def no_installed_glossary(empty_glossary_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tool search reads a computing glossary when the machine has one (`dict-foldoc`); tests see only the
    glossaries they make, so what they rank does not depend on what is installed."""
    monkeypatch.setenv("RELAY_GLOSSARY_DIR", str(empty_glossary_dir))
    _glossary.glossary.cache_clear()
    yield
    _glossary.glossary.cache_clear()


@pytest.fixture(autouse=True)
def process_runtime(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test chooses the runtime afresh; in the portable pass, as on a platform without pidfd.

    In that pass a test that ends with the Linux runtime chosen fails: it would have passed
    without proving anything about the portable path.
    """
    choice.reset()
    portable = PORTABLE_PASS and request.node.get_closest_marker("linux_runtime") is None
    if portable:
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    yield
    chosen = choice._active  # pyright: ignore[reportPrivateUsage]
    choice.reset()
    if portable and chosen is not None:
        assert chosen.name == "portable", f"the portable pass ran the {chosen.name} runtime: {chosen.reason}"


# How many error results were checked against their tool's output schema (the check must be seen to run).
ERROR_RESULTS_VALIDATED: list[str] = []


@pytest.fixture(autouse=True, scope="session")
def every_result_matches_its_output_schema() -> Iterator[None]:
    """Every tool result any test receives must be valid against the tool's published output schema.

    The SDK's client checks successful results only; MCP Inspector and other clients check error
    results too, so this wraps the client session to check those as well.
    """
    original = ClientSession.call_tool

    async def checked(self: ClientSession, name: str, *args: Any, **kwargs: Any) -> Any:
        result = await original(self, name, *args, **kwargs)
        if isinstance(result, CallToolResult) and result.is_error:
            await self.validate_tool_result(name, result)
            ERROR_RESULTS_VALIDATED.append(name)
        return result

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ClientSession, "call_tool", checked)
        yield


@pytest.fixture(autouse=True)
def relay_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Tests never touch the real home: RELAY_HOME points at a fresh temporary folder.

    A job outlives the relay that started it (by design), so a test that leaves one running (a hang
    fake whose `relay run` was killed) would leak it: at the end, every job left under this home is killed.
    """
    home = tmp_path / "relay-home"
    home.mkdir()
    monkeypatch.setenv("RELAY_HOME", str(home))
    yield home
    if (home / "jobs").is_dir():
        kill_jobs_under(home)


def kill_jobs_under(home: Path) -> list[int]:
    """Kill the process group of every job shim (`sh -c ... relay-job HOME/jobs/ID ...`) under `home`."""
    prefix = str(home / "jobs") + os.sep
    proc = Path("/proc")
    killed: list[int] = []
    for entry in proc.iterdir() if (proc / "self").exists() else ():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"relay-job" not in argv:
            continue
        at = argv.index(b"relay-job")
        if at + 1 < len(argv) and argv[at + 1].decode(errors="replace").startswith(prefix):
            with contextlib.suppress(OSError):
                os.killpg(int(entry.name), 9)  # the shim leads its job's process group
                killed.append(int(entry.name))
    return killed


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


SettingsFactory = Callable[..., Settings]


@pytest.fixture
def make_settings(relay_home: Path, workdir: Path) -> SettingsFactory:
    """Settings with the fake claude configured; keyword arguments become env overrides or config text."""

    def make(config: str = "", **env: str) -> Settings:
        text = f'[agents.claude]\ncommand = "{FAKE_CLAUDE}"\n' + config
        (relay_home / "config.toml").write_text(text)
        base = {"RELAY_HOME": str(relay_home), "PATH": os.environ.get("PATH", ""), "HOME": str(relay_home)}
        if PORTABLE_PASS:
            base["RELAY_RUNTIME"] = "portable"
        base.update(env)
        return load_settings(base, cwd=workdir)

    return make


def processes_in_group(pgid: int) -> list[int]:
    return procinfo.group_members(pgid)


@pytest.fixture
def reap_groups() -> Iterator[list[int]]:
    """Collects process groups a test started; kills whatever is left so a failing test leaks nothing."""
    groups: list[int] = []
    yield groups
    for pgid in groups:
        with contextlib.suppress(OSError):
            os.killpg(pgid, 9)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """A throwaway PostgreSQL cluster for the whole session (tests/postgres.py); stopped by its pid at the end.

    Missing PostgreSQL: the test fails under CI=true (scripts/install-system-tools installs it), else skips.
    """
    bin_dir = pg_bin()
    if bin_dir is None:
        message = "no PostgreSQL under /usr/lib/postgresql/*/bin (apt-get install postgresql)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    with Cluster(bin_dir) as cluster:
        yield cluster


@pytest.fixture
def pg_url(pg_cluster: Cluster) -> Iterator[str]:
    """The URL of a new, empty database of the session's cluster, dropped after the test."""
    url = pg_cluster.new_database()
    yield url
    pg_cluster.drop_database(url)
