"""The cache of repositories on a worker host (RELAY_HOME/repos): unused caches pruned, never one a job uses, its size.

Repositories are reached by file:// URLs; "days later" is the prune's `now` moved past the retention time.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from relay import doctor
from relay.config import Settings
from relay.workspaces import Workspaces, _git, remote, repocache
from relay.workspaces.cleanup import remove_worktree
from relay.workspaces.records import WorkspaceStore
from tests.conftest import SettingsFactory
from tests.web.conftest import wait_until
from tests.workspaces.conftest import git, one_commit_repo

KEEP_S = 30 * 86400.0
LATER = time.time() + KEEP_S + 3600  # a "now" past the retention of anything used during the test


@pytest.fixture
def home(tmp_path: Path) -> Iterator[tuple[Path, WorkspaceStore]]:
    store = WorkspaceStore(tmp_path / "home" / "relay.db")
    yield tmp_path / "home", store
    store.close()


def url_of_new_repo(tmp_path: Path, name: str) -> str:
    folder = tmp_path / name
    folder.mkdir()
    return f"file://{one_commit_repo(folder)}"


def placed_and_ended(home: Path, store: WorkspaceStore, job_id: str, url: str) -> Path:
    """A job placed from `url` whose worktree was then pruned (as an ended job's is): its cache, with no worktree."""
    rec = remote.place(home / "repos", home / "worktrees", store, job_id, url)
    remove_worktree(rec)
    store.update(job_id, state="pruned", removed_at=time.time())
    return remote.cache_of(home / "repos", url)


def test_a_cache_unused_past_the_retention_goes_with_its_lock_and_its_rows_are_discarded(
    tmp_path: Path, home: tuple[Path, WorkspaceStore]
) -> None:
    root, store = home
    url = url_of_new_repo(tmp_path, "app")
    cache = placed_and_ended(root, store, "job1", url)
    assert repocache.prune(root / "repos", store, KEEP_S) == []  # used just now: kept
    assert repocache.prune(root / "repos", store, KEEP_S, now=LATER) == [cache.name]
    assert not cache.exists() and not repocache.lock_of(cache).exists()
    rec = store.get("job1")
    assert rec is not None and rec.state == "discarded"
    again = remote.place(root / "repos", root / "worktrees", store, "job2", url)  # made again for the next job
    assert cache.is_dir() and Path(again.path, "app.txt").read_text() == "one\n"


def test_a_cache_a_job_still_has_a_worktree_in_is_kept_however_old(
    tmp_path: Path, home: tuple[Path, WorkspaceStore]
) -> None:
    root, store = home
    url = url_of_new_repo(tmp_path, "app")
    running = remote.place(root / "repos", root / "worktrees", store, "job1", url)
    assert repocache.prune(root / "repos", store, KEEP_S, now=LATER) == []
    assert Path(running.path, "app.txt").is_file() and git(Path(running.path), "status", "--porcelain") == ""
    rec = store.get("job1")
    assert rec is not None and rec.state == "active"


def test_a_cache_whose_lock_a_placement_holds_is_kept(tmp_path: Path, home: tuple[Path, WorkspaceStore]) -> None:
    root, store = home
    cache = placed_and_ended(root, store, "job1", url_of_new_repo(tmp_path, "app"))
    with _git.locked(repocache.lock_of(cache)):  # a placement fetching now, in any process
        assert repocache.prune(root / "repos", store, KEEP_S, now=LATER) == []
    assert (cache / "HEAD").is_file()


def test_only_the_caches_past_the_retention_go(tmp_path: Path, home: tuple[Path, WorkspaceStore]) -> None:
    root, store = home
    old = placed_and_ended(root, store, "job1", url_of_new_repo(tmp_path, "old"))
    fresh = placed_and_ended(root, store, "job2", url_of_new_repo(tmp_path, "fresh"))
    past = time.time() - KEEP_S - 60
    for path in (repocache.lock_of(old), old / "FETCH_HEAD", old / "HEAD"):
        os.utime(path, (past, past))
    assert repocache.prune(root / "repos", store, KEEP_S) == [old.name]
    assert fresh.is_dir() and not old.exists()


def test_a_placement_waiting_on_a_lock_that_its_holder_removed_locks_the_new_file(tmp_path: Path) -> None:
    lock = tmp_path / "cache.lock"
    inside, release = threading.Event(), threading.Event()

    def placement() -> None:
        with _git.locked(lock):
            inside.set()
            release.wait(10)

    with _git.locked(lock):
        waiter = threading.Thread(target=placement, daemon=True)
        waiter.start()
        wait_until(lambda: _open_here(lock) > 1, 10, "the placement opening the lock file")  # then it waits on it
        lock.unlink()  # what a prune does, holding the lock
    assert inside.wait(10)
    with open(lock, "a+b") as fh, pytest.raises(BlockingIOError):  # the waiter holds the file now at that path
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    release.set()
    waiter.join(10)


def _open_here(path: Path) -> int:
    """How many file descriptors of this process have `path` open."""
    fds = Path("/proc/self/fd")
    return sum(1 for fd in fds.iterdir() if os.path.realpath(fd) == str(path))


def test_a_process_prunes_at_its_first_placement_then_not_again_within_a_day(
    tmp_path: Path, make_settings: SettingsFactory
) -> None:
    settings: Settings = make_settings()
    spaces = Workspaces(settings)
    repocache.forget_prunes()
    try:
        assert repocache.prune_due(settings.repos_dir)
        spaces.place("job1", url_of_new_repo(tmp_path, "app"))
        assert not repocache.prune_due(settings.repos_dir)
    finally:
        spaces.close()


def test_doctor_reports_the_repos_cache_path_count_and_size_in_text_and_json(
    tmp_path: Path, make_settings: SettingsFactory
) -> None:
    settings = make_settings()
    line, found = doctor.repos_report(settings)
    assert line == f"repos cache: none ({settings.repos_dir})" and found["count"] == 0
    spaces = Workspaces(settings)
    try:
        spaces.place("job1", url_of_new_repo(tmp_path, "one"))
        spaces.place("job2", url_of_new_repo(tmp_path, "two"))
    finally:
        spaces.close()
    line, found = doctor.repos_report(settings)
    assert found["count"] == 2 and found["complete"] and found["bytes"] > 0
    assert line.startswith(f"repos cache: 2 repositories in {settings.repos_dir}, ") and "30 days" in line
    relay = str(Path(sys.executable).with_name("relay"))
    env = {"PATH": os.environ["PATH"], "HOME": str(settings.home), "RELAY_HOME": str(settings.home)}
    ran = subprocess.run([relay, "doctor", "--json"], env=env, capture_output=True, text=True, timeout=120)
    repos = json.loads(ran.stdout)["repos"]
    assert (repos["path"], repos["count"], repos["summary"]) == (str(settings.repos_dir), 2, line)
    text = subprocess.run([relay, "doctor"], env=env, capture_output=True, text=True, timeout=120)
    assert line in text.stdout


def test_the_size_of_a_cache_too_big_to_count_in_time_is_a_lower_bound(
    tmp_path: Path, home: tuple[Path, WorkspaceStore]
) -> None:
    root, store = home
    placed_and_ended(root, store, "job1", url_of_new_repo(tmp_path, "app"))
    cut = repocache.usage(root / "repos", KEEP_S, budget_s=0)
    full = repocache.usage(root / "repos", KEEP_S)
    assert (cut["count"], cut["complete"], full["complete"]) == (1, False, True)
    assert cut["bytes"] < full["bytes"]
