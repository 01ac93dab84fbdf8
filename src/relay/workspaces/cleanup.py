"""Removing worktrees: a discard (worktree and branch), the prune of old unlanded ones, and their disk use."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from relay.workspaces import _git
from relay.workspaces.records import WorkspaceRecord, WorkspaceStore

# Removed worktrees are renamed in here first (one rename, however many files), then deleted.
TRASH = ".trash"


def remove_worktree(rec: WorkspaceRecord, *, later: bool = False) -> None:
    """The worktree's folder and git's record of it (the branch stays); see `remove_at`."""
    remove_at(rec.common_dir, Path(rec.path), later=later)


def remove_at(common_dir: str, path: Path, *, later: bool = False) -> None:
    """The worktree at `path` of the repository whose git folder is `common_dir`: its folder and git's record.

    The folder is renamed into the trash at once, so the path is free and git forgets the worktree
    in milliseconds; its files are deleted then, or (`later`) in a background thread. What a process
    leaves in the trash when it exits is deleted when relay next starts (`empty_trash`).
    """
    trash: Path | None = None
    if path.is_dir():
        trash = path.parent / TRASH / f"{path.name}-{time.time_ns()}"
        try:
            trash.parent.mkdir(exist_ok=True)
            os.rename(path, trash)
        except OSError:
            trash = None
            if Path(common_dir).is_dir():
                _git.run(["worktree", "remove", "--force", str(path)], common_dir, check=False)
            shutil.rmtree(path, ignore_errors=True)
    if Path(common_dir).is_dir():
        _git.run(["worktree", "prune"], common_dir, check=False)
    if trash is not None:
        if later:
            threading.Thread(target=_delete, args=(trash,), name="relay-worktree-trash", daemon=True).start()
        else:
            _delete(trash)


def _delete(trash: Path) -> None:
    """A removed worktree's files, and the trash folder too once nothing else is in it."""
    shutil.rmtree(trash, ignore_errors=True)
    with contextlib.suppress(OSError):
        trash.parent.rmdir()


def empty_trash(worktrees_dir: Path) -> None:
    """Delete what removed worktrees left in the trash (a process that exited before its deletion ended)."""
    shutil.rmtree(worktrees_dir / TRASH, ignore_errors=True)


def discard(store: WorkspaceStore, rec: WorkspaceRecord) -> None:
    """Remove the worktree and its branch."""
    remove_worktree(rec)
    if Path(rec.common_dir).is_dir():
        _git.run(["branch", "-D", rec.branch], rec.common_dir, check=False)
    store.update(rec.job_id, state="discarded", removed_at=time.time())


def prune(store: WorkspaceStore, keep_s: float, running: set[str], now: float | None = None) -> list[str]:
    """Remove worktrees of ended jobs unlanded for longer than `keep_s`, and any landed one still there.

    `running`: jobs (owners of workspaces) that run now; their worktrees are never touched.
    """
    now = time.time() if now is None else now
    pruned: list[str] = []
    for rec in store.list(states=("active", "landed")):
        if rec.job_id in running:
            continue
        old = rec.state == "active" and rec.ended_at is not None and now - rec.ended_at > keep_s
        if old or (rec.state == "landed" and rec.removed_at is None):
            remove_worktree(rec, later=True)
            store.update(rec.job_id, state="pruned" if old else "landed", removed_at=now)
            pruned.append(rec.job_id)
    return pruned


def folder_size(path: Path) -> int:
    """Bytes under `path` (files only, links not followed)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def usage(store: WorkspaceStore) -> dict[str, Any]:
    """What `relay doctor` reports: the worktrees there now, each with its state and size."""
    items: list[dict[str, Any]] = []
    for rec in store.list(states=("active", "landed")):
        path = Path(rec.path)
        if not path.is_dir():
            continue
        items.append(
            {
                "job_id": rec.job_id,
                "branch": rec.branch,
                "state": rec.state,
                "path": rec.path,
                "bytes": folder_size(path),
            }
        )
    return {"count": len(items), "bytes": sum(i["bytes"] for i in items), "worktrees": items}
