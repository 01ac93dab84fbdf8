"""The workers page: every process that runs jobs from the store's queue, read through `Store.list_workers`.

A worker is a `relay worker`, or a `relay serve` / `relay run` that runs its own jobs (the embedded default).
Its heartbeat renews its lease every third of `lease_s`; a heartbeat older than the lease means the worker
is gone or cut off, and the next heartbeat of any relay of the store will judge it lost.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from relay.store import JobStore, WorkerRecord
from relay.web._queries import Queries

ACTIVE_WORKER_STATES = ("running", "stopping")
# Most workers the page lists (stopped ones pile up: every relay process that ran jobs was one).
WORKERS_LIMIT = 200


def stale(w: WorkerRecord, now: float) -> bool:
    """An active worker whose heartbeat is older than its lease: it is gone, or cut off from the store."""
    return w.state in ACTIVE_WORKER_STATES and now - w.heartbeat_at > w.lease_s


def worker_row(w: WorkerRecord, now: float | None = None) -> dict[str, Any]:
    """One row of the workers table; `sig` changes whenever something the row shows changes."""
    now = time.time() if now is None else now
    row: dict[str, Any] = {
        "id": w.id,
        "name": w.name,
        "host": w.host,
        "pid": w.pid,
        "state": w.state,
        "heartbeat_at": w.heartbeat_at,
        "heartbeat_age_s": round(max(0.0, now - w.heartbeat_at), 1),
        "lease_s": w.lease_s,
        "stale": stale(w, now),
        "slots": w.slots,
        "running": w.running,
        "ran": w.ran,
        "agents": ", ".join(w.agents) if w.agents else "every agent",
        "labels": ", ".join(w.labels),
        "started_at": w.started_at,
        "active": w.state in ACTIVE_WORKER_STATES,
    }
    row["sig"] = f"{w.state}|{w.heartbeat_at}|{w.running}|{w.ran}|{w.slots}"
    return row


def workers_view(store: JobStore, show_all: bool) -> dict[str, Any]:
    """The workers table: the running and stopping ones (with `show_all`, the stopped and lost ones too)."""
    now = time.time()
    listed = store.list_workers(include_stopped=show_all)
    rows = [worker_row(w, now) for w in listed[:WORKERS_LIMIT]]
    rows.sort(key=lambda r: not r["active"])  # active first, each group most recently heard from first
    return {
        "workers": rows,
        "show_all": show_all,
        "more": max(0, len(listed) - WORKERS_LIMIT),
        "running": sum(1 for r in rows if r["active"] and not r["stale"]),
        "stale": sum(1 for r in rows if r["stale"]),
        "now": now,
    }


def worker_fact(queries: Queries, worker_id: str | None) -> dict[str, Any] | None:
    """Who holds (or last held) a job's claim, for the job page: its name, host, pid and state, or just its id."""
    if worker_id is None:
        return None
    found = queries.worker(worker_id)
    if found is None:
        return {"id": worker_id, "name": worker_id, "host": None, "pid": None, "state": "unknown"}
    return asdict(found)
