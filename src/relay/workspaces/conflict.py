"""A land's conflict kept for an agent to resolve (`job_land(on_conflict="agent")`).

The target's tip is merged into the job's branch in its worktree and git's conflict state is left
there (the files with their markers, the index's unmerged entries, MERGE_HEAD): one state for the
whole branch whatever the land's strategy, where a rebase would stop once per commit. The agent
edits the files; the seal at its job's end commits them, which concludes the merge (a commit with
MERGE_HEAD present is the merge commit). `conclude` checks the resolution and commits it if the seal
had nothing to commit; `undo` puts the branch back where it was before the merge. The land that
follows goes onto a branch that already holds the target: a fast-forward, or a squash of it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from relay.errors import ErrorCode
from relay.workspaces import _git
from relay.workspaces._git import AUTHOR
from relay.workspaces.land import LandError, repo_lock
from relay.workspaces.records import WorkspaceRecord
from relay.workspaces.seal import commit_leftovers, head_of

# Lines git writes around each side of a conflict; a file still holding one was not resolved.
MARKERS = ("<<<<<<< ", ">>>>>>> ")
# At most this many commits of each side are named in the agent's prompt (the rest is counted).
SIDE_COMMITS = 10
# At most this many conflicting files are named one by one (a prompt stays readable; the rest is counted).
PROMPT_FILES = 200
# The conflict kept in a worktree, and the follow-up resolving it, in the worktree's git folder: a land after a
# crash (relay gone while the follow-up ran, whose seal then committed whatever it left) finds it and settles it
# first, so a marker never lands.
PENDING_FILE = "relay-resolving.json"


@dataclass(frozen=True)
class Conflict:
    """The conflict kept in a job's worktree: where it is, and both sides of it."""

    job_id: str
    branch: str  # the job's branch, relay/<job-id> ("ours")
    head: str  # the branch's commit before the merge: `undo` puts it back there
    target: str  # the branch the land goes into ("theirs")
    target_sha: str  # the target's tip that was merged
    files: tuple[str, ...]  # the files git could not merge
    ours: tuple[str, ...]  # the branch's commits since the two sides parted ("abc1234 subject")
    theirs: tuple[str, ...]  # the target's commits since then
    ours_count: int
    theirs_count: int

    def to_json(self, follow_up: str | None) -> str:
        return json.dumps(asdict(self) | {"follow_up": follow_up})

    def prompt(self) -> str:
        """The follow-up's prompt: the conflicting files and both sides named, and what to do (and not do)."""
        files = "\n".join(f"- {name}" for name in self.files[:PROMPT_FILES])
        if len(self.files) > PROMPT_FILES:
            files += f"\n- ... and {len(self.files) - PROMPT_FILES} more (git diff --name-only --diff-filter=U)"
        return (
            f"Resolve the merge conflicts in this worktree, then stop.\n\n"
            f"relay is landing this branch, {self.branch}, into {self.target}. It merged {self.target}'s tip "
            f"({self.target_sha[:12]}) into the branch (at {self.head[:12]}), and git could not merge these files:\n"
            f"{files}\n\n"
            f"The two sides:\n"
            f"- ours (HEAD, the branch {self.branch}): {_side(self.ours, self.ours_count)}\n"
            f"- theirs ({self.target}, {self.target_sha[:12]}): {_side(self.theirs, self.theirs_count)}\n\n"
            f"Each file holds git's conflict markers: the lines between '<<<<<<< HEAD' and '=======' are ours, "
            f"those between '=======' and '>>>>>>> {self.target_sha[:12]}' (or the target's name) are theirs. Edit "
            f"each file so that it keeps what both sides meant, and leave no marker line in it. Do not run git "
            f"commit, merge, rebase or reset: relay commits your resolution when you finish and lands it through "
            f"its test gate."
        )


def _side(commits: tuple[str, ...], count: int) -> str:
    if not commits:
        return "no commits of its own"
    more = f"; and {count - len(commits)} earlier" if count > len(commits) else ""
    return f"{count} commit(s): " + "; ".join(commits) + more


def _log(wt: Path, gd: Path, since: str, until: str) -> tuple[tuple[str, ...], int]:
    count = int(_git.out(["rev-list", "--count", f"{since}..{until}"], wt, git_dir=gd) or 0)
    listed = _git.out(["log", f"-{SIDE_COMMITS}", "--no-merges", "--format=%h %s", f"{since}..{until}"], wt, git_dir=gd)
    return tuple(line for line in listed.splitlines() if line.strip()), count


def _unmerged(wt: Path, gd: Path) -> list[str]:
    listed = _git.run(["diff", "--name-only", "-z", "--diff-filter=U"], wt, git_dir=gd).stdout
    return sorted(filter(None, listed.split("\0")))


def _merging(gd: Path) -> bool:
    return (gd / "MERGE_HEAD").exists()


def keep(rec: WorkspaceRecord, into: str | None) -> Conflict | None:
    """Merge the target's tip into the job's branch in its worktree and leave the conflict there for an agent.

    None when it merges cleanly, or there is no target branch: the merge is taken back (the branch as it was),
    and the land's own refusal stands (the target moved, or a dirty checkout of it). LandError when git fails to
    merge without naming a conflicting file.
    """
    target = into or rec.base_ref
    wt = Path(rec.path)
    if target is None or not wt.is_dir():
        return None
    gd = _git.worktree_git_dir(rec.common_dir, wt)
    with repo_lock(rec.common_dir):  # the target's tip read while no land of this repository moves it
        found = _git.run(["rev-parse", "--verify", "--quiet", f"refs/heads/{target}"], rec.common_dir, check=False)
        if found.returncode != 0:
            return None
        target_sha = found.stdout.strip()
        _git.run(["checkout", "--quiet", rec.branch], wt, git_dir=gd)
        commit_leftovers(rec, f"Edits made in the worktree after relay job {rec.job_id}\n")
        head = head_of(rec)
        base = _git.out(["merge-base", head, target_sha], wt, git_dir=gd)
        ours, ours_count = _log(wt, gd, base, head)
        theirs, theirs_count = _log(wt, gd, base, target_sha)
        kept = Conflict(
            job_id=rec.job_id,
            branch=rec.branch,
            head=head,
            target=target,
            target_sha=target_sha,
            files=(),
            ours=ours,
            theirs=theirs,
            ours_count=ours_count,
            theirs_count=theirs_count,
        )
        note(rec, kept, None)  # before the merge: a crash from here on is taken back by the next land
        message = f"relay: merge {target} ({target_sha[:12]}) into {rec.branch}, conflicts resolved by its agent\n"
        merged = _git.run(
            ["merge", "--no-ff", "--no-edit", "-m", message, target_sha], wt, env=AUTHOR, check=False, git_dir=gd
        )
    files = _unmerged(wt, gd) if merged.returncode != 0 else []
    if not files:
        undo_to(rec, head)
        if merged.returncode != 0:
            raise LandError(
                ErrorCode.LAND_CONFLICT,
                f"git could not merge {target} into {rec.branch}: {merged.stderr.strip()[-400:]}",
                "nothing was changed; land with on_conflict='refuse' and resolve it by hand",
                conflicts=[],
            )
        return None
    kept = replace(kept, files=tuple(files))
    note(rec, kept, None)
    return kept


def _pending_path(rec: WorkspaceRecord) -> Path | None:
    wt = Path(rec.path)
    return _git.worktree_git_dir(rec.common_dir, wt) / PENDING_FILE if wt.is_dir() else None


def note(rec: WorkspaceRecord, conflict: Conflict, follow_up: str | None) -> None:
    """Record the conflict kept in the worktree (and, once it started, the follow-up resolving it)."""
    path = _pending_path(rec)
    if path is not None:
        path.write_text(conflict.to_json(follow_up), encoding="utf-8")


def pending(rec: WorkspaceRecord) -> tuple[Conflict, str | None] | None:
    """A conflict kept in the worktree whose resolution was not settled (relay went away meanwhile), and the
    follow-up that was resolving it (None: it never started)."""
    path = _pending_path(rec)
    if path is None or not path.is_file():
        return None
    try:
        found: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        follow_up = found.pop("follow_up", None)
        for name in ("files", "ours", "theirs"):
            found[name] = tuple(found[name])
        return Conflict(**found), follow_up
    except (ValueError, TypeError, KeyError):
        return None


def _settled(rec: WorkspaceRecord) -> None:
    path = _pending_path(rec)
    if path is not None:
        path.unlink(missing_ok=True)


def _marked(text: str) -> bool:
    return any(line.startswith(MARKERS) for line in text.splitlines())


def conclude(rec: WorkspaceRecord, conflict: Conflict) -> list[str]:
    """After the agent's job: the files that still hold a conflict marker (none: the merge is committed on the
    branch, by the job's seal or here). The worktree is left as it is; `undo` takes the merge back."""
    wt = Path(rec.path)
    if not wt.is_dir():
        return list(conflict.files)
    gd = _git.worktree_git_dir(rec.common_dir, wt)
    left: list[str] = []
    for name in conflict.files:
        path = wt / name
        if path.is_file() and not path.is_symlink() and _marked(path.read_bytes().decode("utf-8", "replace")):
            left.append(name)
    if left:
        return left
    if _merging(gd):  # the seal had nothing to commit (the agent kept our side as it was): the merge is made here
        _git.run(["add", "--all"], wt, git_dir=gd)
        _git.run(["commit", "--quiet", "--no-verify", "--no-edit"], wt, env=AUTHOR, git_dir=gd)
    head = head_of(rec)
    if not _git.ok(["merge-base", "--is-ancestor", conflict.target_sha, head], wt, git_dir=gd):
        return list(conflict.files)  # the branch went elsewhere (the agent reset it): not a resolution
    _settled(rec)
    return []


def undo(rec: WorkspaceRecord, conflict: Conflict) -> None:
    """Take the merge back: the branch and its worktree where they were before `keep` (the agent's edits gone)."""
    undo_to(rec, conflict.head)


def undo_to(rec: WorkspaceRecord, head: str) -> None:
    _settled(rec)
    wt = Path(rec.path)
    if not wt.is_dir():
        _git.run(["update-ref", f"refs/heads/{rec.branch}", head], rec.common_dir, check=False)
        return
    gd = _git.worktree_git_dir(rec.common_dir, wt)
    if _merging(gd):
        _git.run(["merge", "--abort"], wt, check=False, git_dir=gd)
    _git.run(["checkout", "--quiet", "--force", rec.branch], wt, check=False, git_dir=gd)
    _git.run(["reset", "--quiet", "--hard", head], wt, check=False, git_dir=gd)
