"""Removing worktrees: a discard (worktree and branch), the prune of old unlanded ones, and their disk use."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from relay.errors import RelayError
from relay.workspaces import _git, procs
from relay.workspaces.records import WorkspaceRecord, WorkspaceStore

# Removed worktrees are renamed in here first (one rename, however many files), then deleted.
TRASH = ".trash"
# What git leaves in a worktree's admin folder (<common>/worktrees/<name>) while it works on it: `locked`
# ("initializing", as `git worktree add` starts) and the worktree's index.lock. Left by a killed git, they keep
# `git worktree prune` from forgetting the worktree and every git command from touching its index.
ADMIN_LOCKS = ("locked", "index.lock")
# What a git killed mid-land leaves in the worktree's git folder: a rebase's state, and the index's lock
# (cleared before a land: relay.workspaces.land); on the detached HEAD a land merges on, a merge's or cherry-pick's too.
HALF_DONE = ("rebase-merge", "rebase-apply", "index.lock")
HALF_DONE_DETACHED = ("MERGE_HEAD", "MERGE_MSG", "MERGE_MODE", "SQUASH_MSG", "CHERRY_PICK_HEAD", "AUTO_MERGE")


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
    unlock(common_dir, path)
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


def admin_dirs(common_dir: str | Path, path: Path) -> list[Path]:
    """git's admin folders (<common>/worktrees/<name>) of the worktree at `path`, found by their `gitdir` files
    (whatever became of the worktree's folder and its `.git` file)."""
    want = (path / ".git").resolve()
    found: list[Path] = []
    with contextlib.suppress(OSError):
        for admin in Path(common_dir, "worktrees").iterdir():
            with contextlib.suppress(OSError, UnicodeDecodeError):
                back = (admin / "gitdir").read_text(encoding="utf-8").strip()
                if back and admin.joinpath(back).resolve() == want:
                    found.append(admin)
    return found


def unlock(common_dir: str | Path, path: Path) -> list[str]:
    """The locks a killed git left on relay's worktree at `path` (its `locked` and index.lock) removed; which."""
    removed: list[str] = []
    for admin in admin_dirs(common_dir, path):
        for name in ADMIN_LOCKS:
            with contextlib.suppress(FileNotFoundError):
                (admin / name).unlink()
                removed.append(str(admin / name))
    return removed


def clear_half_done(git_dir: Path) -> list[str]:
    """git's own half-done state in a worktree's git folder, left by a relay (and its git) killed mid-land, removed:
    a rebase's folder, index.lock, and, when HEAD is detached (where a land merges), MERGE_HEAD and its kin. A
    merge on the job's branch itself (a conflict kept for an agent to resolve) is left as it is. What was removed;
    the caller then puts the worktree back on its branch."""
    try:
        detached = not (git_dir / "HEAD").read_text(encoding="utf-8").startswith("ref: ")
    except (OSError, UnicodeDecodeError):
        detached = False
    names = HALF_DONE + (HALF_DONE_DETACHED if detached else ())
    found = [name for name in names if (git_dir / name).exists()]
    for name in found:
        path = git_dir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return found


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


def take_back(store: WorkspaceStore, rec: WorkspaceRecord) -> None:
    """A worktree whose making never finished (its relay was killed): its folder, git's record and locks, its branch
    and the row, all gone."""
    remove_worktree(rec)
    if Path(rec.common_dir).is_dir():
        Path(rec.common_dir, "refs", "heads", f"{rec.branch}.lock").unlink(missing_ok=True)
        _git.run(["branch", "-D", rec.branch], rec.common_dir, check=False)
    store.delete(rec.job_id)


def unrecorded(store: WorkspaceStore, worktrees_dir: Path) -> list[Path]:
    """Folders under relay's worktrees folder that no workspace row accounts for (or only a discarded one)."""
    found: list[Path] = []
    with contextlib.suppress(OSError):
        for entry in sorted(worktrees_dir.iterdir()):
            if entry.name.startswith(".") or not entry.is_dir() or entry.is_symlink():
                continue
            rec = store.get(entry.name)
            if rec is None or rec.state == "discarded":
                found.append(entry)
    return found


def common_dir_of(folder: Path) -> Path | None:
    """The repository a worktree folder belongs to, when the repository vouches for it (its admin folder's `gitdir`
    points back at this folder); None otherwise."""
    try:
        said = (folder / ".git").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not said.startswith("gitdir: "):
        return None
    admin = Path(said.removeprefix("gitdir: "))
    admin = admin if admin.is_absolute() else folder / admin
    common = admin.parent.parent
    return common if admin.parent.name == "worktrees" and admin_dirs(common, folder) else None


def remove_unrecorded(folder: Path) -> None:
    """A worktree folder no row accounts for: its folder, git's record and locks, and its branch relay/<name>."""
    common = common_dir_of(folder)
    if common is None:
        shutil.rmtree(folder, ignore_errors=True)  # not a worktree a repository vouches for: only the folder goes
        return
    remove_at(str(common), folder)
    branch = f"relay/{folder.name}"
    Path(common, "refs", "heads", f"{branch}.lock").unlink(missing_ok=True)
    if _git.ok(["show-ref", "--verify", "--quiet", f"refs/heads/{branch}"], common):
        _git.run(["branch", "-D", branch], common, check=False)


def recover(store: WorkspaceStore, worktrees_dir: Path) -> list[str]:
    """What a killed relay left, found and cleaned up: the processes it ran for worktrees killed, worktrees it was
    making (rows still `creating`, and no live relay making them) taken back, and folders under the worktrees folder
    that no row accounts for removed, each with its branch and git's locks. Never one a live relay is making.
    The job ids (folder names) taken back."""
    procs.kill_left_over(worktrees_dir)
    taken: list[str] = []
    for rec in store.list(states=("creating",)):
        if not procs.being_made(worktrees_dir, rec.job_id):
            with contextlib.suppress(RelayError, OSError):
                take_back(store, rec)
                procs.forget_creating(worktrees_dir, rec.job_id)
                taken.append(rec.job_id)
    for folder in unrecorded(store, worktrees_dir):
        if not procs.being_made(worktrees_dir, folder.name):
            with contextlib.suppress(RelayError, OSError):
                remove_unrecorded(folder)
                taken.append(folder.name)
    return taken


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


def _locks(common_dir: str | Path | None, path: Path) -> list[str]:
    """git's locks on the worktree at `path` (`locked`, index.lock), as names in its admin folder."""
    if common_dir is None:
        return []
    return [
        f"{admin.name}/{name}"
        for admin in admin_dirs(common_dir, path)
        for name in ADMIN_LOCKS
        if (admin / name).exists()
    ]


def usage(store: WorkspaceStore, worktrees_dir: Path | None = None) -> dict[str, Any]:
    """What `relay doctor` reports: the worktrees there now, each with its state, size and git's locks on it; with
    `worktrees_dir`, also every folder there no row accounts for (state `unrecorded`: the sweep removes it)."""
    items: list[dict[str, Any]] = []
    for rec in store.list(states=("creating", "active", "landed")):
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
                "locks": _locks(rec.common_dir, path),
            }
        )
    for folder in unrecorded(store, worktrees_dir) if worktrees_dir is not None else []:
        items.append(
            {
                "job_id": folder.name,
                "branch": f"relay/{folder.name}",
                "state": "unrecorded",
                "path": str(folder),
                "bytes": folder_size(folder),
                "locks": _locks(common_dir_of(folder), folder),
            }
        )
    return {"count": len(items), "bytes": sum(i["bytes"] for i in items), "worktrees": items}
