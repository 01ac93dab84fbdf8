"""The result envelope: the same shape for every backend, bounded output, and what to call next."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from relay.events import Event
from relay.jobs.output import read_text_page
from relay.runtime.supervisor import JobFiles
from relay.store import JobRecord

# Stored events keep at most this many characters of any text field; the full text is in the
# job's files (stdout, transcript, result).
EVENT_TEXT_LIMIT = 4000


# A job's title is the start of its prompt on one line.
TITLE_CHARS = 80


def job_title(request: dict[str, Any], limit: int = TITLE_CHARS) -> str:
    """The first `limit` characters of the request's prompt, whitespace collapsed."""
    return " ".join(str(request.get("prompt", "")).split())[:limit]


def clip_event(event: Event) -> Event:
    data = dict(event.data)
    clipped = False
    for key, value in data.items():
        if isinstance(value, str) and len(value) > EVENT_TEXT_LIMIT:
            data[key] = value[:EVENT_TEXT_LIMIT]
            clipped = True
    if clipped:
        data["clipped"] = True
    return Event(event.type, data)


def render_event(event: Event) -> str:
    """One human-readable transcript line (or block) for an event."""
    d = event.data
    match event.type:
        case "message" | "message.delta":
            return f"[assistant] {d.get('text', '')}"
        case "reasoning":
            return f"[reasoning] {d.get('text', '')}"
        case "tool.started":
            return f"[tool] {d.get('name')} {json.dumps(d.get('input'), default=str)}"
        case "tool.completed":
            state = "ok" if d.get("ok") else "error"
            return f"[tool {state}] {d.get('name')}: {d.get('output') or ''!s}"
        case "session.started":
            return f"[session] {d.get('session_id')} model={d.get('model')}"
        case "log":
            return f"[log] {d.get('text', '')}"
        case _:
            return f"[{event.type}] {json.dumps(d, default=str)}"


def next_step(rec: JobRecord, truncated: bool, limit: int) -> str | None:
    if not rec.is_final:
        return f"job_wait(job_ids=['{rec.id}']) to wait for it, or job_status / job_cancel"
    if truncated:
        return f"job_result(job_id='{rec.id}', offset={limit}) for the rest of the output"
    return None


def envelope(
    rec: JobRecord, files: JobFiles, limit: int, page: Callable[[Path, int, int], tuple[str, int]] = read_text_page
) -> dict[str, Any]:
    """The envelope for a job in any state; `output` holds at most `limit` characters (read by `page`)."""
    result = rec.result or {}
    output, total = ("", 0)
    if rec.is_final:
        output, total = page(files.result, 0, limit)
    truncated = total > len(output)
    duration_ms = None
    if rec.started_at is not None and rec.finished_at is not None:
        duration_ms = int((rec.finished_at - rec.started_at) * 1000)
    return {
        "job_id": rec.id,
        "status": rec.status,
        "agent": rec.agent,
        "model": rec.model,
        "via": rec.request.get("via"),
        "output": output,
        "truncated": truncated,
        "output_chars": total,
        "next": next_step(rec, truncated, limit),
        "session_id": rec.session_id,
        "usage": result.get("usage", {"input": 0, "output": 0, "cached": 0}),
        "cost_usd": result.get("cost_usd"),
        "duration_ms": duration_ms,
        "exit_code": rec.exit_code,
        "files_changed": result.get("files_changed", []),
        "permission_denials": result.get("permission_denials", []),
        "tool_uses": len(result.get("tool_uses", [])),
        "error": rec.error,
        "warnings": warnings(rec),
    }


def warnings(rec: JobRecord) -> list[str]:
    """What a caller should know about a job that did not fail (e.g. a CLI that exits non-zero after its answer)."""
    found: list[str] = []
    if rec.status == "completed" and rec.exit_code not in (None, 0):
        found.append(
            f"{rec.agent} exited with code {rec.exit_code} after a successful result: the answer is complete, "
            f"but the CLI reported a problem (job_result view=stderr shows it)"
        )
    return found
