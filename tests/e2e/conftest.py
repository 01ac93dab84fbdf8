"""Fixtures for the real-CLI tier: the pinned CLIs from .e2e/, a mock model server, a sealed world per test.

Every test gets a fresh HOME, TMPDIR, git-initialised workspace and per-CLI config (Claude's
CLAUDE_CONFIG_DIR, Gemini's settings.json, Codex's config.toml, COPILOT_HOME), all pointing at
one MockModelServer on 127.0.0.1. relay runs in memory behind the official MCP client, with an
environment built from scratch (never os.environ), and after each test no process the test
started may be left running.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from relay.config import Settings, load_settings
from relay.runtime import procinfo
from relay.server.app import build_server
from relay.store import Store
from tests.e2e.mocks import MockModelServer, Reply, WriteFile

REPO = Path(__file__).resolve().parents[2]
CLI_BIN = REPO / ".e2e" / "clis" / "node_modules" / ".bin"
AGENTS = ("claude", "codex", "gemini", "copilot")
INSTALL_CLIS = REPO / "scripts" / "install-clis"

# Keys the CLIs would send, as the test passes them; a developer's real ones must never appear.
MOCK_KEYS = {
    "claude": "sk-ant-e2e-mock-key",
    "codex": "sk-e2e-codex-mock-key",
    "gemini": "e2e-gemini-mock-key",
    "copilot": "sk-e2e-copilot-mock-key",
}
# Planted in the pytest process's environment; relay must not pass any of it on.
LEAK_MARKER = "LEAKED-developer-secret"
LEAKY_VARS = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "OPENAI_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GH_TOKEN",
    "GITHUB_TOKEN",
    "COPILOT_GITHUB_TOKEN",
)
CODEX_KEY_VAR = "RELAY_E2E_CODEX_KEY"
CODEX_MODEL = "gpt-5.5"
COPILOT_MODEL = "gpt-4.1"
GEMINI_MODEL = "gemini-2.5-flash"
# Codex's own stream idle timeout: far above relay's, so a hung upstream is relay's to stop.
CODEX_STREAM_IDLE_MS = 120_000
# Seconds a test waits for one tool call; copilot retries 429/5xx five times (7-24 s).
CALL_TIMEOUT_S = 90.0
# Seconds the teardown gives a finished job's stragglers to vanish before calling it a leak.
LEAK_GRACE_S = 5.0


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "e2e: drives the real agent CLIs (installed by scripts/install-clis) against mock model servers"
    )


@pytest.fixture(scope="session")
def cli_bin() -> Path:
    """The installed CLIs; a missing one fails the tier (it must not silently skip)."""
    missing = [name for name in AGENTS if not os.access(CLI_BIN / name, os.X_OK)]
    if missing:
        pytest.fail(
            f"the real-CLI tier needs {', '.join(missing)} in {CLI_BIN}; run scripts/install-clis first",
            pytrace=False,
        )
    if shutil.which("node") is None:
        pytest.fail("the real-CLI tier needs node (>= 20) on PATH", pytrace=False)
    return CLI_BIN


@dataclass(frozen=True)
class ClaudeClient:
    """One pinned Claude Code used as relay's MCP client: its version and its `claude` launcher."""

    version: str
    bin: Path
    opening: str  # the first message it sends a stdio server: its era's handshake


def claude_client_pins() -> tuple[str, ...]:
    """The Claude Code versions the client tests run on, as scripts/install-clis pins them: the agents'
    pin (installed in .e2e/clis, the 2025 era) and CLAUDE_CLIENT_NEWEST (in .e2e/claude-VERSION)."""
    text = INSTALL_CLIS.read_text(encoding="utf-8")
    older = re.search(r'"@anthropic-ai/claude-code@([\w.-]+)"', text)
    newest = re.search(r'^CLAUDE_CLIENT_NEWEST="([\w.-]+)"', text, re.MULTILINE)
    assert older and newest, "scripts/install-clis pins no Claude Code for the client tests"
    return tuple(dict.fromkeys((older.group(1), newest.group(1))))


def claude_client_bin(version: str) -> Path:
    """Where scripts/install-clis puts Claude Code `version`'s launcher."""
    older = claude_client_pins()[0]
    if version == older:
        return CLI_BIN / "claude"
    return REPO / ".e2e" / f"claude-{version}" / "node_modules" / ".bin" / "claude"


@pytest.fixture(params=claude_client_pins(), ids=lambda v: f"claude-code-{v}")
def claude_client(request: pytest.FixtureRequest, cli_bin: Path) -> ClaudeClient:
    """Each pinned Claude Code in turn, as the client; a missing one fails (never skips)."""
    version = str(request.param)
    path = claude_client_bin(version)
    if not os.access(path, os.X_OK):
        pytest.fail(f"Claude Code {version} is not installed at {path}; run scripts/install-clis first", pytrace=False)
    opening = "initialize" if version == claude_client_pins()[0] else "server/discover"
    return ClaudeClient(version, path, opening)


def _base_path() -> str:
    """PATH for relay and its children: node's directory (the CLIs are node launchers), git, sh."""
    dirs: list[str] = []
    for tool in ("node", "git", "sh", "bash"):
        found = shutil.which(tool)
        if found and os.path.dirname(found) not in dirs:
            dirs.append(os.path.dirname(found))
    for fallback in ("/usr/local/bin", "/usr/bin", "/bin"):
        if fallback not in dirs:
            dirs.append(fallback)
    return os.pathsep.join(dirs)


def _toml(value: Any) -> str:
    """A TOML value for strings, numbers and flat string tables (JSON escapes are valid TOML)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    return json.dumps(str(value))


@dataclass
class World:
    """One test's sealed world: its directories, the mock, and relay wired to both."""

    root: Path
    home: Path
    tmp: Path
    workdir: Path
    relay_home: Path
    mock: MockModelServer
    bin: Path

    # configuration of the CLIs --------------------------------------------------------------

    def agent_env(self, agent: str) -> dict[str, str]:
        """`[agents.NAME.env]`: what each CLI needs to run offline against the mock (reference §3)."""
        url = self.mock.url
        if agent == "claude":
            return {
                "ANTHROPIC_BASE_URL": url,
                "ANTHROPIC_API_KEY": MOCK_KEYS["claude"],
                "CLAUDE_CONFIG_DIR": str(self.home / ".claude"),
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "DISABLE_TELEMETRY": "1",
                "DISABLE_AUTOUPDATER": "1",
                "CLAUDE_CODE_MAX_RETRIES": "0",
                "API_TIMEOUT_MS": "120000",
            }
        if agent == "gemini":
            return {
                "GEMINI_CLI_HOME": str(self.home),
                "GOOGLE_GEMINI_BASE_URL": url,
                "GEMINI_API_KEY": MOCK_KEYS["gemini"],
                "GEMINI_CLI_TRUST_WORKSPACE": "true",
            }
        if agent == "codex":
            return {"CODEX_HOME": str(self.home / ".codex"), CODEX_KEY_VAR: MOCK_KEYS["codex"]}
        if agent == "copilot":
            return {
                "COPILOT_HOME": str(self.home / ".copilot"),
                "COPILOT_OFFLINE": "true",
                "COPILOT_PROVIDER_BASE_URL": f"{url}/v1",
                "COPILOT_PROVIDER_API_KEY": MOCK_KEYS["copilot"],
                "COPILOT_PROVIDER_WIRE_API": "completions",
                "COPILOT_MODEL": COPILOT_MODEL,
            }
        raise ValueError(agent)

    def write_cli_configs(self) -> None:
        """Gemini's settings.json and Codex's config.toml, with every offline and fail-fast key."""
        gemini = self.home / ".gemini"
        gemini.mkdir(parents=True, exist_ok=True)
        settings = {
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False, "maxAttempts": 1},
        }
        (gemini / "settings.json").write_text(json.dumps(settings, indent=2), encoding="utf-8")
        codex = self.home / ".codex"
        codex.mkdir(parents=True, exist_ok=True)
        (codex / "config.toml").write_text(
            f"""model = "{CODEX_MODEL}"
model_provider = "mock"

[model_providers.mock]
name = "mock"
base_url = "{self.mock.url}/v1"
wire_api = "responses"
env_key = "{CODEX_KEY_VAR}"
request_max_retries = 0
stream_max_retries = 0
stream_idle_timeout_ms = {CODEX_STREAM_IDLE_MS}

[features]
plugins = false
remote_plugin = false
plugin_sharing = false
apps = false
in_app_updates = false

[otel]
metrics_exporter = "none"

[analytics]
enabled = false
""",
            encoding="utf-8",
        )
        (self.home / ".copilot").mkdir(parents=True, exist_ok=True)
        (self.home / ".claude").mkdir(parents=True, exist_ok=True)

    # relay ----------------------------------------------------------------------------------

    def relay_environ(self) -> dict[str, str]:
        """relay's whole environment, built from scratch: nothing of the developer's leaks through."""
        return {
            "RELAY_HOME": str(self.relay_home),
            "PATH": _base_path(),
            "HOME": str(self.home),
            "TMPDIR": str(self.tmp),
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "USER": "relay-e2e",
            "RELAY_KILL_GRACE_S": "2",
        }

    def settings(self, **agent_overrides: dict[str, Any]) -> Settings:
        """Write relay's config.toml (all four CLIs on the mock) and load settings from it.

        `agent_overrides` adds keys to an agent's table, e.g. `codex={"idle_timeout_s": 3}`.
        """
        lines: list[str] = []
        for agent in AGENTS:
            lines.append(f"[agents.{agent}]")
            lines.append(f"command = {_toml(str(self.bin / agent))}")
            if agent == "gemini":
                lines.append(f"default_model = {_toml(GEMINI_MODEL)}")
            for key, value in agent_overrides.get(agent, {}).items():
                lines.append(f"{key} = {_toml(value)}")
            lines.append(f"env = {_toml(self.agent_env(agent))}")
            lines.append("")
        (self.relay_home / "config.toml").write_text("\n".join(lines), encoding="utf-8")
        return load_settings(self.relay_environ(), cwd=self.workdir)

    @asynccontextmanager
    async def relay(self, **agent_overrides: dict[str, Any]) -> AsyncIterator[Relay]:
        """relay's MCP server in memory, behind the official MCP client."""
        settings = self.settings(**agent_overrides)
        async with Client(build_server(settings)) as client:
            yield Relay(client, settings, self)

    def target(self, name: str = "hello.txt") -> WriteFile:
        return WriteFile(str(self.workdir / name), f"written by the mock model via {name}\n")


@dataclass
class Relay:
    """A connected MCP client and the settings relay runs with."""

    client: Client
    settings: Settings
    world: World

    async def call(self, tool: str, args: dict[str, Any], timeout: float = CALL_TIMEOUT_S) -> dict[str, Any]:
        with anyio.fail_after(timeout):
            result = await self.client.call_tool(tool, args)
        assert result.structured_content is not None, result
        return dict(result.structured_content)

    async def delegate(self, agent: str, prompt: str, timeout: float = CALL_TIMEOUT_S, **args: Any) -> dict[str, Any]:
        """A delegation in the test's workspace; sync unless `mode` says otherwise."""
        body = {"agent": agent, "prompt": prompt, "cwd": str(self.world.workdir), "mode": "sync", **args}
        if "session_id" in args:
            body.pop("cwd")  # a resumed session runs in its own cwd
        return await self.call("delegate", body, timeout)

    async def wait_final(self, job_id: str, timeout: float) -> dict[str, Any]:
        result = await self.call("job_wait", {"job_ids": [job_id], "timeout_s": timeout}, timeout + 10)
        assert result["done"], f"job {job_id} still {result['jobs'][0]['status']} after {timeout} s"
        return dict(result["jobs"][0])

    def job_pid(self, job_id: str) -> int:
        rec = Store(self.settings.db_path).get_job(job_id)
        assert rec is not None and rec.pid is not None, f"job {job_id} has no recorded process"
        return rec.pid


def _processes_under(root: Path) -> list[int]:
    """Pids whose cwd is inside `root` (a CLI's helpers may leave relay's process group)."""
    found: list[int] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{name}/cwd")
        except OSError:
            continue
        if (cwd == str(root) or cwd.startswith(str(root) + os.sep)) and procinfo.is_alive(int(name), None):
            found.append(int(name))
    return found


def _job_groups(relay_home: Path) -> list[int]:
    db = relay_home / "relay.db"
    if not db.exists():
        return []
    return [rec.pid for rec in Store(db).list_jobs(limit=10_000) if rec.pid is not None]


def _leftovers(root: Path, relay_home: Path) -> dict[int, str]:
    pids = set(_processes_under(root))
    for pgid in _job_groups(relay_home):
        pids.update(procinfo.group_members(pgid))
    out: dict[int, str] = {}
    for pid in sorted(pids):
        try:
            out[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
        except OSError:
            continue
    return out


@pytest.fixture
def world(cli_bin: Path, tmp_path: Path, relay_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    """A fresh, sealed world with a mock model server; afterwards no process of it may be left."""
    for var in LEAKY_VARS:
        monkeypatch.setenv(var, f"{LEAK_MARKER}-{var}")
    root = tmp_path
    home, tmp, workdir = root / "home", root / "tmp", root / "work"
    for path in (home, tmp, workdir):
        path.mkdir()
    subprocess.run(["git", "init", "-q", str(workdir)], check=True, stdin=subprocess.DEVNULL, timeout=30)
    with MockModelServer() as mock:
        w = World(root, home, tmp, workdir, relay_home, mock, cli_bin)
        w.write_cli_configs()
        try:
            yield w
        finally:
            deadline = time.monotonic() + LEAK_GRACE_S
            left = _leftovers(root, relay_home)
            while left and time.monotonic() < deadline:
                time.sleep(0.1)
                left = _leftovers(root, relay_home)
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left running after the test: {left}"
    leaked = [r.path for r in mock.requests if LEAK_MARKER in json.dumps(r.headers) or LEAK_MARKER in r.text]
    assert not leaked, f"a developer's key reached the model server in {leaked}"


def wait_thread_event(event: Any, timeout: float) -> Any:
    """Await a threading.Event without blocking the event loop (bounded by `timeout`)."""
    return anyio.to_thread.run_sync(event.wait, timeout)


@pytest.fixture(scope="session")
def codex_sandbox(cli_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[bool, str]:
    """Whether Codex's bubblewrap sandbox works here: one tiny `codex exec -s read-only` run that tries a write.

    (True, detail) when the write was refused with a read-only file system; (False, detail) when
    the sandbox could not run (no user namespaces) or did not hold.
    """
    root = tmp_path_factory.mktemp("codex-probe")
    home, workdir, tmp = root / "home", root / "work", root / "tmp"
    for path in (home, workdir, tmp):
        path.mkdir()
    subprocess.run(["git", "init", "-q", str(workdir)], check=True, stdin=subprocess.DEVNULL, timeout=30)
    with MockModelServer() as mock:
        w = World(root, home, tmp, workdir, root / "relay", mock, cli_bin)
        w.write_cli_configs()
        probe = w.target("probe.txt")
        mock.script(Reply(write=probe), Reply(text="probe", echo_tool_result=True))
        env = {**w.relay_environ(), **w.agent_env("codex")}
        argv = [str(cli_bin / "codex"), "exec", "--json", "-C", str(workdir), "-s", "read-only", "probe"]
        try:
            proc = subprocess.run(
                argv,
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=60,
                start_new_session=True,
            )
        except subprocess.TimeoutExpired:
            return False, "the codex probe did not finish in 60 s"
    out = proc.stdout + proc.stderr
    if Path(probe.path).exists():
        return False, "codex -s read-only let a shell command write to the workspace"
    if "Read-only file system" in out:
        return True, "bubblewrap enforced read-only"
    return False, f"codex's sandbox did not run (exit {proc.returncode}): {out[-400:]}"
