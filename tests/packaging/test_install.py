"""relay as an installable tool: the built wheel and sdist, pipx, uv tool and uvx, and the README's commands.

Each test builds from a copy of the repository (nothing is written into the tree), installs into a
temporary home and runs the installed `relay` as a user would: `relay --version`, `relay doctor
--json`, `initialize` + `tools/list` over stdio with the SDK's client, and the README's commands as
written. `uvx NAME` and `pipx install NAME` are tried against a package index on 127.0.0.1 that holds
the built wheel and its dependencies, as they will run once the distribution is on the Python package
index.
"""

from __future__ import annotations

import functools
import hashlib
import html
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from relay import __version__
from tests.conftest import REPO

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
# Every install here is bounded; a cold cache fetches ~40 wheels.
INSTALL_TIMEOUT_S = 600.0
RUN_TIMEOUT_S = 120.0
# What a copy of the repository leaves out: local environments, caches and build output.
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", ".e2e", "*.egg-info", "build", "dist", "__pycache__", ".*_cache")
# The distribution's name on the Python package index (the command and the import package are `relay`).
DIST_NAME = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"]


@dataclass(frozen=True)
class Dist:
    source: Path  # a copy of the repository, as a clone has it
    wheel: Path
    sdist: Path


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    base = tmp_path_factory.mktemp("dist")
    source = base / "relay"
    shutil.copytree(REPO, source, ignore=NOT_SOURCE)
    out = base / "out"
    run([sys.executable, "-m", "build", "--outdir", str(out), str(source)], timeout=INSTALL_TIMEOUT_S)
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return Dist(source, wheel, sdist)


@pytest.fixture
def home(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A user's environment with nothing of relay's: a fresh HOME, RELAY_HOME and tool folders, bin/ first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RELAY_", "VIRTUAL_ENV", "PYTHON", "UV_", "PIPX_"))}
    env.update(
        HOME=str(tmp_path / "home"),
        RELAY_HOME=str(tmp_path / "relay-home"),
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        PIPX_HOME=str(tmp_path / "pipx"),
        PIPX_BIN_DIR=str(bin_dir),
        PIPX_MAN_DIR=str(tmp_path / "man"),
        UV_TOOL_DIR=str(tmp_path / "uv-tools"),
        UV_TOOL_BIN_DIR=str(bin_dir),
        XDG_CONFIG_HOME=str(tmp_path / "home" / ".config"),
        XDG_DATA_HOME=str(tmp_path / "home" / ".local" / "share"),
    )
    Path(env["HOME"]).mkdir()
    yield env


def run(
    argv: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = RUN_TIMEOUT_S
) -> str:
    done = subprocess.run(
        argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{shlex.join(argv)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def sh(line: str, env: dict[str, str], cwd: Path, timeout: float = RUN_TIMEOUT_S) -> str:
    """One README line, run by a shell as a user would type it."""
    return run(["bash", "-euo", "pipefail", "-c", line], env=env, cwd=cwd, timeout=timeout)


def readme_blocks() -> list[list[str]]:
    """The README's code blocks as lists of commands (comments and blank lines left out)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    blocks: list[list[str]] = []
    for body in re.findall(r"```(?:sh)?\n(.*?)```", text, flags=re.S):
        commands = [re.sub(r"\s+#.*$", "", line).strip() for line in body.splitlines()]
        blocks.append([c for c in commands if c and not c.startswith("#")])
    return blocks


def readme_client_commands() -> list[str]:
    """The block under 'Use it from an MCP client': relay install / uninstall / doctor."""
    (block,) = [b for b in readme_blocks() if b and b[0].startswith("relay install ")]
    return block


def expected_version_line() -> re.Pattern[str]:
    from importlib.metadata import version

    return re.compile(rf"^relay {re.escape(__version__)} \(mcp {re.escape(version('mcp'))}, Python 3\.\d+\.\d+\)$")


async def tools_over_stdio(command: str, args: list[str], env: dict[str, str]) -> set[str]:
    """initialize + tools/list with the SDK's client over stdio; the names of the listed tools."""
    params = StdioServerParameters(command=command, args=args, env=env)
    with anyio.fail_after(RUN_TIMEOUT_S):
        async with Client(params, mode="legacy") as client:
            info = client.server_info
            assert info is not None and (info.name, info.version) == ("relay", __version__)
            listed = await client.list_tools()
    return {t.name for t in listed.tools}


def test_the_wheel_and_the_sdist_pass_twine_check(dist: Dist) -> None:
    out = run([sys.executable, "-m", "twine", "check", "--strict", str(dist.wheel), str(dist.sdist)])
    assert out.count("PASSED") == 2, out
    assert dist.wheel.name == f"relay_mcp_server-{__version__}-py3-none-any.whl"


@pytest.mark.anyio
async def test_the_built_wheel_in_a_clean_venv_answers_version_doctor_and_tools_list(
    dist: Dist, home: dict[str, str], tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(dist.wheel)], timeout=INSTALL_TIMEOUT_S)
    relay = str(venv / "bin" / "relay")
    assert expected_version_line().match(run([relay, "--version"], env=home).strip())
    doctor = json.loads(run([relay, "doctor", "--json"], env=home))
    assert {"agents", "clients", "store", "runtime"} <= set(doctor)
    assert {a["name"] for a in doctor["agents"]} >= {"claude", "codex", "gemini"}
    tools = await tools_over_stdio(relay, ["serve"], home)
    assert {"delegate", "job_wait", "status", "list_tools", "call_tool"} <= tools


def test_after_pipx_installs_the_wheel_the_readme_commands_work_as_written(
    dist: Dist, home: dict[str, str], tmp_path: Path
) -> None:
    sh(f"{shlex.quote(str(BIN / 'pipx'))} install {shlex.quote(str(dist.wheel))}", home, tmp_path, INSTALL_TIMEOUT_S)
    assert (Path(home["PIPX_BIN_DIR"]) / "relay").exists()
    project = tmp_path / "project"
    project.mkdir()
    for command in readme_client_commands():
        sh(command, home, project)
    # `relay install claude-code` wrote the entry, and it runs the relay pipx installed.
    entry = json.loads((Path(home["HOME"]) / ".claude.json").read_text(encoding="utf-8"))["mcpServers"]["relay"]
    assert Path(entry["command"]).resolve() == (Path(home["PIPX_HOME"]) / "venvs" / DIST_NAME / "bin" / "relay")
    assert (project / ".gemini" / "settings.json").exists()


def test_a_fresh_shell_running_only_the_readme_first_line_can_then_run_relay_and_install_it_into_claude_code(
    dist: Dist, tmp_path: Path
) -> None:
    (first,) = readme_blocks()[0]
    # Python alone is enough: pipx comes from PyPI with python3's own pip.
    assert first.startswith("python3 -m pip install --user pipx && python3 -m pipx install ."), first
    home = tmp_path / "home"
    home.mkdir()
    # A new user's shell: nothing of relay's, pipx's or uv's; no folder on PATH that holds a `relay` already.
    keep = (k for k in os.environ if not k.startswith(("RELAY_", "VIRTUAL_ENV", "PYTHON", "UV_", "PIPX_", "PIP_USER")))
    env = {k: os.environ[k] for k in keep}
    path = [d for d in env.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "relay").exists()]
    env.update(
        HOME=str(home),
        RELAY_HOME=str(tmp_path / "relay-home"),
        PATH=os.pathsep.join(path),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
    )
    # The README's line as written, then two commands typed in the same shell.
    script = f"{first}\nrelay --version\nrelay install claude-code\n"
    out = run(["bash", "-e", "-c", script], env=env, cwd=dist.source, timeout=INSTALL_TIMEOUT_S).strip().splitlines()
    versions = [line for line in out if expected_version_line().match(line)]
    assert len(versions) == 2, out  # the line's own `relay --version`, and the one after it
    # The entry it wrote runs the relay pipx installed in that home.
    entry = json.loads((home / ".claude.json").read_text(encoding="utf-8"))["mcpServers"]["relay"]
    command = Path(entry["command"]).resolve()
    assert (command.name, command.parent.parent.name, entry["args"]) == ("relay", DIST_NAME, ["serve"])
    assert command.is_relative_to(home)


def test_the_readme_keeps_scripts_test_as_its_second_command_and_ci_runs_exactly_that() -> None:
    assert readme_blocks()[1] == ["./scripts/test"]
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert [line for line in ci.splitlines() if line.startswith("exec ")] == ["exec ./scripts/test"]


@pytest.mark.anyio
async def test_uvx_serves_stdio_from_the_built_wheel(dist: Dist, home: dict[str, str]) -> None:
    uvx = str(BIN / "uvx")
    env = home | {"UV_CACHE_DIR": str(Path(home["HOME"]) / "uv-cache")}
    assert expected_version_line().match(
        run([uvx, "--from", str(dist.wheel), "relay", "--version"], env=env, timeout=INSTALL_TIMEOUT_S).strip()
    )
    tools = await tools_over_stdio(uvx, ["--from", str(dist.wheel), "relay", "serve"], env)
    assert "delegate" in tools


@dataclass(frozen=True)
class Index:
    url: str  # a PEP 503 simple index: the built wheel and every wheel it needs, nothing else


class _QuietFiles(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def index(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    """A package index on 127.0.0.1 as PyPI will serve relay: the wheel under its distribution's name, beside
    its dependencies (fetched once through pip's own configured index, as any install here does)."""
    root = tmp_path_factory.mktemp("index")
    files = root / "files"
    run(
        [sys.executable, "-m", "pip", "download", "-q", "--dest", str(files), str(dist.wheel)],
        timeout=INSTALL_TIMEOUT_S,
    )
    projects: dict[str, list[Path]] = {}
    for f in sorted(files.iterdir()):
        name = re.sub(r"[-_.]+", "-", re.split(r"-\d", f.name, maxsplit=1)[0]).lower()
        projects.setdefault(name, []).append(f)
    assert DIST_NAME in projects, sorted(projects)
    for name, found in projects.items():
        links = "".join(
            f'<a href="../../files/{html.escape(f.name)}#sha256={hashlib.sha256(f.read_bytes()).hexdigest()}">'
            f"{html.escape(f.name)}</a>\n"
            for f in found
        )
        (root / "simple" / name).mkdir(parents=True)
        (root / "simple" / name / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    listing = "".join(f'<a href="{n}/">{n}</a>\n' for n in sorted(projects))
    (root / "simple" / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{listing}</body></html>\n")
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietFiles, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Index(f"http://127.0.0.1:{server.server_address[1]}/simple/")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=RUN_TIMEOUT_S)


def only_the_index(home: dict[str, str]) -> dict[str, str]:
    """pip and uv see no index but the one named on the command line: no config file, no find-links."""
    env = {k: v for k, v in home.items() if not k.startswith("PIP_")}
    return env | {"PIP_CONFIG_FILE": os.devnull, "UV_NO_CONFIG": "1"}


def test_uvx_runs_relay_by_its_distribution_name_from_a_package_index(index: Index, home: dict[str, str]) -> None:
    env = only_the_index(home) | {"UV_CACHE_DIR": str(Path(home["HOME"]) / "uv-cache")}
    argv = [str(BIN / "uvx"), "--python", sys.executable, "--index-url", index.url, DIST_NAME, "--version"]
    assert expected_version_line().match(run(argv, env=env, timeout=INSTALL_TIMEOUT_S).strip())


def test_pipx_installs_relay_by_its_distribution_name_from_a_package_index(index: Index, home: dict[str, str]) -> None:
    env = only_the_index(home)
    run([str(BIN / "pipx"), "install", "--index-url", index.url, DIST_NAME], env=env, timeout=INSTALL_TIMEOUT_S)
    bin_dir = Path(home["PIPX_BIN_DIR"])
    for command in ("relay", DIST_NAME):
        assert expected_version_line().match(run([command, "--version"], env=env).strip()), command
        assert (bin_dir / command).resolve().parent.parent.name == DIST_NAME
