"""One list of sessions: those relay's agent jobs started (resumable with delegate) and those CLIs reported by hook."""

from __future__ import annotations

from typing import Any

from relay.hooks.store import HookStore
from relay.store import JobStore


def merged_sessions(
    store: JobStore, hooks: HookStore, *, agent: str | None = None, limit: int = 20, principal: str | None = None
) -> list[dict[str, Any]]:
    """Sessions newest first, each once: `origin` says who knows it (relay: a job ran it; hook: a CLI reported it).

    A session both know (a codex thread relay ran and tracks) is listed once, as relay's, with the hook's status.
    With `principal`, only that principal's: the sessions its jobs started and the ones it reported by hook.
    """
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for s in store.list_sessions(agent=agent, limit=limit, principal=principal):
        rows[(s.principal, s.agent, s.session_id)] = {
            "agent": s.agent,
            "session_id": s.session_id,
            "cwd": s.cwd,
            "model": s.model,
            "permission": s.permission,
            "title": s.title,
            "turns": s.turns,
            "total_cost_usd": s.total_cost_usd,
            "last_used_at": s.last_used_at,
            "origin": "relay",
            "status": None,
        }
    for h in hooks.list(source=agent, limit=limit, principal=principal):
        key = (h.principal, h.source.lower(), h.id)
        if key in rows:
            rows[key]["status"] = h.status
            if not rows[key]["title"]:
                rows[key]["title"] = h.title
            continue
        rows[key] = {
            "agent": h.source.lower(),
            "session_id": h.id,
            "cwd": h.cwd,
            "model": None,
            "permission": "external",
            "title": h.title,
            "turns": h.prompt_count,
            "total_cost_usd": 0.0,
            "last_used_at": h.updated_at,
            "origin": "hook",
            "status": h.status,
        }
    ordered = sorted(rows.values(), key=lambda r: r["last_used_at"], reverse=True)
    return ordered[:limit]
