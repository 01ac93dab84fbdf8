"""`relay mcp list` and `relay mcp approve NAME`: the downstream MCP servers of this project, from a terminal."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from relay.errors import ErrorCode, RelayError


def add_parser(sub: Any) -> None:
    mcp = sub.add_parser("mcp", help="downstream MCP servers: list them, approve changed tool definitions")
    actions = mcp.add_subparsers(dest="mcp_command", required=True)
    actions.add_parser("list", help="the servers this project sees (global and its own) and changed tools")
    approve = actions.add_parser("approve", help="approve a server's changed tool definitions so calls go through")
    approve.add_argument("name", help="the server's name")


def mcp_command(args: argparse.Namespace) -> int:
    from relay.config import load_settings
    from relay.gateway import ServerRegistry, project_of

    settings = load_settings()
    registry = ServerRegistry(settings.db_path, settings.home)
    project = project_of(Path.cwd())
    try:
        servers = {c.name: c for c in registry.visible(project)}
        if args.mcp_command == "list":
            for config in servers.values():
                pending = sorted(t for t, (_, seen) in registry.pins(config.scope, config.name).items() if seen)
                where = config.scope or "global"
                target = config.command or config.url or ""
                changed = f"  changed: {', '.join(pending)}" if pending else ""
                print(f"{config.name}\t{config.transport}\t{target}\t{where}{changed}")
            return 0
        config = servers.get(args.name)
        if config is None:
            raise RelayError(
                ErrorCode.SERVER_NOT_FOUND,
                f"Server '{args.name}' not found",
                f"servers here: {', '.join(sorted(servers)) or 'none'} (`relay mcp list`)",
            )
        approved = registry.approve(config.scope, config.name)
        if approved:
            print(f"approved {len(approved)} changed tool definition(s) of {config.name}: {', '.join(approved)}")
        else:
            print(f"{config.name} has no changed tool definitions to approve")
        return 0
    finally:
        registry.close()
