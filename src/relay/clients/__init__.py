"""MCP clients relay serves: `relay install`/`uninstall` for each, doctor's check of their entries, their tool timeouts."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from relay.clients.install import Change, EntryReport, check_all, check_client, client_spec, plan_changes, write_changes
from relay.clients.specs import CLIENTS, SCOPES, ClientSpec, Context

__all__ = [
    "CLIENTS",
    "SCOPES",
    "Change",
    "ClientSpec",
    "Context",
    "EntryReport",
    "check_all",
    "check_client",
    "client_spec",
    "make_context",
    "plan_changes",
    "relay_command",
    "write_changes",
]


def relay_command(environ: Mapping[str, str], argv0: str | None = None) -> tuple[str, ...]:
    """The argv a client should run to serve relay: this relay's own executable, by absolute path."""
    candidate = argv0 if argv0 is not None else sys.argv[0]
    if candidate and Path(candidate).name == "relay" and os.access(candidate, os.X_OK):
        return (os.path.abspath(candidate), "serve")
    beside = Path(sys.executable).with_name("relay")  # the entry point of the environment relay runs in
    if os.access(beside, os.X_OK):
        return (str(beside), "serve")
    found = shutil.which("relay", path=environ.get("PATH"))
    if found:
        return (os.path.abspath(found), "serve")
    return (sys.executable, "-m", "relay.cli.main", "serve")


def make_context(
    environ: Mapping[str, str], project: Path, auto_threshold_s: float, command: tuple[str, ...] | None = None
) -> Context:
    home = Path(environ.get("HOME") or Path.home())
    return Context(
        home=home,
        project=project,
        environ=environ,
        command=command or relay_command(environ),
        auto_threshold_s=auto_threshold_s,
    )
