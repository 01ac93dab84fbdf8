"""The audit log of every job relay runs (a SHA-256 hash chain in RELAY_HOME/audit.jsonl) and its views.

The store records one entry per job state change (`queued`, `running`, then the final status);
`verify` names any line edited, removed, reordered or cut; IAC.md and CONTEXT.md are rendered from
the log. `verify` also checks the log against a witness when the store keeps one (witness.py: an
INSERT-only record relay's own rights cannot rewrite). Nothing here imports relay above the store's floor,
so the store (the one place that sees every state change) can use it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from relay.audit.log import GENESIS, HEAD_FILE, LOG_FILE, AuditLog, iter_lines, parse_loose, read_head
from relay.audit.verify import Problem, Report, verify
from relay.audit.views import CONTEXT_FILE, IAC_FILE, Views, ViewsConfig, render_context, render_iac, views_config
from relay.audit.witness import Witness, unwitnessed

__all__ = [
    "CONTEXT_FILE",
    "GENESIS",
    "HEAD_FILE",
    "IAC_FILE",
    "LOG_FILE",
    "AuditLog",
    "Problem",
    "Report",
    "Views",
    "ViewsConfig",
    "Witness",
    "bounded",
    "bounded_ends",
    "finished_data",
    "iter_lines",
    "open_audit",
    "parse_loose",
    "queued_data",
    "read_head",
    "render_context",
    "render_iac",
    "replace_views",
    "unwitnessed",
    "verify",
    "views_config",
]

# Seed 004: an output over 50,000 characters keeps its first and last 25,000.
MAX_TEXT_CHARS = 50_000
KEEP_EACH_END = 25_000


def open_audit(home: Path, *, views: bool = True) -> AuditLog:
    """The audit log of this RELAY_HOME, rendering its views after each entry unless config turns them off."""
    log = AuditLog(home)
    if views:
        renderer = Views(home, views_config(home))
        log.views = renderer
        log.listeners.append(renderer.schedule)
    return log


def replace_views(log: AuditLog, config: ViewsConfig) -> None:
    """Render the log's views with `config` from now on instead (a profile's own folder and CONTEXT.md start)."""
    old = log.views
    if isinstance(old, Views) and old.schedule in log.listeners:
        log.listeners.remove(old.schedule)
    log.views = None
    if config.out_dir is None:
        return
    renderer = Views(log.home, config)
    log.views = renderer
    log.listeners.append(renderer.schedule)
    renderer.schedule()


def bounded(text: str) -> str:
    """Text as the audit log keeps it: whole up to 50,000 characters, else its first and last 25,000."""
    if len(text) <= MAX_TEXT_CHARS:
        return text
    return bounded_ends(text[:KEEP_EACH_END], text[-KEEP_EACH_END:], len(text))


def bounded_ends(head: str, tail: str, total: int) -> str:
    """`bounded` of a text of more than MAX_TEXT_CHARS characters, known by its first and last KEEP_EACH_END."""
    omitted = total - 2 * KEEP_EACH_END
    return f"{head}\n\n[... {omitted} characters omitted ...]\n\n{tail}"


def queued_data(agent: str, kind: str, request: dict[str, Any], model: str | None, cwd: str | None) -> dict[str, Any]:
    """A new job's entry: who runs it, where, its input (bounded), and for an agent CLI the permission it runs
    with and what allowed it (the grant, or the person's confirmation; relay.jobs.grants)."""
    prompt = str(request.get("prompt") or "")
    data = {
        "agent": agent,
        "kind": kind,
        "model": model,
        "cwd": cwd,
        "tool": request.get("tool"),
        "prompt": bounded(prompt),
        "prompt_chars": len(prompt),
    }
    if request.get("grant") is not None:
        data["grant"] = request["grant"]
    return data


def finished_data(
    status: str,
    *,
    exit_code: int | None,
    result: dict[str, Any] | None,
    error: dict[str, Any] | None,
    model: str | None,
    session_id: str | None,
    output: str | None,
    output_chars: int | None = None,
) -> dict[str, Any]:
    """A job's final entry: outcome, cost, the tools it used, its error and its output (bounded).

    `output_chars`: the output's length, when `output` is already bounded (`bounded_ends`) for a text too large to hold.
    """
    result = result or {}
    tools: list[str] = []
    uses: list[Any] = list(result.get("tool_uses") or [])
    for use in uses:
        name: Any = cast(dict[str, Any], use).get("name") if isinstance(use, dict) else use
        if name and str(name) not in tools:
            tools.append(str(name))
    text = output or ""
    return {
        "status": status,
        "exit_code": exit_code,
        "model": model,
        "session_id": session_id,
        "cost_usd": result.get("cost_usd"),
        "usage": result.get("usage"),
        "tools": tools,
        "error": {"code": error.get("code"), "message": error.get("message")} if error else None,
        "output": bounded(text) if output_chars is None else text,
        "output_chars": len(text) if output_chars is None else output_chars,
    }
