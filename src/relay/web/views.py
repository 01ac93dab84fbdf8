"""What the pages show, read through the same core functions the MCP tools and the CLI call.

Each function returns plain dicts for a template (or for JSON over SSE); none of them knows HTTP.
"""

from __future__ import annotations

import functools
import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from relay.config import Settings
from relay.errors import ErrorCode, RelayError, invalid
from relay.jobs.engine import Engine
from relay.jobs.envelope import job_title
from relay.jobs.request import via_of
from relay.store import JobRecord
from relay.store.open import is_pg_url
from relay.web._queries import JobQueries, Queries, add_usd
from relay.web.workers import worker_fact
from relay.workflows.resolve import Land, land

STATUSES = ("queued", "running", "completed", "failed", "cancelled", "timed_out", "interrupted")
ACTIVE = ("queued", "running")
# Jobs per page of the jobs table (server-side paging keeps a long history quick).
PAGE_SIZE = 50
# The job page first shows this many characters of the end of the transcript; earlier pages load on demand.
TRANSCRIPT_TAIL_CHARS = 64 * 1024


@dataclass
class Sources:
    """Where the dashboard reads from: the running server's engine and gateway when it has them."""

    settings: Settings
    engine_provider: Callable[[], Engine | None] | None = None
    gateway_provider: Callable[[], Any] | None = None
    _own_engine: Engine | None = field(default=None, repr=False)
    _queries: Queries | None = field(default=None, repr=False)

    def engine(self) -> Engine:
        """The server's running engine when the dashboard shares a process with it, else a reader of the store."""
        if self.engine_provider is not None:
            try:
                live = self.engine_provider()
            except RelayError:
                live = None
            if live is not None:
                return live
        if self._own_engine is None:
            self._own_engine = Engine(self.settings)
        return self._own_engine

    def queries(self) -> Queries:
        """The dashboard's read-only queries on the store the engine uses: relay.db, or the PostgreSQL store."""
        if self._queries is None:
            self.engine()  # the store exists, migrated, before a query-only connection opens it
            target = self.settings.store_target
            if is_pg_url(target):
                from relay.web._pg_queries import PgJobQueries  # psycopg is loaded only for a PostgreSQL store

                self._queries = PgJobQueries(str(target))
            else:
                self._queries = JobQueries(Path(str(target).removeprefix("sqlite://")))
        return self._queries

    def reconcile(self) -> None:
        """Finalize jobs whose relay died, as `relay jobs` does (a running server's engine does this itself)."""
        engine = self.engine()
        if engine is self._own_engine:
            engine.reconcile()

    def close(self) -> None:
        if self._queries is not None:
            self._queries.close()
            self._queries = None
        if self._own_engine is not None:
            self._own_engine.store.close()
            self._own_engine = None


# jobs -----------------------------------------------------------------------------------------


def _cost(rec: JobRecord) -> float | None:
    value = (rec.result or {}).get("cost_usd")
    return float(value) if isinstance(value, int | float) else None


def job_row(rec: JobRecord, now: float | None = None) -> dict[str, Any]:
    """One row of the jobs table; `sig` changes whenever something the row shows changes."""
    now = time.time() if now is None else now
    end = rec.finished_at if rec.finished_at is not None else (now if rec.started_at is not None else None)
    duration = (end - rec.started_at) if (rec.started_at is not None and end is not None) else None
    row: dict[str, Any] = {
        "id": rec.id,
        "status": rec.status,
        "agent": rec.agent,
        "principal": rec.principal,
        "via": via_of(rec) or "",
        "model": rec.model or "",
        "cwd": rec.cwd or "",
        "where": where_of(rec),
        "title": job_title(rec.request, 80),
        "created_at": rec.created_at,
        "started_at": rec.started_at,
        "finished_at": rec.finished_at,
        "duration_s": round(duration, 1) if duration is not None else None,
        "cost_usd": _cost(rec),
        "final": rec.is_final,
        "worker": rec.worker,
    }
    # Not the worker: a claim comes just before `running`, which carries it (one event per state, as before).
    row["sig"] = f"{rec.status}|{rec.model}|{rec.finished_at}|{row['cost_usd']}|{rec.started_at}"
    return row


def _name_of(place: str) -> str:
    """A repository's short name from its folder or URL: `/src/click` and `https://host/pallets/click.git` -> click."""
    tail = place.rstrip("/").rpartition("/")[2].rpartition(":")[2]
    return tail.removesuffix(".git")


def where_of(rec: JobRecord) -> str:
    """Where a job ran, as the jobs table says it: `click @ relay/<id> -> main` for a worktree job (its repository,
    branch and target), the folder for any other."""
    found: Any = rec.request.get("worktree")
    if not isinstance(found, dict):
        return rec.cwd or ""
    tree: dict[str, Any] = found  # pyright: ignore[reportUnknownVariableType]
    repo = str(tree.get("url") or tree.get("repo") or "")
    branch = str(tree.get("branch") or f"relay/{rec.id}")
    shown = f"{_name_of(repo)} @ {branch}" if repo else branch
    return f"{shown} \u2192 {tree['base']}" if tree.get("base") else shown


@dataclass(frozen=True)
class JobFilter:
    statuses: tuple[str, ...] = ()
    agent: str | None = None
    text: str | None = None
    principal: str | None = None  # the jobs of one principal (who started them)
    worker: str | None = None  # the jobs whose claim one worker (its id) holds or held last


def jobs_page(engine: Engine, queries: Queries, flt: JobFilter, page: int) -> dict[str, Any]:
    """A page of the jobs table, newest first, filtered and paged by the store's database (only the page's rows are read)."""
    page = max(1, page)
    ids = queries.job_ids(
        statuses=flt.statuses,
        agent=flt.agent,
        text=flt.text,
        offset=(page - 1) * PAGE_SIZE,
        limit=PAGE_SIZE + 1,
        principal=flt.principal,
        worker=flt.worker,
    )
    now = time.time()
    rows: list[dict[str, Any]] = []
    for job_id in ids[:PAGE_SIZE]:
        try:
            rows.append(job_row(engine.get(job_id), now))
        except RelayError:  # removed between the two reads
            continue
    return {"rows": rows, "page": page, "has_next": len(ids) > PAGE_SIZE, "now": now}


def job_detail(engine: Engine, queries: Queries, job_id: str) -> dict[str, Any]:
    """The job page: its envelope, the tail of its transcript, its stderr and the files it changed."""
    rec = engine.get(job_id)
    env = engine.envelope(rec.id)
    first = engine.read_output(rec.id, "transcript", 0, 1)
    total = int(first["total_chars"])
    start = max(0, total - TRANSCRIPT_TAIL_CHARS)
    tail = engine.read_output(rec.id, "transcript", start, TRANSCRIPT_TAIL_CHARS) if total else first
    stderr = engine.read_output(rec.id, "stderr", 0, TRANSCRIPT_TAIL_CHARS)
    return {
        "row": job_row(rec),
        "envelope": env,
        "envelope_json": json.dumps(env, indent=2, default=str),
        "request": rec.request,
        "transcript": tail["text"],
        "transcript_start": start,
        "transcript_end": start + len(tail["text"]),
        "stderr": stderr["text"],
        "files_changed": env["files_changed"],
        "workspace": env.get("workspace"),
        "diff": diff_lines(engine, rec.id) if env.get("workspace") and rec.is_final else [],
        "best_of": best_of_result(engine, rec.id) if rec.agent == "best_of" and rec.is_final else None,
        "permission": permission_fact(rec.request),
        "worker": worker_fact(queries, rec.worker),
        "kind": rec.kind,
    }


def best_of_result(engine: Engine, job_id: str) -> dict[str, Any] | None:
    """A best_of run's answer (its ranked candidates and the review), None when it has none to show."""
    page = engine.read_output(job_id, "final", 0, 4 << 20)
    try:
        found: Any = json.loads(page["text"])
    except ValueError:
        return None
    if not isinstance(found, dict):
        return None
    result: dict[str, Any] = dict(found)  # pyright: ignore[reportUnknownArgumentType]
    return result if isinstance(result.get("candidates"), list) else None


# A job page shows at most this much of a worktree job's diff (relay diff JOB prints all of it).
DIFF_CHARS = 256 * 1024


def diff_lines(engine: Engine, job_id: str) -> list[tuple[str, str]]:
    """A worktree job's diff as (css class, line) pairs: added, removed, hunk header, file header, context."""
    try:
        page = engine.read_output(job_id, "diff", 0, DIFF_CHARS)
    except RelayError:
        return []  # the branch is gone (discarded)
    found: list[tuple[str, str]] = []
    for line in page["text"].splitlines():
        if line.startswith(("+++", "---", "diff --git", "index ")):
            kind = "meta"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        elif line.startswith("@@"):
            kind = "hunk"
        else:
            kind = "ctx"
        found.append((kind, line))
    if page["next_offset"] is not None:
        found.append(("meta", f"… the diff goes on: relay diff {job_id}"))
    return found


def _refusal(err: RelayError) -> dict[str, Any]:
    details: dict[str, Any] = getattr(err, "details", {})
    return {"landed": False, "error": err.to_dict(), "conflicts": list(details.get("conflicts") or [])} | {
        "test": details.get("test")
    }


async def land_from_page(engine: Engine, settings: Settings, job_id: str, form: dict[str, str]) -> dict[str, Any]:
    """A land the job page asked for: into the form's branch (default the job's base) by its strategy, through the
    gate it chose: one of the test commands the person configured (`[workspaces] test_command`), or none; a page
    cannot name a command of its own. What it did, or (`landed: false`) why nothing changed, with the gate's output."""
    test = form.get("test_command") or None
    if test is not None and test not in settings.test_commands:
        return _refusal(
            invalid(
                "the dashboard runs only a test command the person configured",
                "pick one of [workspaces] test_command from config.toml, or land from the shell: relay land JOB --test CMD",
            )
        )
    into = form.get("into", "").strip() or None
    try:
        strategy = form.get("strategy") or "rebase"
        return await land(engine, Land(job_id, into=into, strategy=strategy, test_command=test))
    except RelayError as err:
        if err.code is ErrorCode.JOB_NOT_FOUND:
            raise
        return _refusal(err)


# What allowed a job's permission (relay.jobs.grants), as the job page says it.
ALLOWED_BY = {
    "grant": "within the grant",
    "confirmation": "the person confirmed it",
    "session": "the person allowed it for the session",
    "person": "the person chose it (relay run)",
}


def permission_fact(request: dict[str, Any]) -> str | None:
    """A job's permission and what allowed it: "full: the person confirmed it (grant edit, default; local)"."""
    level = request.get("permission")
    if not isinstance(level, str):
        return None
    grant: Any = request.get("grant")
    if not isinstance(grant, dict):
        return level
    record: dict[str, Any] = grant  # pyright: ignore[reportUnknownVariableType]
    by = ALLOWED_BY.get(str(record.get("by")), str(record.get("by")))
    who = f"; {record['principal']}" if record.get("principal") else ""
    return f"{level}: {by} (grant {record.get('grant')}, {record.get('grant_source')}{who})"


def transcript_page(engine: Engine, job_id: str, offset: int, limit: int) -> dict[str, Any]:
    return engine.read_output(job_id, "transcript", max(0, offset), max(1, min(limit, TRANSCRIPT_TAIL_CHARS)))


# costs ----------------------------------------------------------------------------------------


def _day(ts: float) -> str:
    return time.strftime("%Y-%m-%d", time.localtime(ts))


def costs(engine: Engine, queries: Queries, settings: Settings, days: int = 14) -> dict[str, Any]:
    """Spend per day and per agent/model from jobs' results (summed by the store's database), and how close the caps are."""
    now = time.time()
    day_list = [_day(now - (days - 1 - i) * 86400) for i in range(days)]
    since = time.mktime(time.strptime(day_list[0], "%Y-%m-%d"))
    by_day: dict[str, dict[str, float]] = {d: {} for d in day_list}
    totals: dict[str, dict[str, Any]] = {}
    for row in queries.costs(since):
        key = f"{row.agent} · {row.model or '-'}"
        t = totals.setdefault(key, {"key": key, "jobs": 0, "cost_usd": None, "input": 0, "output": 0, "cached": 0})
        t["jobs"] += row.jobs
        t["cost_usd"] = add_usd(t["cost_usd"], row.cost_usd)  # a model with no price: unknown, not $0
        t["input"] += row.input
        t["output"] += row.output
        t["cached"] += row.cached
        if row.day in by_day and row.cost_usd:
            by_day[row.day][key] = by_day[row.day].get(key, 0.0) + row.cost_usd
    keys = sorted(totals, key=lambda k: -(totals[k]["cost_usd"] or 0.0))
    return {
        "days": day_list,
        "by_day": by_day,
        "series": keys,
        "totals": [totals[k] for k in keys],
        "total_usd": functools.reduce(add_usd, (t["cost_usd"] for t in totals.values()), None),
        "caps": caps(engine, queries, settings, since),
    }


def caps(engine: Engine, queries: Queries, settings: Settings, since: float) -> dict[str, Any]:
    """The per-job and per-session spend caps, with the jobs and sessions nearest to them."""
    job_cap = settings.max_cost_usd
    session_cap = settings.max_session_cost_usd
    sessions = sorted(engine.sessions(limit=200), key=lambda s: -s.total_cost_usd)[:5]
    return {
        "job_cap": job_cap,
        "session_cap": session_cap,
        "jobs": [
            {"id": job_id, "agent": agent, "cost_usd": cost, "pct": _pct(cost, job_cap)}
            for job_id, agent, cost in queries.costliest(since, 5)
        ],
        "sessions": [
            {
                "agent": s.agent,
                "session_id": s.session_id,
                "cost_usd": s.total_cost_usd,
                "pct": _pct(s.total_cost_usd, session_cap),
            }
            for s in sessions
            if s.total_cost_usd > 0
        ],
    }


def _pct(value: float, cap: float | None) -> float | None:
    return round(100.0 * value / cap, 1) if cap else None


# sessions and threads -------------------------------------------------------------------------


def threads_view(settings: Settings, engine: Engine) -> dict[str, Any]:
    from relay.threads import open_threads, thread_settings

    threads = open_threads(settings)
    try:
        max_turns = thread_settings(settings).max_turns
        listed = [t.to_dict(max_turns, with_turns=False) for t in threads.list(limit=100, include_expired=True)]
    finally:
        threads.close()
    sessions = [
        {
            "agent": s.agent,
            "session_id": s.session_id,
            "cwd": s.cwd,
            "model": s.model,
            "title": s.title,
            "turns": s.turns,
            "cost_usd": s.total_cost_usd,
            "last_used_at": s.last_used_at,
        }
        for s in engine.sessions(limit=100)
    ]
    return {"threads": listed, "sessions": sessions}


def thread_view(settings: Settings, thread_id: str) -> dict[str, Any]:
    from relay.threads import open_threads, thread_settings

    threads = open_threads(settings)
    try:
        return threads.get(thread_id).to_dict(thread_settings(settings).max_turns)
    finally:
        threads.close()


# tasks ----------------------------------------------------------------------------------------

TASK_STATUSES = ("open", "in_progress", "closed")


def tasks_view(tracker: Any, project_path: str | None) -> dict[str, Any]:
    """Ready, blocked and closed tasks of one project, with their dependency links."""
    project = tracker.project(project_path, Path(project_path) if project_path else None)
    store = tracker.store
    tasks = store.all_tasks(project)
    blocked = {t.id: [b.id for b in blockers] for t, blockers in store.blocked(project, limit=1000)}
    ready = {t.id for t in store.ready(project, limit=1000)}
    deps = store.all_dependencies(project)
    links: dict[str, list[dict[str, str]]] = {}
    for d in deps:
        links.setdefault(d.task_id, []).append({"depends_on": d.depends_on, "type": d.dep_type})
    groups: dict[str, list[dict[str, Any]]] = {"ready": [], "blocked": [], "in_progress": [], "closed": []}
    for t in sorted(tasks, key=lambda t: (t.priority, t.created_at)):
        item = t.to_dict() | {"links": links.get(t.id, []), "blockers": blocked.get(t.id, [])}
        if t.status == "closed":
            groups["closed"].append(item)
        elif t.id in blocked:
            groups["blocked"].append(item)
        elif t.id in ready:
            groups["ready"].append(item)
        else:
            groups["in_progress"].append(item)
    return {"project": project.key, "groups": groups, "count": len(tasks), "statuses": TASK_STATUSES}


def set_task_status(tracker: Any, project_path: str | None, task_id: str, status: str) -> None:
    from relay.tracker import TaskChanges

    project = tracker.project(project_path, Path(project_path) if project_path else None)
    if status == "closed":
        tracker.store.close_task(project, task_id)
    else:
        tracker.store.update(project, task_id, TaskChanges(status=status))


# gateway servers ------------------------------------------------------------------------------


def servers_view(settings: Settings, live_gateway: Any | None) -> list[dict[str, Any]]:
    """Each downstream server: state, last error (from the running gateway when there is one), its tools."""
    from relay.gateway import Gateway, ServerRegistry, project_of

    registry = ServerRegistry(settings.db_path, settings.home)
    try:
        gateway = live_gateway or Gateway(registry, settings.home, project_of(Path.cwd()))
        out: list[dict[str, Any]] = []
        for status in gateway.statuses():
            scope = status["project_id"] or ""
            status["tools"] = sorted(registry.pins(scope, status["name"]))
            out.append(status)
        return out
    finally:
        registry.close()


# audit ----------------------------------------------------------------------------------------

AUDIT_LIMIT = 200


def audit_view(settings: Settings) -> dict[str, Any]:
    """The IAC view: the newest jobs folded from the audit log, newest first, and whether its chain holds."""
    from relay.audit import LOG_FILE, iter_lines, parse_loose, verify
    from relay.audit.views import ViewState

    path = settings.home / LOG_FILE
    if not path.exists():
        return {"available": False, "entries": [], "refused": [], "path": str(path), "report": None}
    state = ViewState(keep=AUDIT_LIMIT)
    refused: deque[dict[str, Any]] = deque(maxlen=AUDIT_LIMIT)  # delegations refused above their grant (no job)
    for line in iter_lines(path):
        state.fold_line(line)
        if (
            b'"permission.refused"' in line
            and (entry := parse_loose(line))
            and entry.get("event") == "permission.refused"
        ):
            refused.appendleft({"ts": entry.get("ts")} | (entry.get("data") or {}))
    entries: list[dict[str, Any]] = []
    for e in reversed(list(state.entries.values())):
        begun = e.running_at or e.started
        duration = e.ended - begun if (e.ended is not None and begun is not None) else None
        entries.append(asdict(e) | {"final": e.final, "duration_s": duration})
    report = verify(settings.home).to_dict()
    return {"available": True, "entries": entries, "refused": list(refused), "path": str(path), "report": report}
