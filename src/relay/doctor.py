"""`relay doctor`: is each agent CLI installed, which version, tested or not, credentials, and a live smoke run."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from relay.agents import get_adapter, known_agents, launch_command, protocol_of
from relay.config import AgentConfig, Settings

# `--version` of a healthy CLI answers in well under a second; gemini takes ~3 s to start.
VERSION_TIMEOUT_S = 10.0

# The versions relay's adapters were built and tested against ([min, max) by major.minor.patch).
TESTED: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "claude": ((2, 1, 0), (2, 2, 0)),
    "codex": ((0, 160, 0), (0, 170, 0)),
    "gemini": ((0, 60, 0), (0, 62, 0)),
    "copilot": ((1, 0, 100), (1, 1, 0)),
}
# Versions known to break relay's parsing or flags: agent -> {version: why}.
KNOWN_BROKEN: dict[str, dict[str, str]] = {}

# Where each CLI keeps a login, and which variables carry a key (relay passes these through).
CREDENTIAL_ENV: dict[str, tuple[str, ...]] = {
    "claude": ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"),
    "codex": ("OPENAI_API_KEY", "CODEX_API_KEY"),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "copilot": ("COPILOT_GITHUB_TOKEN", "GH_TOKEN", "GITHUB_TOKEN", "COPILOT_PROVIDER_API_KEY"),
}
CREDENTIAL_FILES: dict[str, tuple[str, ...]] = {
    "claude": ("{CLAUDE_CONFIG_DIR}/.credentials.json", "~/.claude/.credentials.json"),
    "codex": ("{CODEX_HOME}/auth.json", "~/.codex/auth.json"),
    "gemini": ("~/.gemini/oauth_creds.json",),
    "copilot": ("{COPILOT_HOME}/config.json", "~/.copilot/config.json"),
}

VERSION_RE = re.compile(r"(\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True)
class AgentReport:
    name: str
    found: bool
    path: str | None
    version: str | None
    version_status: str  # tested, untested, broken, unknown, missing
    credentials: str  # where a credential was found, or "missing"
    note: str
    smoke: str | None = None  # ok, or the error code of a live run
    protocol: str = "print"  # how relay drives it: its print mode, or "acp" (docs/acp.md)
    acp_command: str | None = None  # where its ACP server command was found (None: not found, or none)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _version_status(agent: str, version: str | None) -> tuple[str, str]:
    if version is None:
        return "unknown", "could not read the version"
    broken = KNOWN_BROKEN.get(agent, {})
    if version in broken:
        return "broken", broken[version]
    bounds = TESTED.get(agent)
    if bounds is None:
        return "untested", "relay has no tested range for this CLI"
    parsed = tuple(int(p) for p in version.split("."))
    low, high = bounds
    if low <= parsed < high:
        return "tested", ""
    lo, hi = ".".join(map(str, low)), ".".join(map(str, high))
    return "untested", f"relay was tested with >= {lo}, < {hi}; flags or output may differ"


def _credentials(agent: str, env: Mapping[str, str]) -> str:
    for name in CREDENTIAL_ENV.get(agent, ()):
        if env.get(name):
            return f"env:{name}"
    if agent == "copilot" and env.get("COPILOT_PROVIDER_BASE_URL"):
        return "env:COPILOT_PROVIDER_BASE_URL (BYOK)"
    home = env.get("HOME", "")
    for pattern in CREDENTIAL_FILES.get(agent, ()):
        if "{" in pattern:
            var = pattern[1 : pattern.index("}")]
            if not env.get(var):
                continue
            pattern = env[var] + pattern[pattern.index("}") + 1 :]
        path = Path(pattern.replace("~", home, 1)) if pattern.startswith("~") and home else Path(pattern)
        if path.is_file():
            return f"file:{path}"
    return "missing"


def read_version(path: str, env: Mapping[str, str]) -> str | None:
    try:
        out = subprocess.run(
            [path, "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT_S,
            env=dict(env),
            start_new_session=True,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = VERSION_RE.search(out.stdout + out.stderr)
    return ".".join(match.groups()) if match else None


def diagnose(
    settings: Settings,
    which: Callable[[str], str | None] = shutil.which,
    version_of: Callable[[str, Mapping[str, str]], str | None] = read_version,
) -> list[AgentReport]:
    """One report per known agent (built-in and config-declared)."""
    reports: list[AgentReport] = []
    for name in known_agents(settings):
        cfg = settings.agent(name)
        adapter = get_adapter(name, settings)
        command = launch_command(adapter, cfg)
        path = which(command)
        protocol, acp_path = protocol_of(adapter), _acp_command(name, cfg, which)
        env = {**settings.environ, **cfg.env}
        creds = _credentials(name, env) if name in CREDENTIAL_ENV else "n/a"
        if path is None:
            note = f"not installed: {adapter.install_hint}"
            reports.append(AgentReport(name, False, None, None, "missing", creds, note, None, protocol, acp_path))
            continue
        if protocol == "acp" and command != (cfg.command or name):
            # An ACP adapter package (claude-agent-acp, codex-acp): no `--version` to read.
            note = "over ACP; the adapter's version is not checked"
            if creds == "missing":
                note += f"; no credentials: set {' or '.join(CREDENTIAL_ENV[name][:2])}"
            reports.append(AgentReport(name, True, path, None, "untested", creds, note, None, protocol, acp_path))
            continue
        version = version_of(
            path, {k: v for k, v in env.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")} | dict(cfg.env)
        )
        status, note = _version_status(name, version) if name in TESTED else ("untested", "declared in config.toml")
        if creds == "missing":
            note = (
                note + "; " if note else ""
            ) + f"no credentials: set {' or '.join(CREDENTIAL_ENV[name][:2])}, or log in with `{command}`"
        note = ("over ACP" + ("; " if note else "") if protocol == "acp" else "") + note
        reports.append(AgentReport(name, True, path, version, status, creds, note, None, protocol, acp_path))
    return reports


def _acp_command(name: str, cfg: AgentConfig, which: Callable[[str], str | None]) -> str | None:
    """Where the agent's ACP server command (configured or built in) is found, whatever protocol it runs on now."""
    from relay.agents.acp import acp_adapter

    adapter = acp_adapter(name, cfg)
    return which(adapter.executable) if adapter is not None else None


TABLE_HEADERS = ["AGENT", "FOUND", "VERSION", "STATUS", "CREDENTIALS", "SMOKE", "PATH / NOTE"]


def table_rows(reports: list[AgentReport]) -> list[list[str]]:
    """One row per report, in TABLE_HEADERS order, for the CLI's table."""
    return [
        [
            r.name,
            "yes" if r.found else "no",
            r.version or "-",
            r.version_status,
            r.credentials,
            r.smoke or "-",
            " ".join(x for x in ((r.path or ""), (f"({r.note})" if r.note else "")) if x),
        ]
        for r in reports
    ]


def store_report(settings: Settings) -> tuple[str, bool]:
    """One line about relay.db (SQLite's integrity check, free space beside it) and whether all is well;
    for a PostgreSQL store (RELAY_STORE), whether it answers and its migrations."""
    from relay.store.health import LOW_SPACE_BYTES, check_store

    if settings.store_url is not None:
        return _pg_store_report(settings.store_url, settings.home)

    check = check_store(settings.db_path)
    free = f"{check.free_bytes / (1 << 30):.1f} GB free" if check.free_bytes is not None else "free space unknown"
    if check.integrity == "ok":
        state = "integrity ok"
    elif check.integrity == "missing":
        state = "not created yet"
    else:
        state = f"DAMAGED: {check.integrity} (stop relay, then: sqlite3 {check.path} .recover | sqlite3 recovered.db)"
    if check.free_bytes is not None and check.free_bytes < LOW_SPACE_BYTES:
        free = f"LOW SPACE: {check.free_bytes} bytes free (free some, or move RELAY_HOME)"
    return f"store: {check.path}: {state}; {free}", check.ok


def _pg_store_report(url: str, home: Path) -> tuple[str, bool]:
    from relay.errors import RelayError
    from relay.store import open_store
    from relay.store.pg.errors import redact

    try:
        store = open_store(url, home=home)
    except RelayError as err:
        return f"store: {redact(url)}: {err.code.value}: {err.message} (hint: {err.hint})", False
    try:
        applied = store.applied_migrations()
    finally:
        store.close()
    return f"store: {redact(url)} (PostgreSQL): answers; {len(applied)} migrations, the last {applied[-1]}", True


def audit_report(settings: Settings) -> tuple[str, bool]:
    """One line about what the audit log's record can prove: against a witness on the PostgreSQL store, whether
    relay's role could rewrite it; without one, what the local chain can and cannot catch. False: a witness
    is there but relay's own role could rewrite it."""
    from relay.audit import unwitnessed
    from relay.errors import RelayError

    if settings.store_url is None:
        return f"audit: {unwitnessed()}", True
    from relay.store.pg.witness import status_at

    try:
        status = status_at(settings.store_url)
    except RelayError as err:
        return f"audit: the witness cannot be checked: {err.code.value}: {err.message}", True
    return f"audit: {status.describe()}", not status.present or status.holds


def worktree_report(settings: Settings) -> tuple[str, dict[str, Any]]:
    """One line about the worktrees of worktree jobs (how many, their disk use, each branch) and the details: every
    folder under the worktrees folder, recorded or not (`unrecorded`: a killed relay's, which the next start-up sweep
    removes), and git's locks left on it (`locks`: `locked`, index.lock)."""
    from relay.workspaces import Workspaces

    if not settings.db_path.exists() or not settings.worktrees_dir.is_dir():
        return f"worktrees: none ({settings.worktrees_dir})", {"count": 0, "bytes": 0, "worktrees": []}
    spaces = Workspaces(settings)
    try:
        usage = spaces.usage()
    finally:
        spaces.close()
    size = f"{usage['bytes'] / (1 << 20):.1f} MB"
    each = ", ".join(
        f"{w['branch']} ({w['state']}{', locked by git' if w.get('locks') else ''})" for w in usage["worktrees"][:10]
    )
    more = f" and {usage['count'] - 10} more" if usage["count"] > 10 else ""
    line = f"worktrees: {usage['count']} in {settings.worktrees_dir}, {size}" + (f": {each}{more}" if each else "")
    return line, usage


def repos_report(settings: Settings) -> tuple[str, dict[str, Any]]:
    """One line about the cache of repositories fetched for jobs by URL (path, how many, size) and the details;
    the size is counted for at most a few seconds (then given as "at least")."""
    from relay.workspaces.repocache import usage

    found = usage(settings.repos_dir, settings.repos_keep_s)
    if not found["count"]:
        return f"repos cache: none ({settings.repos_dir})", found
    size = f"{'at least ' if not found['complete'] else ''}{found['bytes'] / (1 << 20):.1f} MB"
    kept = f"removed after {found['keep_days']:g} days unused"
    count = "1 repository" if found["count"] == 1 else f"{found['count']} repositories"
    return f"repos cache: {count} in {settings.repos_dir}, {size} ({kept})", found


def sandbox_report(environ: Mapping[str, str]) -> dict[str, Any]:
    """Which sandbox execute_code runs in here, and what it cannot stop (for `relay doctor`)."""
    from relay.sandbox.isolation import detect

    iso = detect(environ)
    return {"mode": iso.mode, "details": iso.describe(), "network": iso.network, "cannot_stop": list(iso.cannot_stop)}


# Most queued jobs `relay doctor` counts one by one (beyond: "N+").
QUEUED_COUNT_LIMIT = 1000
NO_WORKER_HINT = (
    "no worker runs, so queued jobs wait: start `relay worker`, or a `relay serve` without --no-worker"
    " (a relay with [queue] run_jobs = false or RELAY_RUN_JOBS=0 only queues jobs)"
)


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _age(seconds: float) -> str:
    if seconds >= 3600:
        return f"{int(seconds // 3600)}h"
    return f"{int(seconds // 60)}m" if seconds >= 120 else f"{int(seconds)}s"


def queue_report(settings: Settings) -> tuple[str, dict[str, Any]]:
    """One line about the store's queue: the workers running, the stale ones (heartbeat older than their lease),
    the jobs waiting for a claim; with a hint when jobs wait and no worker runs. And the details."""
    import time

    from relay.errors import RelayError
    from relay.store import open_store

    details: dict[str, Any] = {"workers_running": [], "stale": [], "queued": 0, "oldest_queued_s": None, "hint": None}
    if settings.store_url is None and not settings.db_path.exists():
        return "queue: no store yet (no job was ever submitted)", details
    try:
        store = open_store(settings.store_target, home=settings.home)
    except RelayError as err:
        return f"queue: the store cannot be read: {err.code.value}", details
    try:
        workers = store.list_workers(include_stopped=False)
        queued = [
            r
            for r in store.list_jobs(statuses=("queued",), limit=QUEUED_COUNT_LIMIT + 1)
            if r.kind == "cli" and r.worker is None
        ]
    finally:
        store.close()
    now = time.time()
    stale = [w for w in workers if now - w.heartbeat_at > w.lease_s]
    running = [w for w in workers if w not in stale]
    details["workers_running"] = [{"name": w.name, "host": w.host, "slots": w.slots} for w in running]
    details["stale"] = [
        {"name": w.name, "host": w.host, "heartbeat_age_s": round(now - w.heartbeat_at, 1), "lease_s": w.lease_s}
        for w in stale
    ]
    details["queued"] = len(queued)
    oldest = now - min((r.created_at for r in queued), default=now)
    if queued:
        details["oldest_queued_s"] = round(oldest, 1)
    names = ", ".join(w.name for w in running[:5]) + (f" and {len(running) - 5} more" if len(running) > 5 else "")
    line = f"queue: {_n(len(running), 'worker')} running" + (
        f" ({names}; {sum(w.slots for w in running)} slots)" if running else ""
    )
    if stale:
        each = ", ".join(
            f"{w.name}: last heartbeat {_age(now - w.heartbeat_at)} ago, lease {w.lease_s:g}s" for w in stale[:5]
        )
        line += f", {len(stale)} STALE ({each}; gone or cut off from the store)"
    count = f"{QUEUED_COUNT_LIMIT}+" if len(queued) > QUEUED_COUNT_LIMIT else str(len(queued))
    line += f"; {count} job{'' if count == '1' else 's'} queued" + (
        f", the oldest for {_age(oldest)}" if queued else ""
    )
    if queued and not running:
        mine = (
            "" if settings.runs_jobs else "; this configuration has run_jobs off, so relays started with it only queue"
        )
        details["hint"] = NO_WORKER_HINT + mine
        line += f"\n  {details['hint']}"
    return line, details
