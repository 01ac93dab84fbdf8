"""`relay audit verify|show|render|witness-sql`: check the audit log's hash chain (and its witness), read it,
write its views now, print the SQL that makes a witness on a PostgreSQL store."""

from __future__ import annotations

import argparse
import json
from collections import deque
from datetime import UTC, datetime
from typing import Any


def add_parser(sub: Any) -> None:
    audit = sub.add_parser("audit", help="the audit log of every job: verify its hash chain, show it, render views")
    actions = audit.add_subparsers(dest="audit_command", required=True)
    verify = actions.add_parser("verify", help="check every line of the log; name any edited, removed or moved line")
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    verify.add_argument(
        "--store", metavar="URL", help="the job store the log's end is checked against (a postgresql:// URL)"
    )
    show = actions.add_parser("show", help="the newest entries of the log, oldest first")
    show.add_argument("--limit", type=int, default=20, help="how many entries (default 20)")
    show.add_argument("--job", help="only the entries of this job (id or its first characters)")
    show.add_argument("--json", action="store_true", help="print the entries as JSON lines")
    actions.add_parser("render", help="write IAC.md and CONTEXT.md from the log now")
    witness = actions.add_parser(
        "witness-sql",
        help="print the SQL an operator runs (as another role) to make the audit witness on a PostgreSQL store",
    )
    witness.add_argument("--role", help="relay's database role (default: the user of RELAY_STORE's URL)")


def audit_command(args: argparse.Namespace) -> int:
    from relay.config import load_settings

    settings = load_settings()
    home = settings.home
    if args.audit_command == "verify":
        return _verify(home, settings.store_target, args.json)
    if args.audit_command == "show":
        return _show(home, args.limit, args.job, args.json)
    if args.audit_command == "witness-sql":
        return _witness_sql(args.role, settings.store_url)
    from relay.audit import IAC_FILE, Views, views_config

    config = views_config(home)
    if config.out_dir is None:
        print('views are off ([audit] views_dir = "" in config.toml)')
        return 0
    if not home.is_dir():
        print(f"no audit log in {home} yet: nothing to render")
        return 0
    Views(home, config).render()
    print(f"wrote {config.out_dir / IAC_FILE} and CONTEXT.md")
    return 0


def _verify(home: Any, store_target: Any, as_json: bool) -> int:
    from relay.audit import verify
    from relay.store.open import audit_expectation_at, audit_witness_at

    known = audit_expectation_at(store_target, home=home)
    with audit_witness_at(store_target, home=home) as (witness, what):
        report = verify(home, known.mark, known.jobs, witness)
    if as_json:
        print(json.dumps(report.to_dict() | {"witness_summary": what}, indent=2))
        return 0 if report.ok else 1
    for note in report.notes:
        print(f"note: {note}")
    if report.ok:
        print(f"audit log intact: {report.lines} lines ({report.path})")
        if report.witness is not None and report.witness_holds:
            print(f"witness: checked against {report.witness} up to seq {report.witnessed_to}")
        else:
            print(f"witness: {what}")
        return 0
    print(f"audit log BROKEN: {len(report.problems)} problem(s) in {report.path}")
    for problem in report.problems:
        print(f"  line {problem.line}: {problem.message}")
    return 1


def _witness_sql(role: str | None, store_url: str | None) -> int:
    from relay.errors import ErrorCode, RelayError
    from relay.store.pg.witness import setup_sql

    if role is None and store_url is not None:
        from psycopg.conninfo import conninfo_to_dict

        role = str(conninfo_to_dict(store_url).get("user") or "") or None
    if role is None:
        raise RelayError(
            ErrorCode.INVALID_ARGUMENT,
            "relay's database role is not known (no RELAY_STORE URL with a user)",
            "name it: relay audit witness-sql --role ROLE",
        )
    print(setup_sql(role), end="")
    return 0


def _show(home: Any, limit: int, job: str | None, as_json: bool) -> int:
    from relay.audit import LOG_FILE, iter_lines, parse_loose

    entries: deque[dict[str, Any]] = deque(maxlen=max(1, limit))
    for line in iter_lines(home / LOG_FILE):
        entry = parse_loose(line)
        if entry is None:
            continue
        if job and not str(entry.get("job_id") or "").startswith(job):
            continue
        entries.append(entry)
    for entry in entries:
        if as_json:
            print(json.dumps(entry, ensure_ascii=False))
            continue
        print(_line(entry))
    return 0


def _line(entry: dict[str, Any]) -> str:
    data: dict[str, Any] = entry.get("data") if isinstance(entry.get("data"), dict) else {}  # pyright: ignore[reportAssignmentType]
    ts = entry.get("ts")
    when = datetime.fromtimestamp(float(ts), UTC).strftime("%Y-%m-%d %H:%M:%S") if isinstance(ts, int | float) else "?"
    detail = ""
    if entry.get("event") == "queued":
        detail = (
            f"{data.get('agent')} ({data.get('model') or 'default'}): {' '.join(str(data.get('prompt')).split())[:60]}"
        )
        grant: Any = data.get("grant")
        if isinstance(grant, dict) and grant.get("by") != "grant":  # pyright: ignore[reportUnknownMemberType]
            detail += f" [{grant.get('permission')} above grant {grant.get('grant')}: by {grant.get('by')}]"  # pyright: ignore[reportUnknownMemberType]
    elif entry.get("event") == "permission.refused":
        detail = (
            f"{data.get('agent')} at {data.get('permission')} above grant {data.get('grant')}: "
            f"{data.get('answer')} ({data.get('principal') or 'unknown caller'}, {data.get('via') or '-'})"
        )
    elif entry.get("event") == "permission.requested":  # an ACP agent's request (relay.jobs.approvals)
        detail = (
            f"{data.get('agent')} #{data.get('id')} {data.get('kind')}: {' '.join(str(data.get('title')).split())[:60]}"
            f" [needs {data.get('level')}, job {data.get('permission')}]"
        )
    elif entry.get("event") == "permission.answered":
        detail = f"#{data.get('id')} {data.get('answer')} by {data.get('by')}: {data.get('outcome')} {data.get('optionId') or ''}"
    elif entry.get("event") == "job.message":  # job_send (relay.jobs.steer)
        detail = (
            f"{data.get('chars')} chars from {data.get('principal')}: {' '.join(str(data.get('text')).split())[:60]}"
        )
    elif isinstance(data.get("error"), dict):
        detail = str(data["error"].get("message") or "")
    elif data.get("cost_usd") is not None:
        detail = f"${float(data['cost_usd']):.4f}"
    job_id = str(entry.get("job_id") or "-")
    return f"{entry.get('seq', '?'):>6}  {when}  {entry.get('event')!s:<11}  {job_id:<16}  {detail}".rstrip()
