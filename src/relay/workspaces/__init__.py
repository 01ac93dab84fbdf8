"""Workspaces: a git worktree per job, its branch as the result, landing through a test gate, cleanup.

`Workspaces` is the one face the job engine, the tools and the CLI call; the rooms behind it:

    make.py      find the caller's repository, resolve the base, add the worktree (carrying changes)
    remote.py    on a worker host: a repository URL fetched into the host's cache, its worktree, the push back
    repocache.py that cache: each repository's last use, the prune of unused ones, its size
    fetch.py     on the caller's side: a remote job's pushed branch fetched into the caller's repository
    seal.py      at a job's end: commit what the agent left, the branch's stats and diff
    land.py      rebase/merge/squash onto the target, the test gate, compare-and-swap of the ref
    cleanup.py   discard, prune after the retention time, what a killed relay left (recover), disk use
    procs.py     the processes relay runs for worktrees, on record while they run; a dead relay's killed
    records.py   the rows in relay.db;  _git.py  running git, bounded, errors translated;  _net.py  git
                 that talks to a URL (the transports allowed, its failures translated);  _connect.py  the
                 connect timeout of each transport
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from relay.config import Settings
from relay.errors import ErrorCode, RelayError, invalid
from relay.workspaces import _net, cleanup, fetch, land, make, procs, remote, repocache, seal
from relay.workspaces._git import SAFE_CONFIG as GIT_SAFE_CONFIG
from relay.workspaces.land import STRATEGIES, LandError
from relay.workspaces.records import WorkspaceRecord, WorkspaceStore

__all__ = [
    "GIT_SAFE_CONFIG",
    "STRATEGIES",
    "LandError",
    "WorkspaceRecord",
    "Workspaces",
    "check_remote",
    "commit_message",
    "shown_url",
]

commit_message = seal.commit_message
shown_url = _net.shown  # a URL as a message may show it: a password in it replaced by ***


def check_remote(url: str, ref: str | None, subdir: str) -> str:
    """A workspace by URL checked without reaching it (malformed URL, ref or subdir: INVALID_ARGUMENT); the clean subdir."""
    _net.check_url(url)
    if ref is not None:
        _net.check_ref(ref)
    return remote.check_subdir(subdir)


class Workspaces:
    """The worktrees of one RELAY_HOME."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._store: WorkspaceStore | None = None

    @property
    def store(self) -> WorkspaceStore:
        if self._store is None:
            self._store = WorkspaceStore(self.settings.db_path)
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    # making and finding -------------------------------------------------------------------

    def create(self, job_id: str, cwd: str, *, base: str | None, carry_changes: bool) -> WorkspaceRecord:
        """A new worktree for a job (git's checkout may take seconds: call it off the event loop)."""
        where = self.settings.worktrees_dir
        with procs.recorded_in(where):
            return make.create(where, self.store, job_id, cwd, base=base, carry_changes=carry_changes)

    # on a worker host: a workspace given by repository URL and ref --------------------------

    def place(
        self,
        job_id: str,
        url: str,
        *,
        ref: str | None = None,
        subdir: str = "",
        again: bool = False,
        stop: Callable[[], bool] | None = None,
    ) -> WorkspaceRecord:
        """A job's worktree on relay/<job-id> from `url` at `ref` (default: its default branch), through this host's cache.

        `again`: a job run a second time (retry after a lost worker) replaces what its earlier run left here.
        `stop`: the fetch is killed once it says so (a job cancelled meanwhile): CANCELLED.
        """
        with procs.recorded_in(self.settings.worktrees_dir):
            rec = self._place(job_id, url, ref=ref, subdir=subdir, again=again, stop=stop)
        if repocache.prune_due(self.settings.repos_dir):  # at most once a day per process; never fails the job
            with contextlib.suppress(RelayError, OSError):
                self.prune_repos()
        return rec

    def _place(
        self, job_id: str, url: str, *, ref: str | None, subdir: str, again: bool, stop: Callable[[], bool] | None
    ) -> WorkspaceRecord:
        return remote.place(
            self.settings.repos_dir,
            self.settings.worktrees_dir,
            self.store,
            job_id,
            url,
            ref=ref,
            subdir=subdir,
            again=again,
            connect_s=self.settings.git_connect_timeout_s,
            stop=stop,
        )

    def prune_repos(self) -> list[str]:
        """Remove the caches of repositories no job used for `[workspaces] repos_keep_days` (relay.workspaces.repocache)."""
        return repocache.prune(self.settings.repos_dir, self.store, self.settings.repos_keep_s)

    def repos_usage(self) -> dict[str, Any]:
        """The repositories cache: path, how many, bytes (counted in bounded time)."""
        return repocache.usage(self.settings.repos_dir, self.settings.repos_keep_s)

    def url_of(self, rec: WorkspaceRecord) -> str | None:
        """The URL a workspace was placed from (None: a worktree of a local checkout)."""
        return remote.url_of(self.settings.repos_dir, rec)

    def push(self, rec: WorkspaceRecord, *, again: bool = False) -> dict[str, Any]:
        """Push a placed workspace's branch back to its URL; raises PUSH_REFUSED, UPSTREAM_ERROR, AUTH_MISSING.

        `again`: a second run of the job replaces the branch an earlier run pushed.
        """
        return remote.push(self.settings.repos_dir, rec, again=again, connect_s=self.settings.git_connect_timeout_s)

    def seal_and_push(self, rec: WorkspaceRecord, message: str, *, again: bool = False) -> dict[str, Any]:
        """`seal`, then the branch pushed back to its URL: the answer's `remote` says whether it was (`pushed`, `error`)."""
        sealed = self.seal(rec, message)
        connect_s = self.settings.git_connect_timeout_s
        return sealed | {"remote": remote.push_quietly(self.settings.repos_dir, rec, again=again, connect_s=connect_s)}

    def fetch_result(
        self, job_id: str, *, url: str, cwd: str, base_sha: str, base_ref: str | None, subdir: str = ""
    ) -> WorkspaceRecord:
        """On the caller's side: relay/<job-id> fetched from `url` into the repository of `cwd`, ready for `land`."""
        return fetch.fetch_result(
            self.settings.worktrees_dir,
            self.store,
            job_id,
            url=url,
            cwd=cwd,
            base_sha=base_sha,
            base_ref=base_ref,
            subdir=subdir,
            connect_s=self.settings.git_connect_timeout_s,
        )

    def get(self, job_id: str) -> WorkspaceRecord | None:
        return self.store.get(job_id)

    def of_path(self, path: str) -> WorkspaceRecord | None:
        """The workspace a folder is in (a session started in a worktree resumes there)."""
        root = self.settings.worktrees_dir.resolve()
        resolved = Path(path).resolve()
        if not resolved.is_relative_to(root) or resolved == root:
            return None
        return self.get(resolved.relative_to(root).parts[0])

    def reopen(self, rec: WorkspaceRecord) -> WorkspaceRecord:
        """A workspace about to take a follow-up job: made again from its branch if it was removed."""
        if rec.state == "discarded":
            raise invalid(
                f"job {rec.job_id}'s workspace was discarded (its worktree and branch are gone)",
                "start a new one with workspace='worktree'",
            )
        if not Path(rec.path).is_dir():
            with procs.recorded_in(self.settings.worktrees_dir):
                make.restore(rec)
            self.store.update(rec.job_id, state="active", removed_at=None)
            rec = self.store.get(rec.job_id) or rec
        return rec

    # a job's end and what it left ---------------------------------------------------------

    def seal(self, rec: WorkspaceRecord, message: str) -> dict[str, Any]:
        with procs.recorded_in(self.settings.worktrees_dir):
            return seal.seal(self.store, rec, message)

    def info(self, rec: WorkspaceRecord) -> dict[str, Any]:
        return seal.info(rec)

    def diff(self, rec: WorkspaceRecord) -> str:
        return seal.diff(rec)

    # landing and removing -----------------------------------------------------------------

    def land(
        self,
        rec: WorkspaceRecord,
        *,
        into: str | None,
        strategy: str,
        test_command: str | None,
        test_log: Path,
        message: str,
    ) -> dict[str, Any]:
        if rec.state == "discarded":
            raise invalid(f"job {rec.job_id}'s workspace was discarded: there is nothing to land", "start a new job")
        if rec.state == "landed":
            raise invalid(
                f"job {rec.job_id} was already landed into {rec.landed_into} ({(rec.landed_sha or '')[:12]})",
                f"follow up with workspace='job:{rec.job_id}' to add to it, then land again",
            )
        procs.kill_left_over(self.settings.worktrees_dir)  # a dead relay's rebase or gate: gone before it lands again
        try:
            with procs.recorded_in(self.settings.worktrees_dir):
                landed = land.land(
                    rec,
                    into=into,
                    strategy=strategy,
                    test_command=test_command,
                    test_timeout_s=self.settings.land_test_timeout_s,
                    test_log=test_log,
                    message=message,
                    test_env=procs.command_env(
                        self.settings.environ, self.settings.command_pass_env, self.settings.command_env
                    ),
                )
        except LandError:
            raise
        except RelayError as err:
            if err.code is ErrorCode.GIT_FAILED:
                raise RelayError(err.code, err.message, "nothing was changed on the target; " + err.hint) from None
            raise
        now = time.time()
        head = seal.head_of(rec)
        self.store.update(
            rec.job_id,
            state="landed",
            landed_at=now,
            landed_into=landed["into"],
            landed_sha=landed["new"],
            head_sha=head,
            removed_at=now,
        )
        return landed

    def discard(self, rec: WorkspaceRecord) -> None:
        with procs.recorded_in(self.settings.worktrees_dir):
            cleanup.discard(self.store, rec)

    def recover(self) -> list[str]:
        """What a killed relay left under the worktrees folder cleaned up (relay.workspaces.cleanup.recover)."""
        if not self.settings.worktrees_dir.is_dir():
            return []
        return cleanup.recover(self.store, self.settings.worktrees_dir)

    def prune(self, running: set[str]) -> list[str]:
        """`recover`, then the worktrees of ended jobs past the retention time (never one of `running`)."""
        taken = self.recover()
        return taken + cleanup.prune(self.store, self.settings.worktree_keep_s, running)

    def empty_trash(self) -> None:
        cleanup.empty_trash(self.settings.worktrees_dir)

    def usage(self) -> dict[str, Any]:
        return cleanup.usage(self.store, self.settings.worktrees_dir)
