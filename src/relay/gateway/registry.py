"""Where downstream servers are recorded: `mcp_servers` in relay.db, their env/header values in a 0600 file.

The database keeps only the names of env variables and headers; the values live in
`RELAY_HOME/mcp_secrets.json`, readable by the user alone, so no record, reply or log shows them.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from relay.errors import ErrorCode, RelayError
from relay.gateway.config import GLOBAL, MASK, ServerConfig
from relay.store.side import open_side

SECRETS_FILE = "mcp_secrets.json"
SECRETS_MODE = 0o600
# How long a writer waits for another process's transaction before "database is locked".
BUSY_TIMEOUT_MS = 10_000

_COLUMNS = "scope, name, transport, command, args, url, cwd, env_keys, header_keys, description, enabled, source"


class ServerRegistry:
    """Typed access to the recorded downstream servers and their pinned tool definitions."""

    def __init__(self, db_path: Path, home: Path) -> None:
        self.secrets_path = home / SECRETS_FILE
        self._lock = threading.RLock()
        self._db = open_side(db_path, BUSY_TIMEOUT_MS / 1000, keep_statements=True)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def exec(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    # servers ----------------------------------------------------------------------------

    def put(self, config: ServerConfig) -> None:
        """Record (or replace) a server; its env/header values go to the secrets file only."""
        now = time.time()
        with self._lock:
            self._write_secrets(config.scope, config.name, {"env": dict(config.env), "headers": dict(config.headers)})
            self._db.execute(
                f"INSERT INTO mcp_servers ({_COLUMNS}, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
                " ON CONFLICT(scope, name) DO UPDATE SET transport=excluded.transport, command=excluded.command,"
                " args=excluded.args, url=excluded.url, cwd=excluded.cwd, env_keys=excluded.env_keys,"
                " header_keys=excluded.header_keys, description=excluded.description, enabled=excluded.enabled,"
                " source=excluded.source, updated_at=excluded.updated_at",
                (
                    config.scope,
                    config.name,
                    config.transport,
                    config.command,
                    json.dumps(list(config.args)),
                    config.url,
                    config.cwd,
                    json.dumps(sorted(config.env)),
                    json.dumps(sorted(config.headers)),
                    config.description,
                    int(config.enabled),
                    config.source,
                    now,
                    now,
                ),
            )

    def remove(self, scope: str, name: str) -> bool:
        with self._lock:
            gone = self._db.execute("DELETE FROM mcp_servers WHERE scope = ? AND name = ?", (scope, name)).rowcount
            self._db.execute("DELETE FROM mcp_server_state WHERE scope = ? AND name = ?", (scope, name))
            self._db.execute("DELETE FROM mcp_tool_pins WHERE scope = ? AND server = ?", (scope, name))
            self._write_secrets(scope, name, None)
        return gone > 0

    def in_scope(self, scope: str) -> list[ServerConfig]:
        """The servers recorded for exactly this scope ("" = global), by name."""
        rows = self.exec(f"SELECT {_COLUMNS} FROM mcp_servers WHERE scope = ? ORDER BY name", (scope,))
        secrets = self._read_secrets()
        return [self._config(row, secrets) for row in rows]

    def visible(self, project: str) -> list[ServerConfig]:
        """The servers a project sees: global ones, with a project's own server winning on the same name."""
        by_name = {c.name: c for c in self.in_scope(GLOBAL)}
        if project:
            by_name.update({c.name: c for c in self.in_scope(project)})
        return [by_name[n] for n in sorted(by_name)]

    def scopes(self) -> list[str]:
        return [r[0] for r in self.exec("SELECT DISTINCT scope FROM mcp_servers ORDER BY scope")]

    def _config(self, row: sqlite3.Row, secrets: dict[str, Any]) -> ServerConfig:
        stored: dict[str, Any] = secrets.get(row["scope"], {}).get(row["name"], {})
        env_values: dict[str, str] = stored.get("env", {})
        header_values: dict[str, str] = stored.get("headers", {})
        return ServerConfig(
            name=row["name"],
            transport=row["transport"],
            scope=row["scope"],
            command=row["command"],
            args=tuple(json.loads(row["args"])),
            url=row["url"],
            cwd=row["cwd"],
            env={k: env_values.get(k, "") for k in json.loads(row["env_keys"])},
            headers={k: header_values.get(k, "") for k in json.loads(row["header_keys"])},
            description=row["description"],
            enabled=bool(row["enabled"]),
            source=row["source"],
        )

    # secrets ----------------------------------------------------------------------------

    def _read_secrets(self) -> dict[str, Any]:
        try:
            text = self.secrets_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise RelayError(
                ErrorCode.CONFIG_INVALID, f"cannot read {self.secrets_path}: {exc.strerror}", "check its owner and mode"
            ) from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            raise RelayError(
                ErrorCode.CONFIG_INVALID,
                f"{self.secrets_path} is not valid JSON",
                "fix it, or remove it and add the servers' env/headers again",
            ) from None
        return data if isinstance(data, dict) else {}  # pyright: ignore[reportUnknownVariableType]

    def _write_secrets(self, scope: str, name: str, values: dict[str, dict[str, str]] | None) -> None:
        data = self._read_secrets()
        per_scope: dict[str, Any] = data.setdefault(scope, {})
        if values is None or not any(values.values()):
            per_scope.pop(name, None)
        else:
            per_scope[name] = values
        if not per_scope:
            data.pop(scope, None)
        if not data and not self.secrets_path.exists():
            return
        self.secrets_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.secrets_path.with_name(f".{SECRETS_FILE}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, SECRETS_MODE)
        try:
            os.fchmod(fd, SECRETS_MODE)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(data, fh, indent=1, sort_keys=True)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        os.replace(tmp, self.secrets_path)

    # pins -------------------------------------------------------------------------------

    def pins(self, scope: str, server: str) -> dict[str, tuple[str, str | None]]:
        """tool name -> (approved sha256, pending sha256 or None) for one server."""
        rows = self.exec(
            "SELECT tool, sha256, pending_sha256 FROM mcp_tool_pins WHERE scope = ? AND server = ?", (scope, server)
        )
        return {r["tool"]: (r["sha256"], r["pending_sha256"]) for r in rows}

    def pin(self, scope: str, server: str, tool: str, sha256: str, definition: dict[str, Any]) -> None:
        """Approve a definition: it becomes the pinned one and any pending change is cleared."""
        self.exec(
            "INSERT INTO mcp_tool_pins (scope, server, tool, sha256, definition, pinned_at) VALUES (?,?,?,?,?,?)"
            " ON CONFLICT(scope, server, tool) DO UPDATE SET sha256=excluded.sha256, definition=excluded.definition,"
            " pending_sha256=NULL, pending_definition=NULL, pinned_at=excluded.pinned_at, changed_at=NULL",
            (scope, server, tool, sha256, json.dumps(definition, sort_keys=True), time.time()),
        )

    def mark_changed(self, scope: str, server: str, tool: str, sha256: str, definition: dict[str, Any]) -> None:
        """Record a definition that differs from the pinned one; the tool stays refused until approved."""
        self.exec(
            "UPDATE mcp_tool_pins SET pending_sha256 = ?, pending_definition = ?, changed_at = ?"
            " WHERE scope = ? AND server = ? AND tool = ?",
            (sha256, json.dumps(definition, sort_keys=True), time.time(), scope, server, tool),
        )

    def approve(self, scope: str, server: str) -> list[str]:
        """Approve every pending definition of a server; returns the tools approved."""
        rows = self.exec(
            "SELECT tool FROM mcp_tool_pins WHERE scope = ? AND server = ? AND pending_sha256 IS NOT NULL",
            (scope, server),
        )
        self.exec(
            "UPDATE mcp_tool_pins SET sha256 = pending_sha256, definition = pending_definition,"
            " pending_sha256 = NULL, pending_definition = NULL, pinned_at = ?, changed_at = NULL"
            " WHERE scope = ? AND server = ? AND pending_sha256 IS NOT NULL",
            (time.time(), scope, server),
        )
        return sorted(r["tool"] for r in rows)

    # connection states --------------------------------------------------------------------

    def record_state(
        self, scope: str, name: str, state: str, last_error: str | None, *, skipped_lines: int, starts: int
    ) -> None:
        """The state a relay process last saw its connection to a server in (read by `relay mcp list`)."""
        self.exec(
            "INSERT INTO mcp_server_state (scope, name, state, last_error, skipped_lines, starts, pid, updated_at)"
            " VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(scope, name) DO UPDATE SET state=excluded.state,"
            " last_error=COALESCE(excluded.last_error, CASE WHEN excluded.state='connected' THEN NULL"
            " ELSE mcp_server_state.last_error END), skipped_lines=excluded.skipped_lines,"
            " starts=excluded.starts, pid=excluded.pid, updated_at=excluded.updated_at",
            (scope, name, state, last_error, skipped_lines, starts, os.getpid(), time.time()),
        )

    def states(self) -> dict[tuple[str, str], dict[str, Any]]:
        """(scope, name) -> the recorded state, last error, skipped lines, starts, pid and time of a server."""
        fields = ("state", "last_error", "skipped_lines", "starts", "pid", "updated_at")
        rows = self.exec(f"SELECT scope, name, {', '.join(fields)} FROM mcp_server_state")
        return {(r["scope"], r["name"]): {k: r[k] for k in fields} for r in rows}

    def forget_pins(self, scope: str, server: str) -> None:
        """Drop a server's pins so the next sight pins afresh (re-running add_mcp_server approves)."""
        self.exec("DELETE FROM mcp_tool_pins WHERE scope = ? AND server = ?", (scope, server))


def masked(values: dict[str, str]) -> dict[str, str]:
    return dict.fromkeys(values, MASK)
