"""Paging: a job's output, a page at a time (final text, transcript, raw events, stderr, a worktree's diff, a land's test,
a new worktree's setup)."""

from __future__ import annotations

from typing import Any

from relay.errors import invalid
from relay.jobs.state import JobState
from relay.jobs.workspace import JobWorkspaces
from relay.secrets import redact
from relay.store import JobRecord
from relay.workspaces.ready import SETUP_LOG


def job_cursor(rec: JobRecord) -> str:
    """The cursor that continues a job list after `rec`: its creation time and id."""
    return f"{rec.created_at!r}_{rec.id}"


def parse_cursor(cursor: str) -> tuple[float, str]:
    """A job list's cursor (job_cursor) back into its creation time and id; INVALID_ARGUMENT for anything else."""
    created, _, job_id = cursor.partition("_")
    try:
        return float(created), job_id
    except ValueError:
        raise invalid(
            f"cursor {cursor[:80]!r} is not one job_list gave", "pass next_cursor from the last page"
        ) from None


def read_page(
    state: JobState, spaces: JobWorkspaces, rec: JobRecord, view: str, offset: int, limit: int
) -> dict[str, Any]:
    """A page of a job's full output: final text, transcript, raw stdout events, stderr, diff, test or setup."""
    files = state.files(rec.id)
    paths = {
        "final": files.result,
        "transcript": files.dir / "transcript.txt",
        "events": files.stdout,
        "stderr": files.stderr,
        "test": files.dir / "land-test.log",
        "setup": files.dir / SETUP_LOG,  # a new worktree made ready: what was copied, its setup command's output
    }
    if view == "diff":  # a worktree job's branch against its base
        paths["diff"] = spaces.diff_file(rec.id, fresh=offset == 0)
    if view not in paths:
        raise invalid(
            f"view {view!r} is not one of {', '.join([*paths, 'diff'])}",
            "use final, transcript, events, stderr, diff, test or setup",
        )
    if offset < 0 or limit < 1:
        raise invalid("offset must be >= 0 and limit >= 1", "page with offset=0, then offset += len(text)")
    if view in ("final", "diff") and not rec.is_final:
        text, total = "", 0
    else:
        stream = {"final": "result", "events": "stdout"}.get(view, view)
        text, total = state.text_page(rec.id, stream, paths[view], offset, limit)
    end = offset + len(text)
    if view in ("events", "stderr", "setup"):
        # The agent's (or the setup command's) output, kept as printed: what relay hands back is redacted (offsets stay raw).
        text = redact(text, state.secrets)
    return {
        "job_id": rec.id,
        "status": rec.status,
        "view": view,
        "offset": offset,
        "text": text,
        "total_chars": total,
        "next_offset": end if end < total else None,
        "complete": rec.is_final and end >= total,
    }
