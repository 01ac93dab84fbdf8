"""What `relay install` writes for each MCP client, as edits of the client's own config files.

Each client gets what it needs for relay to work the first time: the server entry; relay's
tools allowed or approved; a tool timeout far above relay's auto threshold; the start-up
setting that makes a headless run wait for relay; and the client's own way to hand API keys
to relay (names and references only, never a value). Facts come from the pinned CLIs
(Claude Code 2.1.197, Codex 0.169, Gemini CLI 0.61); see docs/clients.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relay.clients.gemini_trust import untrusted_note

SERVER_NAME = "relay"
SCOPES = ("user", "project")

# What install writes as the client's tool timeout: a synchronous delegation may run for
# relay's whole default job wall clock (an hour); auto mode answers long before.
INSTALL_TOOL_TIMEOUT_S = 3600
# Codex gives a server 10 s to start by default; relay on a loaded machine can take a few.
CODEX_STARTUP_TIMEOUT_S = 30

# Variables carrying credentials for the agents and model APIs relay drives.
CREDENTIAL_VARS = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "OPENAI_API_KEY",
    "CODEX_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "XAI_API_KEY",
    "GROK_API_KEY",
    "MISTRAL_API_KEY",
    "OPENROUTER_API_KEY",
    "COPILOT_GITHUB_TOKEN",
    "GH_TOKEN",
    "GITHUB_TOKEN",
    "COPILOT_PROVIDER_API_KEY",
)
# Settings relay and its agents read from the environment (not secret; a client that passes
# only an allowlist, like Codex, must be told their names).
SETTING_VARS = (
    "RELAY_HOME",
    "RELAY_CONFIG",
    "RELAY_ALLOWED_ROOTS",
    "RELAY_TOOLSETS",
    "RELAY_PROFILE",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_MODEL",
    "OPENAI_BASE_URL",
    "GOOGLE_GEMINI_BASE_URL",
    "CLAUDE_CONFIG_DIR",
    "CODEX_HOME",
    "GEMINI_CLI_HOME",
    "COPILOT_HOME",
    "COPILOT_PROVIDER_BASE_URL",
    "COPILOT_MODEL",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    "DISABLE_TELEMETRY",
    "DISABLE_AUTOUPDATER",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
)


@dataclass(frozen=True)
class Context:
    """Where things are: the home and project folders, the environment, the command that starts relay."""

    home: Path
    project: Path
    environ: Mapping[str, str]
    command: tuple[str, ...]  # argv that serves relay over stdio, e.g. ("/usr/bin/relay", "serve")
    auto_threshold_s: float = 45.0
    # `relay install CLIENT --grant LEVEL`: the highest permission this client's model gets without asking.
    grant: str | None = None

    def env_path(self, var: str, default: Path) -> Path:
        value = self.environ.get(var)
        return Path(value).expanduser() if value else default

    def server_env(self) -> dict[str, str]:
        """Fixed variables for the entry: RELAY_HOME when it is set (a path, never a secret), and RELAY_GRANT
        when install was given --grant (relay.jobs.grants: this client's grant, over config.toml's)."""
        home = self.environ.get("RELAY_HOME")
        env = {"RELAY_HOME": home} if home else {}
        if self.grant is not None:
            env["RELAY_GRANT"] = self.grant
        return env


def _always(_: Any) -> bool:
    return True


@dataclass(frozen=True)
class JsonSet:
    """Set the member at `path` (install) / remove it (uninstall)."""

    path: tuple[str, ...]
    value: Any
    why: str = ""
    sane: Callable[[Any], bool] | None = None  # doctor's test of the present value (default: equal)


@dataclass(frozen=True)
class JsonItem:
    """Add `item` to the array at `path` (install) / remove it (uninstall)."""

    path: tuple[str, ...]
    item: Any
    why: str = ""


@dataclass(frozen=True)
class TomlTable:
    """Replace the table `table` by `body` (install) / remove it (uninstall)."""

    table: tuple[str, ...]
    body: dict[str, Any]
    why: str = ""
    sane: Mapping[str, Callable[[Any], bool]] = field(default_factory=lambda: {})


Edit = JsonSet | JsonItem | TomlTable


@dataclass(frozen=True)
class FilePlan:
    path: Path
    fmt: str  # json or toml
    edits: tuple[Edit, ...]


@dataclass(frozen=True)
class ClientSpec:
    name: str
    title: str
    binary: str | None
    plan: Callable[[Context, str], tuple[FilePlan, ...]]
    notes: tuple[str, ...] = ()
    # doctor's advice for this machine and folder beyond the entry itself (None: nothing to say)
    advice: Callable[[Context], str | None] | None = None


def _at_least(seconds: float, scale: float = 1.0) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool) and value >= seconds * scale

    return check


def _entry(ctx: Context, **extra: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"command": ctx.command[0], "args": list(ctx.command[1:])}
    env = ctx.server_env()
    if env:
        entry["env"] = env
    entry.update(extra)
    return entry


def _claude(ctx: Context, scope: str) -> tuple[FilePlan, ...]:
    # alwaysLoad puts relay among the servers a headless `claude -p` connects before its first
    # turn (MCP_CONNECTION_NONBLOCKING only changes the others); `timeout` (ms) overrides
    # MCP_TOOL_TIMEOUT for relay alone.
    entry = _entry(ctx, type="stdio", timeout=INSTALL_TOOL_TIMEOUT_S * 1000, alwaysLoad=True)
    allow = JsonItem(
        ("permissions", "allow"), f"mcp__{SERVER_NAME}", "relay's tools are not allowed (denied in -p mode)"
    )
    if scope == "user":
        config_dir = ctx.env_path("CLAUDE_CONFIG_DIR", ctx.home / ".claude")
        servers = ctx.env_path("CLAUDE_CONFIG_DIR", ctx.home) / ".claude.json"
        return (
            FilePlan(servers, "json", (JsonSet(("mcpServers", SERVER_NAME), entry, "no relay server entry"),)),
            FilePlan(config_dir / "settings.json", "json", (allow,)),
        )
    return (
        FilePlan(ctx.project / ".mcp.json", "json", (JsonSet(("mcpServers", SERVER_NAME), entry, "no relay entry"),)),
        FilePlan(
            ctx.project / ".claude" / "settings.json",
            "json",
            (allow, JsonItem(("enabledMcpjsonServers",), SERVER_NAME, "the project's relay server is not enabled")),
        ),
    )


def _codex(ctx: Context, scope: str) -> tuple[FilePlan, ...]:
    body: dict[str, Any] = {"command": ctx.command[0], "args": list(ctx.command[1:])}
    env = ctx.server_env()
    if env:
        body["env"] = env
    body.update(
        {
            # Codex hands a server only HOME, LANG, PATH, PWD, TERM, TMPDIR, its `env` and these names.
            "env_vars": [*CREDENTIAL_VARS, *SETTING_VARS],
            # Without it `codex exec` asks its model before relay has answered initialize.
            "required": True,
            "startup_timeout_sec": CODEX_STARTUP_TIMEOUT_S,
            "tool_timeout_sec": INSTALL_TOOL_TIMEOUT_S,
            # `codex exec` runs with approval "never": a tool not approved here is refused.
            "default_tools_approval_mode": "approve",
        }
    )
    sane: dict[str, Callable[[Any], bool]] = {
        "command": _always,
        "args": lambda v: isinstance(v, list) and "serve" in v,
        "env": _always,
        "env_vars": lambda v: isinstance(v, list) and all(name in v for name in CREDENTIAL_VARS[:4]),
        "startup_timeout_sec": _at_least(10),
        "tool_timeout_sec": _at_least(ctx.auto_threshold_s + 15),
    }
    base = ctx.env_path("CODEX_HOME", ctx.home / ".codex") if scope == "user" else ctx.project / ".codex"
    table = TomlTable(("mcp_servers", SERVER_NAME), body, "no [mcp_servers.relay] table", sane)
    return (FilePlan(base / "config.toml", "toml", (table,)),)


def _gemini(ctx: Context, scope: str) -> tuple[FilePlan, ...]:
    # Gemini drops every variable whose name looks secret before starting a server, but resolves
    # "$NAME" in the server's env from its own environment: references pass keys, never values.
    env = {**ctx.server_env(), **{name: f"${name}" for name in CREDENTIAL_VARS}}
    entry = _entry(ctx, env=env, timeout=INSTALL_TOOL_TIMEOUT_S * 1000, trust=True)
    base = ctx.env_path("GEMINI_CLI_HOME", ctx.home) / ".gemini" if scope == "user" else ctx.project / ".gemini"
    edit = JsonSet(("mcpServers", SERVER_NAME), entry, "no relay server entry")
    return (FilePlan(base / "settings.json", "json", (edit,)),)


def _cursor(ctx: Context, scope: str) -> tuple[FilePlan, ...]:
    base = ctx.home / ".cursor" if scope == "user" else ctx.project / ".cursor"
    edit = JsonSet(("mcpServers", SERVER_NAME), _entry(ctx, type="stdio"), "no relay server entry")
    return (FilePlan(base / "mcp.json", "json", (edit,)),)


def vscode_user_dir(ctx: Context) -> Path:
    config = ctx.env_path("XDG_CONFIG_HOME", ctx.home / ".config")
    mac = ctx.home / "Library" / "Application Support" / "Code" / "User"
    return mac if mac.is_dir() else config / "Code" / "User"


def _vscode(ctx: Context, scope: str) -> tuple[FilePlan, ...]:
    base = vscode_user_dir(ctx) if scope == "user" else ctx.project / ".vscode"
    edit = JsonSet(("servers", SERVER_NAME), _entry(ctx, type="stdio"), "no relay server entry")
    return (FilePlan(base / "mcp.json", "json", (edit,)),)


CLIENTS: dict[str, ClientSpec] = {
    "claude-code": ClientSpec(
        "claude-code",
        "Claude Code",
        "claude",
        _claude,
        ("relay's tools are allowed in settings.json (`mcp__relay`), so `claude -p` may call them.",),
    ),
    "codex": ClientSpec("codex", "Codex", "codex", _codex),
    "gemini": ClientSpec(
        "gemini",
        "Gemini CLI",
        "gemini",
        _gemini,
        (
            "Gemini starts MCP servers only in folders it trusts: trust the folder once in interactive `gemini`, "
            'or add it to ~/.gemini/trustedFolders.json ({"/path/to/projects": "TRUST_FOLDER"}), '
            "or set GEMINI_CLI_TRUST_WORKSPACE=true.",
        ),
        lambda ctx: untrusted_note(ctx.project, ctx.environ, ctx.env_path("GEMINI_CLI_HOME", ctx.home)),
    ),
    "cursor": ClientSpec(
        "cursor",
        "Cursor",
        None,
        _cursor,
        ("Cursor asks before each tool call unless you allow relay's tools in its settings (no file for that).",),
    ),
    "vscode": ClientSpec(
        "vscode",
        "VS Code",
        "code",
        _vscode,
        ("VS Code asks before each tool call unless you allow relay's tools in the chat view.",),
    ),
}
ALIASES = {"claude": "claude-code", "code": "vscode", "vs-code": "vscode", "gemini-cli": "gemini"}
