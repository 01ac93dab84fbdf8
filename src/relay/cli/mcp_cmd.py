"""`relay mcp list|add|remove|import|approve`: the downstream MCP servers of this project, from a terminal.

add, remove and import go through the same core as the gateway toolset's add_mcp_server,
remove_mcp_server and import_mcp_server (`relay.gateway.admin`, `relay.gateway.imports`): the same
checks, the same scopes (a server for the current directory's project, or `--global` for all) and the
same secrets file. env and header values are never printed (`***`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from relay.errors import ErrorCode, RelayError, invalid

if TYPE_CHECKING:
    from relay.gateway import Gateway, ServerConfig, ServerRegistry
    from relay.gateway.admin import ServerPermit

# `relay mcp add NAME [options] -- CMD ARGS...`: the words after this are the stdio server's command line.
COMMAND_SEPARATOR = "--"
# Exit status of `relay mcp add --connect` when the server was recorded but did not start.
EXIT_NOT_CONNECTED = 1


def add_parser(sub: Any) -> None:
    mcp = sub.add_parser(
        "mcp", help="downstream MCP servers: list, add, remove, import them; approve changed tool definitions"
    )
    actions = mcp.add_subparsers(dest="mcp_command", required=True)
    listing = actions.add_parser("list", help="the servers this project sees (global and its own) and changed tools")
    listing.add_argument("--json", action="store_true", help="print as JSON (env and header values as ***)")

    add = actions.add_parser(
        "add",
        help="add (or replace) a server for this project (--global: for every project)",
        usage="relay mcp add NAME [--transport stdio|http|websocket] [--command CMD] [--arg A ...] [--env K=V ...]"
        " [--url URL] [--header K=V ...] [--project | --global] [--connect] [--json] [-- CMD ARGS...]",
        description="The same checks and storage as the add_mcp_server tool: env and header values are kept in "
        "RELAY_HOME/mcp_secrets.json and shown as ***. `relay mcp add NAME -- CMD ARGS...` adds a stdio server.",
    )
    add.add_argument("name", help="the server's name (letters, digits, '_', '-', '.')")
    add.add_argument("--transport", help="stdio (the default with a command), http or websocket")
    add.add_argument("--command", dest="server_command", help="the command that starts a stdio server")
    add.add_argument(
        "--arg",
        action="append",
        default=[],
        help="one argument of the command (repeatable; --arg=-x for one that starts with -)",
    )
    add.add_argument("--env", action="append", default=[], metavar="K=V", help="an environment variable (repeatable)")
    add.add_argument("--url", help="the server's URL (http: http(s)://, websocket: ws(s)://)")
    add.add_argument("--header", action="append", default=[], metavar="K=V", help="an HTTP header (repeatable)")
    _scope_flags(add, "for this project (the default)", "for every project")
    add.add_argument("--connect", action="store_true", help="start the server now and print its tools or the error")
    add.add_argument("--json", action="store_true", help="print the add_mcp_server tool's reply as JSON")
    add.set_defaults(command_line=[])

    remove = actions.add_parser("remove", help="remove a server (this project's own, else the global one)")
    remove.add_argument("name", help="the server's name")
    _scope_flags(remove, "only this project's own server", "only the global server")
    remove.add_argument("--json", action="store_true", help="print as JSON")

    imp = actions.add_parser(
        "import", help="import the servers a project's client configs name (.mcp.json, .cursor, .vscode, ...)"
    )
    imp.add_argument(
        "--from-project", default=".", metavar="DIR", help="the project directory (or a project's name); default ."
    )
    imp.add_argument("--servers", help="comma-separated server names to import (default: all)")
    imp.add_argument("--json", action="store_true", help="print the import_mcp_server tool's reply as JSON")

    approve = actions.add_parser("approve", help="approve a server's changed tool definitions so calls go through")
    approve.add_argument("name", help="the server's name")


def _scope_flags(parser: argparse.ArgumentParser, project: str, every: str) -> None:
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--project", dest="scope", action="store_const", const="project", help=project)
    scope.add_argument("--global", dest="scope", action="store_const", const="global", help=every)


def split_command_line(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """`relay mcp add NAME ... -- CMD ARGS...` as (the words argparse reads, the command line); other argv unsplit.

    argparse (3.11) does not take `--` inside nested subcommands, so the command line is cut off first.
    """
    words = list(argv)
    if COMMAND_SEPARATOR not in words:
        return words, None
    cut = words.index(COMMAND_SEPARATOR)
    if [w for w in words[:cut] if not w.startswith("-")][:2] != ["mcp", "add"]:
        return words, None
    return words[:cut], words[cut + 1 :]


def mcp_command(args: argparse.Namespace) -> int:
    from relay.config import load_settings
    from relay.gateway import ServerRegistry, project_of

    settings = load_settings()
    registry = ServerRegistry(settings.db_path, settings.home)
    project = project_of(Path.cwd())
    try:
        if args.mcp_command in ("add", "remove", "import"):
            import anyio

            from relay.gateway import Gateway, Limits
            from relay.gateway.admin import server_permit
            from relay.jobs.grants import COMMAND_PERMISSION, chosen_by_the_person
            from relay.store.open import open_store

            gateway = Gateway(registry, settings.home, project, Limits.from_environ(settings.environ))
            store = open_store(settings.store_target, home=settings.home)  # a stdio server's command is on record
            permit = server_permit(settings, store.audit.record, project)

            async def change() -> int:
                try:
                    # A command the person typed (or a project they named) at a terminal: their own choice, unasked.
                    with chosen_by_the_person(COMMAND_PERMISSION):
                        if args.mcp_command == "add":
                            return await _add(gateway, args, permit)
                        if args.mcp_command == "remove":
                            return await _remove(gateway, args)
                        return await _import(gateway, args, settings.environ, permit)
                finally:
                    await gateway.aclose()  # a server started by --connect is stopped

            try:
                return anyio.run(change)
            finally:
                store.close()
        servers = {c.name: c for c in registry.visible(project)}
        if args.mcp_command == "list":
            return _list(registry, list(servers.values()), args.json)
        config = servers.get(args.name)
        if config is None:
            raise _not_found(args.name, list(servers))
        approved = registry.approve(config.scope, config.name)
        if approved:
            print(f"approved {len(approved)} changed tool definition(s) of {config.name}: {', '.join(approved)}")
        else:
            print(f"{config.name} has no changed tool definitions to approve")
        return 0
    finally:
        registry.close()


def _list(registry: ServerRegistry, servers: list[ServerConfig], as_json: bool) -> int:
    listed: list[dict[str, Any]] = []
    states = registry.states()
    for config in servers:
        pending = sorted(t for t, (_, seen) in registry.pins(config.scope, config.name).items() if seen)
        seen = states.get((config.scope, config.name), {})
        state = "disabled" if not config.enabled else str(seen.get("state") or "configured")
        if as_json:
            listed.append(
                {
                    **config.public(),
                    "changed_tools": pending,
                    "state": state,
                    "last_error": seen.get("last_error"),
                    "skipped_lines": seen.get("skipped_lines") or 0,
                }
            )
            continue
        where = config.scope or "global"
        target = config.command or config.url or ""
        changed = f"  changed: {', '.join(pending)}" if pending else ""
        print(f"{config.name}\t{config.transport}\t{target}\t{where}\t{state}{changed}")
        if seen.get("last_error"):
            print(f"  last error: {seen['last_error']}")
        if seen.get("skipped_lines"):
            print(f"  skipped {seen['skipped_lines']} line(s) of its output that were not JSON-RPC")
    if as_json:
        print(json.dumps({"servers": listed}, indent=2))
    return 0


def _not_found(name: str, available: list[str]) -> RelayError:
    from relay.server.toolsets._registry import did_you_mean_first

    return RelayError(
        ErrorCode.SERVER_NOT_FOUND,
        f"Server '{name}' not found",
        did_you_mean_first(name, available)
        + f"servers here: {', '.join(sorted(available)) or 'none'} (`relay mcp list`)",
    )


def _pairs(values: list[str], flag: str, colon: bool = False) -> dict[str, str]:
    """`--env K=V` (and `--header K: V`) values as a mapping; a value is never quoted back (it may be a secret)."""
    out: dict[str, str] = {}
    for value in values:
        seps = [i for i in (value.find("="), value.find(":") if colon else -1) if i > 0]
        if not seps:
            raise invalid(f"a {flag} value is not KEY=VALUE", f"pass {flag} KEY=VALUE, once per {flag[2:]}")
        cut = min(seps)
        out[value[:cut].strip()] = value[cut + 1 :].strip() if value[cut] == ":" else value[cut + 1 :]
    return out


def _where(config: ServerConfig) -> str:
    return f"the project {config.scope}" if config.scope else "every project (global)"


async def _add(gateway: Gateway, args: argparse.Namespace, permit: ServerPermit) -> int:
    from relay.gateway.admin import add_server, added_reply, try_server
    from relay.server.toolsets import reserved_names

    env, headers = _pairs(args.env, "--env"), _pairs(args.header, "--header", colon=True)
    command, cmd_args = args.server_command, list(args.arg)
    if args.command_line:
        if command is not None or cmd_args:
            raise invalid(
                "the command is given twice: after -- and with --command/--arg", "give it one way: -- CMD ARGS..."
            )
        command, cmd_args = args.command_line[0], args.command_line[1:]
    transport = args.transport or ("stdio" if command else None)
    if transport is None:
        raise invalid(
            f"relay mcp add {args.name} needs a --transport",
            "--transport http --url URL, --transport websocket --url ws://..., or -- CMD ARGS for stdio",
        )
    config = await add_server(
        gateway,
        name=args.name,
        transport=transport,
        scope=args.scope or "project",
        url=args.url,
        headers=headers,
        command=command,
        args=cmd_args,
        env=env,
        reserved=reserved_names(),
        permit=permit,
    )
    listed = await try_server(gateway, config.name) if args.connect else None
    if args.json:
        print(json.dumps(added_reply(config, listed), indent=2))
    else:
        shown = config.public()
        target = " ".join([shown["command"], *shown["args"]]) if config.command else shown["url"]
        print(f"added {config.name} ({config.transport}) for {_where(config)}: {target}")
        for part in ("env", "headers"):
            if part in shown:
                print(f"  {part}: {', '.join(f'{k}={v}' for k, v in shown[part].items())}")
        if listed is not None and not listed.error:
            names = [t.name for t in listed.tools]
            print(f"{config.name}: {listed.state}, {len(names)} tool(s): {', '.join(names)}")
    if listed is not None and listed.error:
        from relay.cli._errors import error_line

        hint = listed.hint or f"it stays recorded; fix it with `relay mcp add {config.name} ...` again"
        print(error_line(ErrorCode.UPSTREAM_ERROR.value, listed.error, hint), file=sys.stderr)
        return EXIT_NOT_CONNECTED
    return 0


async def _remove(gateway: Gateway, args: argparse.Namespace) -> int:
    from relay.gateway.admin import remove_server

    if not gateway.has(args.name):
        raise _not_found(args.name, gateway.names())
    removed = await remove_server(gateway, args.name, args.scope)
    if args.json:
        print(json.dumps({"success": True, "removed": removed.name, "project_id": removed.scope or None}, indent=2))
    else:
        print(f"removed {removed.name} ({removed.transport}) of {_where(removed)}")
    return 0


async def _import(gateway: Gateway, args: argparse.Namespace, environ: Mapping[str, str], permit: ServerPermit) -> int:
    from relay.gateway.imports import import_servers
    from relay.server.toolsets import reserved_names

    wanted = [s.strip() for s in (args.servers or "").split(",") if s.strip()] or None
    result = await import_servers(
        gateway,
        from_project=args.from_project,
        servers=wanted,
        cwd=Path.cwd(),
        environ=environ,
        reserved=reserved_names(),
        permit=permit,
    )
    if args.json:
        print(json.dumps(result.reply(), indent=2))
        return 0
    print(f"imported: {', '.join(result.imported) or 'none'}")
    for name, why in result.skipped.items():
        print(f"skipped {name}: {why}")
    if result.needs is not None:
        name, missing = result.needs.config.name, ", ".join(result.needs.missing)
        print(f"{name} needs values for {missing}: add it with `relay mcp add {name} ...` and those values")
    return 0
