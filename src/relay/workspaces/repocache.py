"""A worker host's cache of repositories (`RELAY_HOME/repos`): each one's last use, the prune of unused ones, its size.

Each cache `repos/<hash>` has a lock file beside it, `repos/<hash>.lock`: a placement holds it while it
fetches and adds a job's worktree, and stamps its mtime (a push stamps it too); that is the cache's
last use. `prune` removes a cache whose last use is older than the retention time (`[workspaces]
repos_keep_days`, 30 by default), and only while it holds that lock without waiting (never during a
fetch) and no worktree of the cache is left: a job queued here has not placed its worktree yet (it
takes the lock, and makes the cache again), one running or ended with its worktree kept still has
it. The lock file goes with its cache. Workspace rows of a removed cache whose worktree was already
pruned become `discarded`.

relay prunes as a job engine starts and then at most once a day per process (at its next placement);
`relay doctor` reports the cache's path, how many repositories it holds and their size.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

from relay.workspaces import _git
from relay.workspaces.records import WorkspaceStore

LOCK_SUFFIX = ".lock"
# A process prunes the cache at most this often.
PRUNE_EVERY_S = 86400.0
# `usage` counts bytes for at most this long; a larger cache is reported as "at least" what it counted.
USAGE_BUDGET_S = 2.0

# When this process last pruned each cache folder.
_last_prune: dict[Path, float] = {}


def lock_of(cache: Path) -> Path:
    return cache.with_name(cache.name + LOCK_SUFFIX)


def stamp(cache: Path) -> None:
    """Record that a job used `cache` now."""
    with contextlib.suppress(OSError):
        lock_of(cache).touch()


def last_used(cache: Path) -> float:
    """When a job last used `cache`: its lock's stamp, or its last fetch (FETCH_HEAD) when later."""
    times = [0.0]
    for path in (lock_of(cache), cache / "FETCH_HEAD", cache / "HEAD"):
        with contextlib.suppress(OSError):
            times.append(path.stat().st_mtime)
    return max(times)


def caches(repos_dir: Path) -> list[Path]:
    """The repository caches in `repos_dir` (bare repositories: folders with a HEAD file)."""
    try:
        entries = list(os.scandir(repos_dir))
    except OSError:
        return []
    return sorted(Path(e.path) for e in entries if e.is_dir(follow_symlinks=False) and Path(e.path, "HEAD").is_file())


def in_use(cache: Path) -> bool:
    """Whether a worktree of `cache` is left (git's record of it in the cache's `worktrees` folder)."""
    try:
        return any(True for _ in os.scandir(cache / "worktrees"))
    except OSError:
        return False


@contextlib.contextmanager
def _held_now(lock_file: Path) -> Generator[bool]:
    """The cache's lock taken without waiting: True, held for the block; False when a placement holds it."""
    import fcntl  # POSIX only, as the lock it tries

    with open(lock_file, "a+b") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        if not _git.same_file(fh.fileno(), lock_file):  # removed meanwhile by another prune
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def prune(repos_dir: Path, store: WorkspaceStore, keep_s: float, now: float | None = None) -> list[str]:
    """Remove the caches no job used for longer than `keep_s` and none has a worktree in; the names removed."""
    now = time.time() if now is None else now
    _last_prune[repos_dir] = time.monotonic()
    removed: list[str] = []
    for cache in caches(repos_dir):
        if now - last_used(cache) <= keep_s or in_use(cache):
            continue
        with _held_now(lock_of(cache)) as held:
            if not held or now - last_used(cache) <= keep_s or in_use(cache):
                continue  # a placement holds it, or used it since the first look
            shutil.rmtree(cache, ignore_errors=True)
            if not cache.exists():  # the lock goes too, still held: a placement waiting on it locks a new one
                lock_of(cache).unlink(missing_ok=True)
        if not cache.exists():
            removed.append(cache.name)
            _forget(store, cache, now)
    return removed


def _forget(store: WorkspaceStore, cache: Path, now: float) -> None:
    """Rows of workspaces whose branch was in the removed cache: those not landed become discarded."""
    for rec in store.list(states=("active", "pruned")):
        if Path(rec.common_dir) == cache:
            store.update(rec.job_id, state="discarded", removed_at=now)


def prune_due(repos_dir: Path) -> bool:
    """Whether this process has not pruned `repos_dir` within PRUNE_EVERY_S."""
    last = _last_prune.get(repos_dir)
    return last is None or time.monotonic() - last >= PRUNE_EVERY_S


def forget_prunes() -> None:
    """This process forgets when it pruned (the next placement prunes)."""
    _last_prune.clear()


def usage(repos_dir: Path, keep_s: float, budget_s: float = USAGE_BUDGET_S) -> dict[str, Any]:
    """What `relay doctor` reports: the cache's path, how many repositories, their bytes on disk (counted for at
    most `budget_s`: `complete` False then, and `bytes` what was counted so far)."""
    found = caches(repos_dir)
    deadline = time.monotonic() + budget_s
    total, complete = 0, True
    stack = list(found)
    while stack:
        if time.monotonic() > deadline:
            complete = False
            break
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                else:
                    total += entry.stat(follow_symlinks=False).st_blocks * 512
            except OSError:
                continue
    return {
        "path": str(repos_dir),
        "count": len(found),
        "bytes": total,
        "complete": complete,
        "keep_days": keep_s / 86400,
    }
