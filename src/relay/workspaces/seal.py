"""The end of a worktree job: what the agent left uncommitted becomes a commit on its branch, and the branch's stats."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from relay.errors import RelayError
from relay.workspaces import _git
from relay.workspaces._git import AUTHOR
from relay.workspaces.records import WorkspaceRecord, WorkspaceStore

# A commit's subject line is at most this long (git's own convention).
SUBJECT_CHARS = 72


def commit_message(prompt: str, job_id: str, agent: str) -> str:
    """The prompt's first line as the subject, the job that made it in the body."""
    first = next((line.strip() for line in prompt.splitlines() if line.strip()), "")
    subject = first if len(first) <= SUBJECT_CHARS else first[: SUBJECT_CHARS - 1] + "…"
    return f"{subject or f'relay job {job_id}'}\n\nrelay job {job_id} ({agent})\n"


def head_of(rec: WorkspaceRecord) -> str:
    return _git.out(["rev-parse", "--verify", f"refs/heads/{rec.branch}"], rec.common_dir)


def commit_leftovers(rec: WorkspaceRecord, message: str) -> bool:
    """Commit everything uncommitted in the worktree (author relay); False when the worktree is gone."""
    path = Path(rec.path)
    if not path.is_dir():
        return False
    git_dir = _git.worktree_git_dir(rec.common_dir, path)  # not the one its `.git` file names: the agent's to edit
    _git.run(["add", "--all"], path, git_dir=git_dir)
    if not _git.ok(["diff", "--cached", "--quiet"], path, git_dir=git_dir):
        _git.run(["commit", "--quiet", "--no-verify", "-m", message], path, env=AUTHOR, git_dir=git_dir)
    return True


def stats(rec: WorkspaceRecord, head: str) -> dict[str, Any]:
    """Commits, files, insertions and deletions of the branch against its base."""
    commits = int(_git.out(["rev-list", "--count", f"{rec.base_sha}..{head}"], rec.common_dir) or 0)
    files: list[str] = []
    insertions = deletions = 0
    raw = _git.run(["diff", "--numstat", "-z", "--no-renames", rec.base_sha, head], rec.common_dir).stdout
    for item in raw.split("\0"):
        parts = item.split("\t", 2)
        if len(parts) == 3:
            added, removed, name = parts
            files.append(name)
            insertions += int(added) if added.isdigit() else 0
            deletions += int(removed) if removed.isdigit() else 0
    return {"commits": commits, "files_changed": sorted(files), "insertions": insertions, "deletions": deletions}


def info(rec: WorkspaceRecord, head: str | None = None) -> dict[str, Any]:
    """The envelope's `workspace`: where, which branch, from what, and what the branch holds now."""
    out: dict[str, Any] = {
        "path": rec.cwd,
        "branch": rec.branch,
        "base": rec.base_ref or rec.base_sha,
        "base_sha": rec.base_sha,
        "head": head or rec.head_sha,
        "state": rec.state,
        "commits": 0,
        "files_changed": [],
        "insertions": 0,
        "deletions": 0,
    }
    if rec.landed_into:
        out["landed_into"] = rec.landed_into
        out["landed_sha"] = rec.landed_sha
    try:
        head = head or head_of(rec)
    except RelayError:
        return out | {"head": None}  # the branch is gone (discarded by hand)
    return out | {"head": head} | stats(rec, head)


def seal(store: WorkspaceStore, rec: WorkspaceRecord, message: str) -> dict[str, Any]:
    """Commit the job's leftovers on its branch, record the head, return the workspace info (with a note if gone)."""
    present = commit_leftovers(rec, message)
    head = head_of(rec)
    store.ended(rec.job_id, head)
    found = info(rec, head)
    if not present:
        found["note"] = "the worktree was removed while the job ran: the branch holds only what was committed before"
    return found


def diff(rec: WorkspaceRecord) -> str:
    """The branch's unified diff against its base."""
    return _git.run(["diff", "--no-color", "--no-ext-diff", rec.base_sha, head_of(rec)], rec.common_dir).stdout
