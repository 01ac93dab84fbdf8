"""A job on a worker host: its repository fetched by URL into the host's cache, a worktree on relay/<job-id>, pushed back.

The cache, `RELAY_HOME/repos/<hash of the URL>`, is a bare repository shared by every job of that
URL on the host. It is fetched again for each job, under a lock file beside it, so concurrent jobs
(of any relay process on the host) take turns at fetching and adding their worktree. What it
fetches lands under refs/relay-cache/ (branches and tags), never in refs/heads/: a fetch, which
prunes, can then never touch the branch (refs/heads/relay/<job-id>) of a job still running, and a
tag moved upstream cannot make it fail.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from relay.errors import RelayError, invalid
from relay.workspaces import _git, _net, repocache
from relay.workspaces._connect import CONNECT_TIMEOUT_S
from relay.workspaces.cleanup import discard
from relay.workspaces.make import Origin, add_recorded, branch_of, undo
from relay.workspaces.records import WorkspaceRecord, WorkspaceStore
from relay.workspaces.seal import head_of

REMOTE = "origin"
CACHE_HEADS = "refs/relay-cache/heads/"
CACHE_TAGS = "refs/relay-cache/tags/"
# How many hex digits of the URL's SHA-256 name its cache folder.
CACHE_NAME_CHARS = 24
_HEX = frozenset("0123456789abcdef")


def cache_of(repos_dir: Path, url: str) -> Path:
    """The cache folder of `url` (the URL exactly as given: two spellings of one repository get two caches)."""
    return repos_dir / hashlib.sha256(url.encode()).hexdigest()[:CACHE_NAME_CHARS]


def url_of(repos_dir: Path, rec: WorkspaceRecord) -> str | None:
    """The URL a workspace was placed from; None for a worktree of a local checkout."""
    if Path(rec.common_dir).parent.resolve() != repos_dir.resolve():
        return None
    got = _git.run(["config", "--get", f"remote.{REMOTE}.url"], rec.common_dir, check=False)
    return got.stdout.strip() or None


def _prepare(cache: Path, url: str) -> None:
    """The cache made (or repaired) for `url`; its URL is written last, so a half-made cache is made again."""
    if not (cache / "HEAD").is_file():
        cache.mkdir(parents=True, exist_ok=True)
        _git.run(["init", "--quiet", "--bare", str(cache)], cache)
    if _git.run(["config", "--get", f"remote.{REMOTE}.url"], cache, check=False).stdout.strip() == url:
        return
    settings = (
        ["--replace-all", f"remote.{REMOTE}.fetch", f"+refs/heads/*:{CACHE_HEADS}*"],
        ["--add", f"remote.{REMOTE}.fetch", f"+refs/tags/*:{CACHE_TAGS}*"],
        [f"remote.{REMOTE}.tagOpt", "--no-tags"],
        ["gc.autoDetach", "false"],  # no git gc left running in the background after a job's fetch
        [f"remote.{REMOTE}.url", url],
    )
    for args in settings:
        _git.run(["config", *args], cache)


def _default_branch(cache: Path, url: str, timeout_s: float, connect_s: float) -> str:
    """The branch the repository's HEAD names (what `git clone` would check out)."""
    ls = ["ls-remote", "--symref", REMOTE, "HEAD"]
    listing = _net.run(ls, cache, url=url, op="fetch", timeout=timeout_s, connect_s=connect_s)
    for line in listing.stdout.splitlines():
        if line.startswith("ref: refs/heads/") and line.endswith("\tHEAD"):
            return line.removeprefix("ref: refs/heads/").removesuffix("\tHEAD")
    raise invalid(
        f"the repository at {_net.shown(url)} has no commit yet (or its HEAD names no branch)",
        "push a first commit there, or pass ref",
    )


def resolve(
    cache: Path,
    url: str,
    ref: str | None,
    timeout_s: float = _net.FETCH_TIMEOUT_S,
    connect_s: float = CONNECT_TIMEOUT_S,
) -> tuple[str | None, str]:
    """(the branch `ref` names or None for a tag or commit, its commit) in the freshly fetched cache."""
    name = _net.check_ref(ref) if ref is not None else _default_branch(cache, url, timeout_s, connect_s)
    if name.startswith("refs/heads/"):
        candidates = [(CACHE_HEADS + name.removeprefix("refs/heads/"), name.removeprefix("refs/heads/"))]
    elif name.startswith("refs/tags/"):
        candidates = [(CACHE_TAGS + name.removeprefix("refs/tags/"), None)]
    else:
        candidates = [(CACHE_HEADS + name, name), (CACHE_TAGS + name, None)]
        if 4 <= len(name) <= 64 and set(name.lower()) <= _HEX:
            candidates.append((name, None))
    for full, branch in candidates:
        found = _git.run(["rev-parse", "--verify", "--quiet", f"{full}^{{commit}}"], cache, check=False)
        if found.returncode == 0:
            return branch, found.stdout.strip()
    raise invalid(
        f"ref {name!r} is not a branch, tag or commit of {_net.shown(url)}",
        f"pass an existing ref (git ls-remote {_net.shown(url)} lists them), or omit ref for the default branch",
    )


def check_subdir(subdir: str) -> str:
    """`subdir` as a clean relative path inside the repository ("" for its top)."""
    parts = PurePosixPath(subdir.strip("/")).parts if subdir else ()
    if subdir.startswith("/") or any(p in ("..", ".") for p in parts) or "\x00" in subdir:
        raise invalid(
            f"subdir {subdir!r} is not a folder inside the repository",
            "pass a relative path such as 'src/app', or omit it for the top",
        )
    return "/".join(parts)


def place(
    repos_dir: Path,
    worktrees_dir: Path,
    store: WorkspaceStore,
    job_id: str,
    url: str,
    *,
    ref: str | None = None,
    subdir: str = "",
    again: bool = False,
    timeout_s: float = _net.FETCH_TIMEOUT_S,
    connect_s: float = CONNECT_TIMEOUT_S,
    stop: Callable[[], bool] | None = None,
) -> WorkspaceRecord:
    """Fetch `url` into this host's cache and add a worktree on relay/<job-id> at `ref` (default: its default branch).

    The record's `repo` and `common_dir` are the cache; `path` is `worktrees_dir/<job-id>`, and the
    job runs in its `cwd` (the `subdir` of it). Refused, leaving nothing behind: a malformed URL,
    ref or subdir, a subdir the ref does not have, a ref the repository does not have
    (INVALID_ARGUMENT); a repository that cannot be reached (UPSTREAM_ERROR) or wants credentials
    this host lacks (AUTH_MISSING). `again`: the job runs a second time (its worker was lost and its
    request said so): what an earlier run left on this host (worktree, branch, record) is replaced.
    `stop`: asked while the fetch runs; once it says so the fetch is killed (CANCELLED), nothing placed.
    `connect_s`: a host that takes no connection or never answers fails the fetch then (UPSTREAM_ERROR).
    """
    _net.check_url(url)
    if ref is not None:
        _net.check_ref(ref)
    sub = check_subdir(subdir)
    cache = cache_of(repos_dir, url)
    branch = branch_of(job_id)
    path = worktrees_dir / job_id
    origin = Origin(repo=str(cache), common_dir=str(cache), subdir=sub)
    try:
        repos_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise invalid(f"could not make {repos_dir}: {exc}", "check RELAY_HOME's permissions and free space") from None
    with _git.locked(repocache.lock_of(cache)):
        repocache.stamp(cache)
        fresh = not (cache / "HEAD").is_file()
        _prepare(cache, url)
        try:
            fetch = ["fetch", "--quiet", "--prune", "--no-tags", REMOTE]
            _net.run(fetch, cache, url=url, op="fetch", timeout=timeout_s, connect_s=connect_s, stop=stop)
        except RelayError:
            if fresh:  # a URL that never worked leaves no cache behind
                shutil.rmtree(cache, ignore_errors=True)
            raise
        base_ref, base_sha = resolve(cache, url, ref, timeout_s, connect_s)
        earlier = store.get(job_id)
        if earlier is not None and again:
            discard(store, earlier)
        if _git.ok(["show-ref", "--verify", "--quiet", f"refs/heads/{branch}"], cache) or (earlier and not again):
            raise invalid(
                f"job {job_id} already has a workspace on this host (branch {branch} of {_net.shown(url)})",
                "a job runs once per id (a second run after a lost worker passes again=True): submit it again for a new id",
            )
        rec = WorkspaceRecord(
            job_id=job_id,
            repo=str(cache),
            common_dir=str(cache),
            path=str(path),
            subdir=sub,
            branch=branch,
            base_ref=base_ref,
            base_sha=base_sha,
            state="active",
            created_at=time.time(),
        )
        rec = add_recorded(store, rec, origin, worktrees_dir, base_sha)  # recorded before git makes it
    if sub and not Path(path, sub).is_dir():
        undo(origin, path, branch)
        if earlier is None:
            store.delete(job_id)
        else:
            store.update(job_id, state="discarded", removed_at=time.time())
        raise invalid(
            f"{_net.shown(url)} at {ref or base_ref} has no folder {sub!r}",
            "pass a folder that exists at that ref, or omit subdir for the top",
        )
    return rec


def push(
    repos_dir: Path,
    rec: WorkspaceRecord,
    *,
    again: bool = False,
    timeout_s: float = _net.PUSH_TIMEOUT_S,
    connect_s: float = CONNECT_TIMEOUT_S,
) -> dict[str, Any]:
    """Push the job's branch to the URL it was placed from (a fast-forward only: nothing there is overwritten).

    `again`: the job's second run replaces what an earlier run of it pushed (a forced push of its
    own relay/<job-id>, nothing else). Raises PUSH_REFUSED when the repository refuses it,
    UPSTREAM_ERROR when it cannot be reached, AUTH_MISSING without credentials; the branch stays in
    this host's cache either way.
    """
    url = url_of(repos_dir, rec)
    if url is None:
        raise invalid(f"job {rec.job_id}'s workspace was not placed from a URL", "only remote workspaces are pushed")
    head = head_of(rec)
    repocache.stamp(Path(rec.common_dir))
    spec = f"{'+' if again else ''}refs/heads/{rec.branch}:refs/heads/{rec.branch}"
    args = ["push", "--quiet", "--no-verify", REMOTE, spec]
    _net.run(args, rec.common_dir, url=url, op="push", timeout=timeout_s, connect_s=connect_s)
    return {"url": _net.shown(url), "branch": rec.branch, "head": head, "pushed": True}


def push_quietly(
    repos_dir: Path, rec: WorkspaceRecord, *, again: bool = False, connect_s: float = CONNECT_TIMEOUT_S
) -> dict[str, Any]:
    """`push`, a failure reported in the answer (`pushed: false`, `error`) rather than raised: a job's end goes on."""
    try:
        return push(repos_dir, rec, again=again, connect_s=connect_s)
    except RelayError as err:
        url = url_of(repos_dir, rec) or ""
        return {"url": _net.shown(url), "branch": rec.branch, "pushed": False, "error": err.to_dict()}
