"""`relay install|uninstall CLIENT [--scope user|project] [--dry-run]` and doctor's table of client entries."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from relay.config import PERMISSIONS

CLIENT_HELP = "claude-code, codex, gemini, cursor or vscode"


def add_parsers(sub: Any) -> None:
    for name, verb in (("install", "add relay to"), ("uninstall", "remove relay from")):
        p: argparse.ArgumentParser = sub.add_parser(name, help=f"{verb} an MCP client's config ({CLIENT_HELP})")
        p.add_argument("client", help=CLIENT_HELP)
        p.add_argument(
            "--scope",
            choices=["user", "project"],
            default="user",
            help="user: the client's own config in your home (default); project: files in the current folder",
        )
        p.add_argument("--dry-run", action="store_true", help="print the change as a diff and write nothing")
        if name == "install":
            p.add_argument(
                "--grant",
                choices=list(PERMISSIONS),
                help="the highest permission this client's model may give a delegation without asking you "
                "(written as RELAY_GRANT in the client's relay entry; default: [security] grant, else edit)",
            )


def _context(grant: str | None = None) -> Any:
    from dataclasses import replace

    from relay.clients import make_context
    from relay.config import load_settings

    settings = load_settings()
    return replace(make_context(dict(os.environ), Path.cwd(), settings.auto_threshold_s), grant=grant)


def install_command(args: argparse.Namespace, remove: bool) -> int:
    from relay.clients import client_spec, plan_changes, write_changes

    spec = client_spec(args.client)
    changes = plan_changes(spec, _context(getattr(args, "grant", None)), args.scope, remove=remove)
    verb = "uninstall" if remove else "install"
    changed = [c for c in changes if c.changed]
    if args.dry_run:
        for change in changed:
            sys.stdout.write(change.diff())
        if not changed:
            print(f"relay {verb} {spec.name}: nothing to change")
        return 0
    write_changes(changes)
    for change in changes:
        if not change.changed:
            state = "unchanged"
        elif change.after is None:
            state = "removed"
        elif change.before is None:
            state = "created"
        else:
            state = "updated"
        print(f"{state:9}  {change.path}")
    if not remove:
        for note in spec.notes:
            print(f"note: {note}")
    return 0


CLIENT_HEADERS = ["CLIENT", "SCOPE", "STATUS", "CONFIG / PROBLEMS"]


def client_rows() -> tuple[list[list[str]], list[dict[str, Any]], bool]:
    """Doctor's rows for every client entry, their JSON, and whether any entry has problems."""
    from relay.clients import check_all

    reports = check_all(_context())
    rows = [
        [r.client, r.scope, r.status, "; ".join((r.path, *r.problems, *(f"note: {n}" for n in r.notes)))]
        for r in reports
    ]
    return rows, [r.to_dict() for r in reports], any(r.status == "problems" for r in reports)
