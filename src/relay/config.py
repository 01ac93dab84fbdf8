"""Settings: defaults, overridden by `RELAY_HOME/config.toml`, overridden by environment variables.

This is the only module that reads the environment; everything else gets settings as arguments.
"""

from __future__ import annotations

import os
import threading
import tomllib
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from relay.config_tables import DEFAULT_WORKTREE_PORTS as DEFAULT_WORKTREE_PORTS
from relay.config_tables import MIN_TOKEN_CHARS as MIN_TOKEN_CHARS
from relay.config_tables import PERMISSIONS as PERMISSIONS
from relay.config_tables import NamedToken as NamedToken
from relay.config_tables import (
    client_timeouts,
    number,
    ports,
    setup_commands,
    str_table,
    str_tuple,
    test_commands,
    tokens,
)
from relay.errors import ErrorCode, RelayError
from relay.telemetry.settings import telemetry_fields

# The MCP clients relay serves commonly give up on a tool call after 60 s; auto mode answers
# with a job handle before that.
DEFAULT_AUTO_THRESHOLD_S = 45.0
# A whole delegation may take long (a refactor); an hour is a generous default wall clock.
DEFAULT_JOB_TIMEOUT_S = 3600.0
# An agent that prints nothing for this long is considered hung (codex never exits when its
# upstream is down, gemini waits forever on a stalled stream).
DEFAULT_IDLE_TIMEOUT_S = 600.0
# Time between SIGTERM and SIGKILL when a job's process group is stopped.
DEFAULT_KILL_GRACE_S = 5.0
# The `output` carried in a reply; the rest is paged with job_result.
DEFAULT_OUTPUT_LIMIT_CHARS = 20_000
DEFAULT_MAX_CONCURRENT = 8
DEFAULT_MAX_CONCURRENT_PER_AGENT = 4
# Connections a process's PostgreSQL job store may hold at once (its pool; the dashboard's and the listener's apart).
DEFAULT_STORE_POOL_SIZE = 4
DEFAULT_MAX_DEPTH = 2
# A worktree of an ended job that was never landed is kept a week, then removed (its branch stays).
DEFAULT_WORKTREE_KEEP_S = 7 * 86400.0
# Caches of repositories fetched for jobs by URL are removed after this long unused.
DEFAULT_REPOS_KEEP_S = 30 * 86400.0
# A repository host that takes no connection or never answers fails a fetch or push after this.
DEFAULT_GIT_CONNECT_TIMEOUT_S = 30.0
# A land's test command gets ten minutes before it is stopped and the land refused.
DEFAULT_LAND_TEST_TIMEOUT_S = 600.0
# A new worktree's setup command gets 10 minutes; its agents a block of 10 ports, below Linux's ephemeral range.
DEFAULT_SETUP_TIMEOUT_S = 600.0
# A worker's claim on a job lasts this long without a heartbeat (renewed every third of it).
DEFAULT_LEASE_S = 15.0
# A worker not heard from for this long (and named by no queued or running job) leaves the workers table.
DEFAULT_WORKER_RETENTION_S = 7 * 86400.0
DEFAULT_ANTHROPIC_MODELS = ("claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-5")

# The highest permission a calling model may obtain without a person confirming it (`[security] grant`).
DEFAULT_GRANT = "edit"
# ACP agents' permission requests (relay.jobs.approvals): "grant" allows what is within the job's permission and
# asks the person the rest, "ask" asks every one; a request no call asks about within the wait is denied (the driver
# itself denies at 120 s). `[security] approvals`, `approval_wait_s`; `[agents.NAME] approvals`.
APPROVALS = ("grant", "ask")
DEFAULT_APPROVAL_WAIT_S = 90.0
# Process runtimes (relay.runtime.choice): auto picks linux where pidfd, /proc and prctl exist, else portable.
RUNTIMES = ("auto", "linux", "portable")
# How relay drives an agent (`[agents.NAME] protocol`): its CLI's print mode, or the Agent Client Protocol.
PROTOCOLS = ("print", "acp")


@dataclass(frozen=True)
class AgentConfig:
    """Per-agent settings from `[agents.NAME]` in config.toml."""

    command: str | None = None
    extra_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=lambda: {})
    default_model: str | None = None
    models: tuple[str, ...] = ()
    aliases: Mapping[str, str] = field(default_factory=lambda: {})
    timeout_s: float | None = None
    idle_timeout_s: float | None = None
    max_concurrent: int | None = None
    # Generic CLIs only: argument template and output mode.
    args: tuple[str, ...] = ()
    output: str = "text"
    resume_args: tuple[str, ...] = ()
    model_args: tuple[str, ...] = ()
    # "print" (the CLI's headless mode) or "acp" (driven over the Agent Client Protocol, docs/acp.md), with
    # the agent's ACP server command and its arguments (built in for gemini, claude and codex).
    protocol: str = "print"
    acp_command: str | None = None
    acp_args: tuple[str, ...] = ()
    # How this agent's permission requests are answered (APPROVALS; None: `[security] approvals`).
    approvals: str | None = None


class ClientRoots:
    """The folders connected MCP clients declared as their roots (`roots/list`), one list per connection.

    One object shared by every copy of a process's Settings; a connection's roots go when the
    connection (the key, held weakly) does.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._by_connection: weakref.WeakKeyDictionary[object, tuple[str, tuple[Path, ...]]] = (
            weakref.WeakKeyDictionary()
        )
        self.updates = 0  # answers recorded so far

    def set(self, connection: object, client: str, roots: tuple[Path, ...]) -> None:
        with self._changed:
            self._by_connection[connection] = (client, roots)
            self.updates += 1
            self._changed.notify_all()

    def wait_updates(self, count: int, timeout: float) -> bool:
        """Block until `count` answers have been recorded (or `timeout` seconds pass); True when they have."""
        with self._changed:
            return self._changed.wait_for(lambda: self.updates >= count, timeout)

    def sources(self) -> list[tuple[Path, str]]:
        """(root, which client declared it), each root once, in the order the clients declared them."""
        with self._changed:
            declared = list(self._by_connection.values())
        seen: dict[Path, str] = {}
        for client, roots in declared:
            for root in roots:
                seen.setdefault(root, f"the MCP client's roots ({client})")
        return list(seen.items())


@dataclass(frozen=True)
class Settings:
    """Everything relay can be configured with."""

    home: Path
    auto_threshold_s: float = DEFAULT_AUTO_THRESHOLD_S
    job_timeout_s: float = DEFAULT_JOB_TIMEOUT_S
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    kill_grace_s: float = DEFAULT_KILL_GRACE_S
    output_limit_chars: int = DEFAULT_OUTPUT_LIMIT_CHARS
    max_concurrent: int = DEFAULT_MAX_CONCURRENT
    max_concurrent_per_agent: int = DEFAULT_MAX_CONCURRENT_PER_AGENT
    max_depth: int = DEFAULT_MAX_DEPTH
    depth: int = 0
    default_permission: str = "read-only"
    # Where a job's cwd may be, from configuration (see allowed_roots for the whole list) and where they came from.
    configured_roots: tuple[Path, ...] = ()
    configured_roots_from: str = "the folder relay started in"
    # The connected clients' roots (MCP `roots/list`), allowed too when client_roots is on.
    client_roots: ClientRoots = field(default_factory=ClientRoots, compare=False, repr=False)
    # `[security] client_roots` / RELAY_CLIENT_ROOTS; None: on for stdio, off for HTTP (its clients may be others).
    use_client_roots: bool | None = None
    # Load the model SDKs in the background once a client has initialized (RELAY_WARMUP=0: off).
    warmup: bool = True
    # The highest permission a calling model may obtain without asking the person (relay.jobs.grants),
    # where that grant was set (config.toml, RELAY_GRANT, the default), and the grants a chosen profile
    # gives its own toolset's jobs (toolset name -> level; `relay serve --profile powerspawn`).
    grant: str = DEFAULT_GRANT
    grant_source: str = "default"
    toolset_grants: Mapping[str, str] = field(default_factory=lambda: {})
    # ACP agents' permission requests (relay.jobs.approvals): the policy (APPROVALS) and how long one waits.
    approvals: str = "grant"
    approval_wait_s: float = DEFAULT_APPROVAL_WAIT_S
    # Spend caps in USD, enforced from the costs agents report (None: no cap).
    max_cost_usd: float | None = None
    max_session_cost_usd: float | None = None
    agents: Mapping[str, AgentConfig] = field(default_factory=lambda: {})
    # The environment relay was started with; children get an allowlisted part of it.
    environ: Mapping[str, str] = field(default_factory=lambda: {})
    # What the MCP server exposes in tools/list: toolset names (empty: the default), or one profile.
    toolsets: tuple[str, ...] = ()
    profile: str | None = None
    # Tool-call timeouts of MCP clients by name (`[clients.NAME] tool_timeout_s`), over relay's known defaults.
    client_timeouts: Mapping[str, float] = field(default_factory=lambda: {})
    # Which process runtime runs CLI jobs (RUNTIMES); chosen once when the job engine starts.
    runtime: str = "auto"
    # Extra Host names/addresses HTTP clients may use beyond the bound ones (`[server] allowed_hosts`).
    allowed_hosts: tuple[str, ...] = ()
    # Worktrees of ended jobs that were never landed are removed after this long (`[workspaces] keep_days`).
    worktree_keep_s: float = DEFAULT_WORKTREE_KEEP_S
    # Caches of repositories (jobs by URL, `repos_dir`) no job used for this long are removed
    # (`[workspaces] repos_keep_days`; relay.workspaces.repocache).
    repos_keep_s: float = DEFAULT_REPOS_KEEP_S
    # A fetch or push of a job's repository fails when its host takes no connection or never answers within this
    # (`[workspaces] connect_timeout_s`; relay.workspaces._connect).
    git_connect_timeout_s: float = DEFAULT_GIT_CONNECT_TIMEOUT_S
    # Where jobs that may edit (permission edit/full) run when their request does not say (`[workspaces] default`):
    # "cwd" (the folder as it is) or "worktree" (their own git worktree, when the folder is in a repository).
    default_workspace: str = "cwd"
    # A land's test command is stopped after this long (`[workspaces] test_timeout_s`).
    land_test_timeout_s: float = DEFAULT_LAND_TEST_TIMEOUT_S
    # Test commands the person configured (`[workspaces] test_command`, one or a list): a caller naming one of these
    # exactly runs it without asking; any other command a caller names is a `full` action (relay.jobs.grants).
    test_commands: tuple[str, ...] = ()
    # Worktrees made ready (relay.workspaces.ready): setup command by repository, its limit, ports (first, last, per)
    setup_commands: Mapping[str, str] = field(default_factory=lambda: {})
    setup_timeout_s: float = DEFAULT_SETUP_TIMEOUT_S
    worktree_ports: tuple[int, int, int] = DEFAULT_WORKTREE_PORTS
    # What a setup command and a land gate see besides the allowlisted environment (relay.workspaces.procs
    # command_env): `[workspaces] env` (name = value) and `[workspaces] pass_env` (names passed from relay's own).
    command_env: Mapping[str, str] = field(default_factory=lambda: {})
    command_pass_env: tuple[str, ...] = ()
    # HTTP bearer tokens, each a principal with a role (`[server.tokens.NAME]`); empty: the one local user.
    tokens: tuple[NamedToken, ...] = ()
    # The queue (store/claims.py): how long a worker's claim on a job lasts without a heartbeat
    # (`[queue] lease_s` / RELAY_LEASE_S), and whether this process runs jobs (a front with --no-worker does not).
    lease_s: float = DEFAULT_LEASE_S
    runs_jobs: bool = True
    # Workers not heard from for this long leave the workers table (`[queue] worker_retention_days`).
    worker_retention_s: float = DEFAULT_WORKER_RETENTION_S
    # This process as a worker (`relay worker --name --agents --labels --slots`): None/empty: the host and pid,
    # every agent, no labels, max_concurrent slots.
    worker_name: str | None = None
    worker_agents: tuple[str, ...] | None = None
    worker_labels: tuple[str, ...] = ()
    worker_slots: int | None = None
    # Where the job queue lives (`RELAY_STORE` / `[store] url`): a postgresql:// URL, or None for relay.db in home;
    # and how many connections this process's job store may hold on PostgreSQL (`RELAY_STORE_POOL_SIZE` /
    # `[store] pool_size`).
    store_url: str | None = field(default=None, repr=False)
    store_pool_size: int = DEFAULT_STORE_POOL_SIZE
    # What an operator watches (`[telemetry]`, relay.telemetry.settings): the OTLP/HTTP traces URL (None: no traces),
    # `relay worker`'s /metrics port (None: none) and address, a token that may read /metrics besides admin tokens.
    otlp_endpoint: str | None = None
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    metrics_token: str | None = field(default=None, repr=False)

    @property
    def allowed_roots(self) -> tuple[Path, ...]:
        """Where a job's cwd may be: the configured roots, then every connected client's roots."""
        return tuple(root for root, _ in self.root_sources())

    def root_sources(self) -> list[tuple[Path, str]]:
        """Each allowed root with where it came from (config.toml, RELAY_ALLOWED_ROOTS, a client's roots...)."""
        sources = [(root, self.configured_roots_from) for root in self.configured_roots]
        return sources + [(root, why) for root, why in self.client_roots.sources() if root not in self.configured_roots]

    @property
    def db_path(self) -> Path:
        return self.home / "relay.db"

    @property
    def store_target(self) -> str | Path:
        """What `relay.store.open_store` opens for the job queue: the configured URL, else relay.db in home."""
        return self.store_url or self.db_path

    @property
    def jobs_dir(self) -> Path:
        return self.home / "jobs"

    @property
    def worktrees_dir(self) -> Path:
        """Where relay makes the git worktrees of `workspace="worktree"` jobs (docs/workspaces.md says why here)."""
        return self.home / "worktrees"

    @property
    def repos_dir(self) -> Path:
        """Where a worker host caches the repositories its jobs name by URL (one bare repository per URL)."""
        return self.home / "repos"

    def agent(self, name: str) -> AgentConfig:
        return self.agents.get(name, AgentConfig())

    def with_(self, **changes: Any) -> Settings:
        return replace(self, **changes)


def default_home() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("relay", appauthor=False))


def _flag(env_value: str | None, config_value: Any, name: str) -> bool | None:
    """A yes/no setting: the environment's 1/0/true/false over config.toml's boolean; None when neither says."""
    if env_value not in (None, ""):
        lowered = env_value.strip().lower()
        if lowered in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            return lowered in ("1", "true", "yes", "on")
        raise RelayError(ErrorCode.CONFIG_INVALID, f"RELAY_{name.upper()}={env_value!r}", "use 1 or 0")
    if config_value is None or isinstance(config_value, bool):
        return config_value
    raise RelayError(ErrorCode.CONFIG_INVALID, f"{name} in config.toml must be true or false", "fix config.toml")


def _agent_config(name: str, raw: Any) -> AgentConfig:
    if not isinstance(raw, dict):
        raise RelayError(ErrorCode.CONFIG_INVALID, f"[agents.{name}] must be a table", "fix config.toml")
    table: dict[str, Any] = raw  # pyright: ignore[reportUnknownVariableType]
    env = table.get("env", {})
    aliases = table.get("aliases", {})
    if not isinstance(env, dict) or not isinstance(aliases, dict):
        raise RelayError(ErrorCode.CONFIG_INVALID, f"[agents.{name}] env/aliases must be tables", "fix config.toml")

    def optional(key: str, example: float, unit: str, *, whole: bool = False) -> float | None:
        if table.get(key) in (None, ""):
            return None
        return number({}, "", table, f"agents.{name}", key, example, whole=whole, unit=unit)

    concurrency = optional("max_concurrent", DEFAULT_MAX_CONCURRENT_PER_AGENT, "jobs", whole=True)
    protocol = str(table.get("protocol", "print"))
    if protocol not in PROTOCOLS:
        raise RelayError(ErrorCode.CONFIG_INVALID, f"agents.{name}.protocol = {protocol!r}", 'use "print" or "acp"')
    return AgentConfig(
        command=str(table["command"]) if "command" in table else None,
        extra_args=str_tuple(table.get("extra_args"), f"agents.{name}.extra_args"),
        env={str(k): str(v) for k, v in env.items()},  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
        default_model=str(table["default_model"]) if "default_model" in table else None,
        models=str_tuple(table.get("models"), f"agents.{name}.models"),
        aliases={str(k): str(v) for k, v in aliases.items()},  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
        timeout_s=optional("timeout_s", 1.0, "seconds"),
        idle_timeout_s=optional("idle_timeout_s", 1.0, "seconds"),
        max_concurrent=int(concurrency) if concurrency is not None else None,
        args=str_tuple(table.get("args"), f"agents.{name}.args"),
        output=str(table.get("output", "text")),
        resume_args=str_tuple(table.get("resume_args"), f"agents.{name}.resume_args"),
        model_args=str_tuple(table.get("model_args"), f"agents.{name}.model_args"),
        protocol=protocol,
        acp_command=str(table["acp_command"]) if "acp_command" in table else None,
        acp_args=str_tuple(table.get("acp_args"), f"agents.{name}.acp_args"),
        approvals=_approvals(table.get("approvals"), f"agents.{name}.approvals"),
    )


def _approvals(value: Any, where: str) -> str | None:
    """A permission-request policy (APPROVALS), or None when not set."""
    if value not in (None, "", *APPROVALS):
        raise RelayError(ErrorCode.CONFIG_INVALID, f"{where} = {value!r}", f"use one of: {', '.join(APPROVALS)}")
    return str(value) if value else None


def _workspace_default(value: str) -> str:
    value = value.strip().lower()
    if value not in ("cwd", "worktree"):
        raise RelayError(
            ErrorCode.CONFIG_INVALID,
            f"workspaces.default={value!r} is not cwd or worktree",
            "set [workspaces] default (or RELAY_WORKSPACE) to cwd or worktree",
        )
    return value


def _grant(env: Mapping[str, str], security: Any, config_path: Path) -> tuple[str, str]:
    """`RELAY_GRANT` (what `relay install CLIENT --grant` writes into a client's entry), else `[security] grant`."""
    if env.get("RELAY_GRANT"):
        value, source = env["RELAY_GRANT"].strip(), "RELAY_GRANT"
    elif isinstance(security, dict) and security.get("grant") is not None:  # pyright: ignore[reportUnknownMemberType]
        value, source = str(security["grant"]), f"[security] grant in {config_path}"  # pyright: ignore[reportUnknownArgumentType]
    else:
        return DEFAULT_GRANT, "default"
    if value not in PERMISSIONS:
        raise RelayError(
            ErrorCode.CONFIG_INVALID,
            f"{'RELAY_GRANT' if source == 'RELAY_GRANT' else 'security.grant'}={value!r} is not a permission",
            "use read-only, edit or full",
        )
    return value, source


def _store_url(env_value: str | None, config_value: object) -> str | None:
    """`RELAY_STORE`, else `[store] url`: a PostgreSQL URL (shown without anything after its scheme when refused)."""
    value = (env_value or (config_value if isinstance(config_value, str) else "")).strip()
    return check_store_url(value, "RELAY_STORE" if env_value else "[store] url") if value else None


def _pool_size(env_value: str | None, config_value: object) -> int:
    """`RELAY_STORE_POOL_SIZE`, else `[store] pool_size`: a whole number of connections, at least 1."""
    where = "RELAY_STORE_POOL_SIZE" if env_value not in (None, "") else "[store] pool_size"
    value: object = env_value if env_value not in (None, "") else config_value
    if value is None:
        return DEFAULT_STORE_POOL_SIZE
    try:
        size = int(str(value).strip()) if not isinstance(value, bool | float) else 0
    except ValueError:
        size = 0
    if size < 1:
        raise RelayError(
            ErrorCode.CONFIG_INVALID,
            f"{where} must be a whole number of connections, at least 1 (it is {value!r})",
            f"set {where} to {DEFAULT_STORE_POOL_SIZE} (the default), or more for a worker with many slots",
        )
    return size


def check_store_url(value: str, where: str) -> str:
    """`value` when it is a PostgreSQL URL, else CONFIG_INVALID naming `where` (`--store`, `RELAY_STORE`, ...)."""
    value = value.strip()
    if not value.startswith(("postgresql://", "postgres://")):
        raise RelayError(
            ErrorCode.CONFIG_INVALID,
            f"{where} is not a PostgreSQL URL (it starts {value.split('://')[0][:20]!r})",
            f"set {where} to postgresql://user@host:5432/dbname, or leave it out to keep the jobs in relay.db",
        )
    return value


def load_settings(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> Settings:
    """Build settings from config.toml in RELAY_HOME and the environment (which wins)."""
    env = dict(os.environ if environ is None else environ)
    home = Path(env["RELAY_HOME"]).expanduser() if env.get("RELAY_HOME") else default_home()
    raw: dict[str, Any] = {}
    config_path = Path(env["RELAY_CONFIG"]) if env.get("RELAY_CONFIG") else home / "config.toml"
    if config_path.is_file():
        try:
            raw = tomllib.loads(config_path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise RelayError(
                ErrorCode.CONFIG_INVALID, f"{config_path} is not valid TOML: {exc}", "fix or remove the file"
            ) from None
    jobs: dict[str, Any] = raw.get("jobs", {}) if isinstance(raw.get("jobs"), dict) else {}
    spaces: dict[str, Any] = raw.get("workspaces", {}) if isinstance(raw.get("workspaces"), dict) else {}
    server: dict[str, Any] = raw.get("server", {}) if isinstance(raw.get("server"), dict) else {}
    queue: dict[str, Any] = raw.get("queue", {}) if isinstance(raw.get("queue"), dict) else {}
    store: dict[str, Any] = raw.get("store", {}) if isinstance(raw.get("store"), dict) else {}
    agents_raw: dict[str, Any] = raw.get("agents", {}) if isinstance(raw.get("agents"), dict) else {}
    agents = {name: _agent_config(name, table) for name, table in agents_raw.items()}

    claude = agents.get("claude", AgentConfig())
    models = str_tuple(env.get("ANTHROPIC_MODELS"), "ANTHROPIC_MODELS") or claude.models or DEFAULT_ANTHROPIC_MODELS
    default_model = env.get("ANTHROPIC_MODEL") or claude.default_model
    agents["claude"] = replace(claude, models=models, default_model=default_model)

    security: dict[str, Any] = raw.get("security", {}) if isinstance(raw.get("security"), dict) else {}
    roots_raw = security.get("allowed_roots")
    roots = str_tuple(env.get("RELAY_ALLOWED_ROOTS") or roots_raw, "allowed_roots")
    allowed = tuple(Path(r).expanduser().resolve() for r in roots) or ((cwd or Path.cwd()).resolve(),)
    if env.get("RELAY_ALLOWED_ROOTS") == "/" or roots == ("/",):
        allowed = (Path("/"),)
    roots_from = (
        "RELAY_ALLOWED_ROOTS"
        if env.get("RELAY_ALLOWED_ROOTS")
        else ("config.toml [security] allowed_roots" if roots else "the folder relay started in")
    )

    sections = {"jobs": jobs, "workspaces": spaces, "security": security, "queue": queue}

    def pick(key: str, env_key: str, default: float, *, table: str = "jobs", unit: str = "seconds") -> float:
        return number(env, env_key, sections[table], table, key, default, unit=unit)

    def count(key: str, env_key: str, default: int, unit: str) -> int:
        return int(number(env, env_key, jobs, "jobs", key, default, whole=True, unit=unit))

    def days(key: str, env_key: str, default_s: float, table: str) -> float:
        return pick(key, env_key, default_s / 86400, table=table, unit="days")

    def cap(key: str, env_key: str) -> float | None:
        if env.get(env_key) in (None, "") and jobs.get(key) in (None, ""):
            return None
        return number(env, env_key, jobs, "jobs", key, 1.0, unit="US dollars")

    depth_raw = env.get("RELAY_DEPTH", "0")
    depth = int(depth_raw) if depth_raw.isdigit() else 0
    permission = str(jobs.get("default_permission", "read-only"))
    if permission not in PERMISSIONS:
        raise RelayError(
            ErrorCode.CONFIG_INVALID, f"jobs.default_permission={permission!r}", "use read-only, edit or full"
        )
    grant, grant_source = _grant(env, raw.get("security"), config_path)
    runtime = (env.get("RELAY_RUNTIME") or str(jobs.get("runtime") or "")).strip().lower() or "auto"
    if runtime not in RUNTIMES:
        raise RelayError(
            ErrorCode.CONFIG_INVALID, f"RELAY_RUNTIME={runtime!r} is not a runtime", "use auto, linux or portable"
        )
    return Settings(
        home=home,
        auto_threshold_s=pick("auto_threshold_s", "RELAY_AUTO_THRESHOLD_S", DEFAULT_AUTO_THRESHOLD_S),
        job_timeout_s=pick("timeout_s", "RELAY_JOB_TIMEOUT_S", DEFAULT_JOB_TIMEOUT_S),
        idle_timeout_s=pick("idle_timeout_s", "RELAY_IDLE_TIMEOUT_S", DEFAULT_IDLE_TIMEOUT_S),
        kill_grace_s=pick("kill_grace_s", "RELAY_KILL_GRACE_S", DEFAULT_KILL_GRACE_S),
        output_limit_chars=count("output_limit_chars", "RELAY_OUTPUT_LIMIT", DEFAULT_OUTPUT_LIMIT_CHARS, "characters"),
        max_concurrent=count("max_concurrent", "RELAY_MAX_CONCURRENT", DEFAULT_MAX_CONCURRENT, "jobs"),
        max_concurrent_per_agent=count(
            "max_concurrent_per_agent", "RELAY_MAX_CONCURRENT_PER_AGENT", DEFAULT_MAX_CONCURRENT_PER_AGENT, "jobs"
        ),
        max_depth=count("max_depth", "RELAY_MAX_DEPTH", DEFAULT_MAX_DEPTH, "levels"),
        depth=depth,
        default_permission=permission,
        configured_roots=allowed,
        configured_roots_from=roots_from,
        use_client_roots=_flag(env.get("RELAY_CLIENT_ROOTS"), security.get("client_roots"), "client_roots"),
        warmup=_flag(env.get("RELAY_WARMUP"), server.get("warmup"), "warmup") is not False,
        grant=grant,
        grant_source=grant_source,
        approvals=_approvals(env.get("RELAY_APPROVALS") or security.get("approvals"), "security.approvals") or "grant",
        approval_wait_s=pick("approval_wait_s", "RELAY_APPROVAL_WAIT_S", DEFAULT_APPROVAL_WAIT_S, table="security"),
        max_cost_usd=cap("max_cost_usd", "RELAY_MAX_COST_USD"),
        max_session_cost_usd=cap("max_session_cost_usd", "RELAY_MAX_SESSION_COST_USD"),
        agents=agents,
        environ=env,
        client_timeouts=client_timeouts(raw.get("clients")),
        toolsets=str_tuple(env.get("RELAY_TOOLSETS") or server.get("toolsets"), "server.toolsets"),
        profile=(env.get("RELAY_PROFILE") or str(server.get("profile") or "")).strip() or None,
        runtime=runtime,
        allowed_hosts=str_tuple(env.get("RELAY_ALLOWED_HOSTS") or server.get("allowed_hosts"), "server.allowed_hosts"),
        default_workspace=_workspace_default(env.get("RELAY_WORKSPACE") or str(spaces.get("default") or "cwd")),
        worktree_keep_s=86400 * days("keep_days", "RELAY_WORKTREE_KEEP_DAYS", DEFAULT_WORKTREE_KEEP_S, "workspaces"),
        repos_keep_s=86400 * days("repos_keep_days", "RELAY_REPOS_KEEP_DAYS", DEFAULT_REPOS_KEEP_S, "workspaces"),
        git_connect_timeout_s=pick(
            "connect_timeout_s", "RELAY_GIT_CONNECT_TIMEOUT_S", DEFAULT_GIT_CONNECT_TIMEOUT_S, table="workspaces"
        ),
        land_test_timeout_s=pick(
            "test_timeout_s", "RELAY_LAND_TEST_TIMEOUT_S", DEFAULT_LAND_TEST_TIMEOUT_S, table="workspaces"
        ),
        test_commands=test_commands(spaces.get("test_command")),
        setup_commands=setup_commands(spaces),
        setup_timeout_s=pick("setup_timeout_s", "RELAY_SETUP_TIMEOUT_S", 600.0, table="workspaces"),
        worktree_ports=ports(env, spaces),
        command_env=str_table(spaces.get("env"), "workspaces.env"),
        command_pass_env=str_tuple(spaces.get("pass_env"), "workspaces.pass_env"),
        tokens=tokens(server.get("tokens"), env),
        lease_s=pick("lease_s", "RELAY_LEASE_S", DEFAULT_LEASE_S, table="queue"),
        runs_jobs=_flag(env.get("RELAY_RUN_JOBS"), queue.get("run_jobs"), "run_jobs") is not False,
        worker_retention_s=86400
        * days("worker_retention_days", "RELAY_WORKER_RETENTION_DAYS", DEFAULT_WORKER_RETENTION_S, "queue"),
        store_url=_store_url(env.get("RELAY_STORE"), store.get("url")),
        store_pool_size=_pool_size(env.get("RELAY_STORE_POOL_SIZE"), store.get("pool_size")),
        **telemetry_fields(raw.get("telemetry"), env),
    )
