"""Making a job's worktree: find the caller's repository, resolve the base, add the worktree on its own branch."""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from relay.agents import values
from relay.errors import ErrorCode, RelayError, invalid
from relay.workspaces import _git, procs
from relay.workspaces._git import AUTHOR, GitError
from relay.workspaces.cleanup import remove_at
from relay.workspaces.records import WorkspaceRecord, WorkspaceStore

CARRY_MESSAGE = "relay: the caller's uncommitted changes, carried into the worktree"


@dataclass(frozen=True)
class Origin:
    """The repository a caller's cwd is in."""

    repo: str  # its top folder
    common_dir: str  # the git folder every worktree of it shares
    subdir: str  # cwd relative to the top ("" at the top)


def branch_of(job_id: str) -> str:
    return f"relay/{job_id}"


def locate(cwd: str) -> Origin:
    """The repository that contains `cwd`; a clear error when there is none, or it is bare."""
    probe = _git.run(["rev-parse", "--is-bare-repository", "--is-inside-git-dir", "--git-common-dir"], cwd, check=False)
    if probe.returncode != 0:
        raise invalid(
            f"cwd {cwd} is not in a git repository, and workspace='worktree' needs one",
            "run `git init` and commit once, or omit workspace to run in the folder as it is",
        )
    bare, in_git_dir, common = probe.stdout.split("\n")[:3]
    if bare == "true" or in_git_dir == "true":
        raise invalid(
            f"cwd {cwd} is a bare repository (or inside a .git folder): there is no checkout to start from",
            "pass the folder of a checkout (a clone or `git worktree add` of this repository) as cwd",
        )
    top, _, prefix = _git.out(["rev-parse", "--show-toplevel", "--show-prefix"], cwd).partition("\n")
    common_dir = Path(common) if Path(common).is_absolute() else Path(cwd, common)
    origin = Origin(repo=top, common_dir=str(common_dir.resolve()), subdir=prefix.strip().rstrip("/"))
    _not_written_in_a_work_tree(origin)
    return origin


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _not_written_in_a_work_tree(origin: Origin) -> None:
    """Refuse a repository whose git folder lies as plain files in a work tree: its own (a `.git` file pointing into
    it) or another's (a nested repository, not a submodule, whose git folder is in the outer one's). Such a folder is
    text an agent at `edit` can write, config and filters included, that `git worktree add` would obey."""
    top, common = Path(origin.repo).resolve(), Path(origin.common_dir)
    why = None
    if _within(common, top) and common != top / ".git":
        why = f"its git folder {common} lies inside its own work tree (its .git file points there)"
    else:
        outer = _git.run(["rev-parse", "--show-toplevel", "--git-common-dir"], top.parent, check=False)
        found = outer.stdout.split("\n")
        if outer.returncode == 0 and len(found) >= 2 and found[0]:
            outer_top = Path(found[0]).resolve()
            outer_git = (Path(found[1]) if Path(found[1]).is_absolute() else top.parent / found[1]).resolve()
            if _within(common, outer_top) and not _within(common, outer_git):
                why = f"its git folder {common} lies inside the work tree of the repository at {outer_top}"
    if why is not None:
        raise invalid(
            f"relay makes no worktree of the repository at {origin.repo}: {why}, as files anyone who may edit that "
            "work tree (an agent at 'edit') could have written, and git would obey its configuration",
            "pass the folder of your checkout (or a submodule of it) as cwd, or omit workspace to run in the folder",
        )


def resolve_base(origin: Origin, base: str | None) -> tuple[str | None, str]:
    """(the branch name or None, the commit) that a worktree starts from; default: the checkout's HEAD."""
    if base is not None:
        values.git_ref("base", base)  # never an option of git's, no control characters (relay.agents.values)
    name = base or "HEAD"
    found = _git.run(["rev-parse", "--verify", "--quiet", f"{name}^{{commit}}"], origin.repo, check=False)
    if found.returncode != 0:
        if base is None:
            raise invalid(
                f"the repository at {origin.repo} has no commit yet",
                "commit once (git commit --allow-empty -m init), then delegate with workspace='worktree'",
            )
        raise invalid(
            f"base {base!r} is not a branch, tag or commit of {origin.repo}",
            "pass an existing ref (git branch -a lists them), or omit base for the checkout's HEAD",
        )
    sha = found.stdout.strip()
    if base is None:
        branch = _git.run(["symbolic-ref", "--quiet", "--short", "HEAD"], origin.repo, check=False)
        return (branch.stdout.strip() or None) if branch.returncode == 0 else None, sha
    is_branch = _git.ok(["show-ref", "--verify", "--quiet", f"refs/heads/{base}"], origin.repo)
    return (base if is_branch else None), sha


def _carry(origin: Origin, head_sha: str) -> str:
    """A commit on top of HEAD holding the checkout as it is now (staged, unstaged, untracked but not ignored).

    Made through a copy of the index, so the caller's own index, files and HEAD are never touched.
    """
    index = Path(_git.out(["rev-parse", "--git-path", "index"], origin.repo))
    index = index if index.is_absolute() else Path(origin.repo, index)
    with tempfile.TemporaryDirectory(prefix="relay-carry-") as tmp:
        scratch = Path(tmp, "index")
        if index.is_file():
            shutil.copyfile(index, scratch)
        env = {"GIT_INDEX_FILE": str(scratch)}
        _git.run(["add", "--all", "--", "."], origin.repo, env=env)
        tree = _git.out(["write-tree"], origin.repo, env=env)
    if tree == _git.out(["rev-parse", f"{head_sha}^{{tree}}"], origin.repo):
        return head_sha  # nothing uncommitted
    return _git.out(["commit-tree", tree, "-p", head_sha, "-m", CARRY_MESSAGE], origin.repo, env=AUTHOR)


def undo(origin: Origin, path: Path, branch: str) -> None:
    """Take back a half-made worktree: its folder, git's record of it, its branch."""
    remove_at(origin.common_dir, path)
    _git.run(["branch", "-D", branch], origin.repo, check=False)


def add_worktree(origin: Origin, worktrees_dir: Path, path: Path, branch: str, start: str) -> None:
    """`git worktree add -b branch path start` in `origin`, submodules initialised; a failure leaves nothing behind."""
    try:
        worktrees_dir.mkdir(parents=True, exist_ok=True)
        _git.run(["worktree", "add", "--quiet", "-b", branch, str(path), start], origin.repo)
    except (RelayError, OSError) as exc:
        undo(origin, path, branch)
        if "No space left" in (exc.stderr if isinstance(exc, GitError) else str(exc)):
            raise RelayError(
                ErrorCode.DISK_FULL,
                f"the disk filled while the worktree was made in {worktrees_dir}; nothing was kept",
                "free some space (relay doctor lists worktrees and their size; relay discard JOB removes one)",
            ) from None
        if isinstance(exc, OSError):
            raise RelayError(
                ErrorCode.GIT_FAILED, f"could not make {worktrees_dir}: {exc}", "check RELAY_HOME's permissions"
            ) from None
        raise
    if (path / ".gitmodules").is_file():
        try:
            _git.run(["-c", "protocol.file.allow=always", "submodule", "update", "--init", "--recursive"], path)
        except RelayError as exc:
            undo(origin, path, branch)
            raise invalid(
                f"the repository's submodules could not be initialised in the worktree: {exc.message}",
                "make the submodules reachable from this machine (git submodule update --init), or omit workspace",
            ) from None


def add_recorded(
    store: WorkspaceStore, rec: WorkspaceRecord, origin: Origin, worktrees_dir: Path, start: str
) -> WorkspaceRecord:
    """`add_worktree` of `rec` from `start`, recorded before git makes anything: the row says `creating` (and a mark
    under the worktrees folder says which relay makes it) until the worktree is there, then `active`. A failure
    takes the row back with the worktree; a relay killed meanwhile leaves both to the next one's sweep
    (relay.workspaces.recover), which takes back the worktree, its branch and git's locks."""
    try:
        with procs.creating(worktrees_dir, rec.job_id):
            store.put(replace(rec, state="creating"))
            try:
                add_worktree(origin, worktrees_dir, Path(rec.path), rec.branch, start)
            except BaseException:
                store.delete(rec.job_id)
                raise
            store.update(rec.job_id, state="active")
    except OSError as exc:
        raise RelayError(
            ErrorCode.GIT_FAILED, f"could not make {worktrees_dir}: {exc}", "check RELAY_HOME's permissions"
        ) from None
    return replace(rec, state="active")


def create(
    worktrees_dir: Path,
    store: WorkspaceStore,
    job_id: str,
    cwd: str,
    *,
    base: str | None = None,
    carry_changes: bool = False,
) -> WorkspaceRecord:
    """Add a worktree on branch relay/<job-id> for a job; the caller's checkout, index and HEAD stay as they are."""
    origin = locate(cwd)
    if _within(Path(origin.repo).resolve(), worktrees_dir.resolve()):  # a job's worktree: its agent wrote its .git
        raise invalid(
            f"cwd {cwd} is in a job's worktree ({origin.repo}): relay makes no worktree of one, whose git folder or "
            ".git file its agent could have rewritten",
            "follow that job up with workspace='job:<its id>', or pass the folder of your own checkout as cwd",
        )
    base_ref, base_sha = resolve_base(origin, base)
    if carry_changes and base is not None:
        head = _git.out(["rev-parse", "HEAD"], origin.repo)
        if head != base_sha:
            raise invalid(
                f"carry_changes starts from the checkout's HEAD ({head[:12]}), not from base {base!r}",
                "omit base to carry the uncommitted changes, or omit carry_changes to start clean from base",
            )
    branch = branch_of(job_id)
    if _git.ok(["show-ref", "--verify", "--quiet", f"refs/heads/{branch}"], origin.repo):
        raise invalid(
            f"branch {branch} already exists in {origin.repo}",
            f"delete it (git branch -D {branch}) or let relay pick a new job id by submitting again",
        )
    path = worktrees_dir / job_id
    start = _carry(origin, base_sha) if carry_changes else base_sha
    rec = WorkspaceRecord(
        job_id=job_id,
        repo=origin.repo,
        common_dir=origin.common_dir,
        path=str(path),
        subdir=origin.subdir,
        branch=branch,
        base_ref=base_ref,
        base_sha=base_sha,
        state="active",
        created_at=time.time(),
    )
    return add_recorded(store, rec, origin, worktrees_dir, start)


def restore(rec: WorkspaceRecord) -> None:
    """Make a removed worktree again from its branch (a follow-up after a prune or a land)."""
    path = Path(rec.path)
    if path.is_dir():
        return
    _git.run(["worktree", "prune"], rec.common_dir, check=False)
    _git.run(["worktree", "add", "--quiet", str(path), rec.branch], rec.repo)
