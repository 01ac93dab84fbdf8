"""The caller's side of a job that ran on a worker host: its pushed branch fetched into the caller's repository.

`fetch_result` brings `relay/<job-id>` from the repository's URL into the checkout the caller
names and records the workspace there, so `Workspaces.land` lands it as it lands a local worktree
job (the worktree is made from the branch when the land starts).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from relay.errors import ErrorCode, RelayError, invalid
from relay.workspaces import _git, _net
from relay.workspaces._connect import CONNECT_TIMEOUT_S
from relay.workspaces.cleanup import remove_worktree
from relay.workspaces.land import repo_lock, worktrees_on
from relay.workspaces.make import Origin, branch_of, locate
from relay.workspaces.records import WorkspaceRecord, WorkspaceStore

# Where a fetch puts the pushed branch for a moment, before the job's branch is moved to it.
FETCH_REFS = "refs/relay-fetch/"


def _sha(repo: str, ref: str) -> str | None:
    found = _git.run(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], repo, check=False)
    return found.stdout.strip() if found.returncode == 0 else None


def _take(origin: Origin, branch: str, fetched: str, url: str) -> str:
    """Move the caller's `branch` to `fetched` (made, or fast-forwarded); the commit it holds afterwards.

    A local branch that already holds `fetched` (and maybe more, edits made after the job) is kept
    as it is; one that went another way is refused, changing nothing.
    """
    ref = f"refs/heads/{branch}"
    local = _sha(origin.repo, ref)
    if local is None:
        _git.run(["update-ref", "-m", "relay: fetch a job's branch", ref, fetched, ""], origin.repo)
        return fetched
    if _git.ok(["merge-base", "--is-ancestor", fetched, local], origin.repo):
        return local
    if not _git.ok(["merge-base", "--is-ancestor", local, fetched], origin.repo):
        raise RelayError(
            ErrorCode.LAND_CONFLICT,
            f"branch {branch} in {origin.repo} and the one pushed to {_net.shown(url)} went different ways",
            f"nothing was changed; delete yours (git branch -D {branch}) to land the pushed one",
        )
    trees = worktrees_on(origin.common_dir, branch)
    if trees:  # checked out (the job's worktree, made by an earlier land): move its files with it
        tree = trees[0]
        _git.run(
            ["merge", "--quiet", "--ff-only", fetched], tree, git_dir=_git.worktree_git_dir(origin.common_dir, tree)
        )
    else:
        _git.run(["update-ref", "-m", "relay: fetch a job's branch", ref, fetched, local], origin.repo)
    return fetched


def fetch_result(
    worktrees_dir: Path,
    store: WorkspaceStore,
    job_id: str,
    *,
    url: str,
    cwd: str,
    base_sha: str,
    base_ref: str | None,
    subdir: str = "",
    timeout_s: float = _net.FETCH_TIMEOUT_S,
    connect_s: float = CONNECT_TIMEOUT_S,
) -> WorkspaceRecord:
    """Fetch relay/<job-id> from `url` into the repository that contains `cwd`; the workspace record to land.

    `base_sha` and `base_ref` are what the worker placed the job on (its sealed `workspace`'s
    `base_sha` and `base`, when that was a branch); `base_ref` is the default target of the land.
    Refused: a branch the repository does not have (the job did not push; INVALID_ARGUMENT), a
    repository that cannot be reached (UPSTREAM_ERROR), a local branch of that name that went
    another way (LAND_CONFLICT). Where this home also placed the job (a worker on the same
    RELAY_HOME), that worktree in the cache is removed and the record moves to the caller's repository.
    """
    _net.check_url(url)
    origin = locate(cwd)
    branch = branch_of(job_id)
    scratch = FETCH_REFS + job_id
    with repo_lock(origin.common_dir):
        spec = f"+refs/heads/{branch}:{scratch}"
        try:
            _net.run(
                ["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", url, spec],
                origin.repo,
                url=url,
                op="fetch",
                timeout=timeout_s,
                connect_s=connect_s,
            )
        except RelayError as err:
            if err.code is ErrorCode.INVALID_ARGUMENT:
                raise invalid(
                    f"{_net.shown(url)} has no branch {branch}: job {job_id} did not push one",
                    "job_status shows whether its push was refused; its branch stays on the worker that ran it",
                ) from None
            raise
        fetched = _sha(origin.repo, scratch)
        _git.run(["update-ref", "-d", scratch], origin.repo, check=False)
        if fetched is None or not _git.ok(["merge-base", "--is-ancestor", base_sha, fetched], origin.repo):
            raise invalid(
                f"the branch {branch} fetched from {_net.shown(url)} does not start from {base_sha[:12]}",
                "pass the base_sha of the job's sealed workspace",
            )
        head = _take(origin, branch, fetched, url)
        return _record(store, worktrees_dir, job_id, origin, subdir, base_ref, base_sha, head)


def _record(
    store: WorkspaceStore,
    worktrees_dir: Path,
    job_id: str,
    origin: Origin,
    subdir: str,
    base_ref: str | None,
    base_sha: str,
    head: str,
) -> WorkspaceRecord:
    """The workspace row, pointing at the caller's repository; state `pruned` until a land makes the worktree."""
    existing = store.get(job_id)
    if existing is not None and Path(existing.common_dir).resolve() == Path(origin.common_dir).resolve():
        store.update(job_id, head_sha=head)
        return store.get(job_id) or existing
    now = time.time()
    moved: dict[str, Any] = {
        "repo": origin.repo,
        "common_dir": origin.common_dir,
        "path": str(worktrees_dir / job_id),
        "subdir": subdir,
        "base_ref": base_ref,
        "base_sha": base_sha,
        "state": "pruned",
        "head_sha": head,
        "removed_at": None,
    }
    if existing is None:
        rec = WorkspaceRecord(job_id=job_id, branch=branch_of(job_id), created_at=now, ended_at=now, **moved)
        store.add(rec)
        return rec
    if existing.state == "discarded":
        raise invalid(f"job {job_id}'s workspace was discarded: there is nothing to land", "start a new job")
    remove_worktree(existing)  # the worktree in this host's cache: the branch is now in the caller's repository
    moved["ended_at"] = existing.ended_at or now
    store.update(job_id, **moved)
    return replace(existing, **moved)
