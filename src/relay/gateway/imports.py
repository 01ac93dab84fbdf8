"""import_mcp_server's core: from a project's configs, a git repository, or a registry query."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relay.errors import invalid
from relay.gateway import discover
from relay.gateway.admin import ServerPermit, require_admin
from relay.gateway.config import MASK, ServerConfig
from relay.gateway.importer import Candidate, from_project_files, resolve_project
from relay.gateway.manager import Gateway


@dataclass
class ImportResult:
    """What was recorded, what still needs values (the first such server), and what was left out and why."""

    imported: list[str] = field(default_factory=lambda: [])
    needs: Candidate | None = None
    skipped: dict[str, str] = field(default_factory=lambda: {})
    candidates: list[str] = field(default_factory=lambda: [])

    def reply(self) -> dict[str, Any]:
        """import_mcp_server's answer (and `relay mcp import --json`'s): a server that needs values shows its
        config with the values it has as *** and the missing ones as ""."""
        reply: dict[str, Any]
        if self.needs is not None:
            needs = self.needs
            config = needs.config.public()
            # A value to fill in shows as "": a key named missing, or one whose reference (`${VAR}`) was not set.
            config["env"] = {k: "" if k in needs.missing or not v else MASK for k, v in needs.config.env.items()}
            if needs.config.headers:
                config["headers"] = {
                    k: "" if k in needs.missing or not v else MASK for k, v in needs.config.headers.items()
                }
            reply = {"status": "needs_configuration", "config": config, "missing": list(needs.missing)}
            if self.imported:
                reply["imported"] = self.imported
        else:
            reply = {"success": True, "imported": self.imported}
        if self.skipped:
            reply["skipped"] = self.skipped
        if self.candidates:
            reply["candidates"] = self.candidates
        return reply


async def import_servers(
    gateway: Gateway,
    *,
    from_project: str | None = None,
    servers: list[str] | None = None,
    github_url: str | None = None,
    query: str | None = None,
    cwd: Path,
    environ: Mapping[str, str],
    registry_url: str = discover.DEFAULT_REGISTRY_URL,
    reserved: Collection[str] = (),
    permit: ServerPermit,
) -> ImportResult:
    """The first of from_project, github_url, query that is given wins (seed 003); `servers` filters from_project.

    A server named like one of relay's own toolsets (`reserved`) is skipped, as add_mcp_server refuses it. Only an
    admin imports (`require_admin`); the stdio servers are recorded only once `permit` allowed their commands (a
    project's .mcp.json, a repository's manifest or a registry entry is text a model can write or choose).
    """
    require_admin("importing downstream MCP servers")
    scope = gateway.project
    result = ImportResult()
    if from_project:
        directory = resolve_project(from_project, cwd, gateway.registry.scopes())
        found = from_project_files(directory, scope, environ)
        candidates = found.candidates
        result.skipped.update(found.skipped)
        names = {c.config.name for c in candidates}
        # relay's own records for that project come last: a client file naming the same server wins.
        for config in gateway.registry.in_scope(str(directory)):
            if config.name not in names and str(directory) != scope:
                candidates.append(Candidate(config=config.with_(scope=scope), source=f"relay:{directory}"))
        if servers:
            unknown = [s for s in servers if s not in {c.config.name for c in candidates}]
            if unknown:
                available = sorted({c.config.name for c in candidates})
                raise invalid(
                    f"{', '.join(unknown)} not found in {directory}",
                    f"available there: {', '.join(available) or 'none'}",
                )
            candidates = [c for c in candidates if c.config.name in servers]
    elif github_url:
        candidates = [await discover.from_git(github_url, scope, environ)]
    elif query:
        candidates = await discover.from_registry(registry_url, query, scope, environ)
        result.candidates = [c.config.name for c in candidates]
        candidates = candidates[:1]
        if not candidates:
            raise invalid(f"the MCP registry has no server relay can launch for {query!r}", "try other words")
    else:
        raise invalid(
            "Must provide one of: from_project, github_url, or query",
            "pass from_project (a project directory), github_url, or query",
        )
    ready: list[ServerConfig] = []
    for cand in candidates:
        if cand.config.name in reserved:
            result.skipped[cand.config.name] = (
                "the name of one of relay's own toolsets: add it with add_mcp_server under another name"
            )
            continue
        if cand.missing:
            if result.needs is None:
                result.needs = cand
            else:
                result.skipped[cand.config.name] = f"needs {', '.join(cand.missing)}"
            continue
        ready.append(cand.config.with_(source=cand.source or cand.config.source))
    await permit(ready)
    for config in ready:
        await gateway.add(config)
        result.imported.append(config.name)
    return result
