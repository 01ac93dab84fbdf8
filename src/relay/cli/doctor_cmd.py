"""`relay doctor`: the agent CLIs (installed, version, credentials, a smoke run), the MCP clients' relay entries,
the store, the queue, worktrees, the repositories cache, the process runtime, the sandbox and the allowed roots."""

from __future__ import annotations

import argparse
import json

from relay.cli._table import table
from relay.errors import RelayError

CLIENT_ROOTS_NOTE = (
    "+ the roots each connected MCP client declares (over stdio; over HTTP with [security] client_roots = true); "
    "more: [security] allowed_roots in config.toml or RELAY_ALLOWED_ROOTS"
)


def runtime_line(requested: str) -> str:
    """Which process runtime CLI jobs run on, and why (for `relay doctor`)."""
    from relay.runtime.choice import choose

    try:
        chosen = choose(requested)
    except RelayError as err:
        return f"runtime: none ({err.message}; {err.hint})"
    return f"runtime: {chosen.name} ({chosen.reason})"


def doctor_command(args: argparse.Namespace) -> int:
    from dataclasses import replace

    import anyio

    from relay.config import load_settings
    from relay.doctor import (
        TABLE_HEADERS,
        audit_report,
        diagnose,
        queue_report,
        repos_report,
        sandbox_report,
        store_report,
        table_rows,
        worktree_report,
    )
    from relay.jobs.engine import Engine, JobRequest

    settings = load_settings()
    reports = diagnose(settings)
    if args.smoke:

        async def smoke() -> dict[str, str]:
            outcomes: dict[str, str] = {}
            async with Engine(settings).running() as engine:
                ids: dict[str, str] = {}
                for report in reports:
                    if not report.found:
                        continue
                    try:
                        ids[report.name] = engine.submit(
                            JobRequest(
                                agent=report.name,
                                prompt="Reply with the single word: ok",
                                timeout_s=args.smoke_timeout,
                                via="cli/doctor",
                            )
                        )
                    except RelayError as err:
                        outcomes[report.name] = err.code.value
                for name, job_id in ids.items():
                    rec = await engine.wait_one(job_id, args.smoke_timeout + 15)
                    outcomes[name] = "ok" if rec.status == "completed" else (rec.error or {}).get("code", rec.status)
            return outcomes

        outcomes = anyio.run(smoke)
        reports = [replace(r, smoke=outcomes.get(r.name)) for r in reports]
    from relay.cli.clients_cmd import CLIENT_HEADERS, client_rows

    problems = [r for r in reports if r.found and (r.version_status == "broken" or (r.smoke not in (None, "ok")))]
    store_line, store_ok = store_report(settings)  # relay.db: SQLite's integrity check and free space
    audit_line, audit_ok = audit_report(settings)  # what the audit record proves: its witness, or what it cannot
    rows, client_reports, client_problems = client_rows()  # each MCP client's relay entry: present and sane?
    runtime = runtime_line(settings.runtime)
    worktree_line, worktrees = worktree_report(settings)
    repos_line, repos = repos_report(settings)  # the cache of repositories fetched for jobs by URL
    queue_line, queue = queue_report(settings)  # workers running and stale, jobs waiting for a claim
    sandbox = sandbox_report(settings.environ)
    roots = [{"path": str(root), "source": source} for root, source in settings.root_sources()]
    if args.json:
        report = {
            "agents": [r.to_dict() for r in reports],
            "clients": client_reports,
            "store": {"ok": store_ok, "summary": store_line},
            "audit": {"ok": audit_ok, "summary": audit_line},
            "runtime": runtime.removeprefix("runtime: "),
            "worktrees": worktrees,
            "repos": repos | {"summary": repos_line},
            "queue": queue | {"summary": queue_line},
            "sandbox": sandbox,
            "allowed_roots": roots,
        }
        print(json.dumps(report, indent=2))
    else:
        print(table(table_rows(reports), TABLE_HEADERS))
        print(f"\n{runtime}")
        print(f"sandbox (execute_code): {sandbox['mode']}: {sandbox['details']}")
        print("\n" + store_line)
        print(audit_line)
        print(queue_line)
        print(worktree_line)
        print(repos_line)
        print("\nallowed roots (a job's cwd must be under one):")
        print("\n".join(f"  {r['path']}  ({r['source']})" for r in roots))
        print(f"  {CLIENT_ROOTS_NOTE}")
        if rows:
            print("\n" + table(rows, CLIENT_HEADERS))
    return 1 if problems or not store_ok or not audit_ok or client_problems else 0
