"""Landing a job's branch: onto the target's tip, through the test gate, then the target moved compare-and-swap.

Lands of one repository are serialized by a lock file in its git folder (every relay process that
lands there takes it); the ref moves only if it still holds the value the land started from.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from relay.errors import ErrorCode, RelayError, invalid
from relay.workspaces import _git, procs
from relay.workspaces._git import AUTHOR
from relay.workspaces.cleanup import clear_half_done, remove_worktree
from relay.workspaces.make import restore
from relay.workspaces.records import WorkspaceRecord
from relay.workspaces.seal import commit_leftovers, head_of

STRATEGIES = ("rebase", "merge", "squash")
LOCK_FILE = "relay-land.lock"
# How much of a failing test's output the land's answer quotes (the whole of it pages with view="test").
TEST_TAIL_CHARS = 4000
# After a test command's time is up: SIGTERM to its group, this long, then SIGKILL.
TEST_KILL_GRACE_S = 2.0
# The index a gate's snapshot of the worktree is written through, in the worktree's own git folder (not its real one).
GATE_INDEX = "relay-gate-index"
# Files written back per git command when undoing a gate's changes (an argument list stays well within the OS's).
UNDO_BATCH = 500


class LandError(RelayError):
    """A land that changed nothing, with what the caller needs to see why (conflicting files, the test)."""

    def __init__(self, code: ErrorCode, message: str, hint: str, **details: Any) -> None:
        super().__init__(code, message, hint)
        self.details = details


def repo_lock(common_dir: str) -> contextlib.AbstractContextManager[None]:
    """One land at a time per repository, across every relay process (an flock on a file in its git folder)."""
    return _git.locked(Path(common_dir, LOCK_FILE))


def worktrees_on(common_dir: str, branch: str) -> list[str]:
    """The worktrees of a repository (its main checkout among them) that have `branch` checked out."""
    listing = _git.out(["worktree", "list", "--porcelain"], common_dir)
    found: list[str] = []
    path = ""
    for line in listing.splitlines():
        if line.startswith("worktree "):
            path = line.removeprefix("worktree ")
        elif line == f"branch refs/heads/{branch}":
            found.append(path)
    return found


def checked_out_in(rec: WorkspaceRecord, branch: str) -> list[str]:
    """The worktrees (the caller's checkout among them) that have `branch` checked out, except the job's own."""
    return [path for path in worktrees_on(rec.common_dir, branch) if Path(path) != Path(rec.path)]


def _conflicted(wt: Path, gd: Path) -> list[str]:
    listed = _git.run(["diff", "--name-only", "-z", "--diff-filter=U"], wt, git_dir=gd).stdout
    return sorted(filter(None, listed.split("\0")))


def _apply(rec: WorkspaceRecord, wt: Path, old: str, head: str, strategy: str, message: str) -> str:
    """The commit the target should move to; on a conflict the worktree is put back and LandError raised."""
    gd = _git.worktree_git_dir(rec.common_dir, wt)  # never the one the worktree's `.git` file names
    if strategy != "squash" and _git.ok(["merge-base", "--is-ancestor", old, head], wt, git_dir=gd):
        return head  # already on top of the target: a fast-forward
    if strategy == "rebase":
        attempt = _git.run(["rebase", "--quiet", old], wt, env=AUTHOR, check=False, git_dir=gd)
        conflicts = _conflicted(wt, gd) if attempt.returncode != 0 else []
        if attempt.returncode != 0:
            _git.run(["rebase", "--abort"], wt, check=False, git_dir=gd)
    else:
        _git.run(["checkout", "--quiet", "--detach", old], wt, git_dir=gd)
        args = (
            ["merge", "--squash", rec.branch]
            if strategy == "squash"
            else ["merge", "--no-ff", "-m", message, rec.branch]
        )
        attempt = _git.run(args, wt, env=AUTHOR, check=False, git_dir=gd)
        conflicts = _conflicted(wt, gd) if attempt.returncode != 0 else []
        if attempt.returncode == 0 and strategy == "squash":
            if _git.ok(["diff", "--cached", "--quiet"], wt, git_dir=gd):
                _back_to_branch(rec, wt, head)
                raise invalid(f"job {rec.job_id}'s branch changes nothing against the target", "discard it instead")
            _git.run(["commit", "--quiet", "--no-verify", "-m", message], wt, env=AUTHOR, git_dir=gd)
        elif attempt.returncode != 0:
            _git.run(["merge", "--abort"], wt, check=False, git_dir=gd)
            _back_to_branch(rec, wt, head)
    if attempt.returncode != 0:
        raise LandError(
            ErrorCode.LAND_CONFLICT,
            f"job {rec.job_id}'s branch conflicts with the target in: {', '.join(conflicts) or '(git did not say)'}",
            "nothing was changed; ask the agent to resolve it: delegate(session_id=..., workspace='job:"
            f"{rec.job_id}', prompt='rebase onto the target and resolve the conflicts'), or land with another strategy",
            conflicts=conflicts or [attempt.stderr.strip()[-400:]],
        )
    return _git.out(["rev-parse", "HEAD"], wt, git_dir=gd)


def _back_to_branch(rec: WorkspaceRecord, wt: Path, head: str) -> None:
    """Put the worktree back on the job's branch at `head`, as it was before the land."""
    gd = _git.worktree_git_dir(rec.common_dir, wt)
    _git.run(["checkout", "--quiet", "--force", rec.branch], wt, check=False, git_dir=gd)
    _git.run(["reset", "--quiet", "--hard", head], wt, check=False, git_dir=gd)


def run_test(
    command: str, cwd: Path, log: Path, timeout_s: float, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Run the test command in the worktree, its output (both streams) kept in `log`; bounded by `timeout_s`.
    Its environment is `env` (procs.command_env: the allowlist and what the person set), never relay's whole one;
    without `env`, the allowlisted part of relay's."""
    started = time.monotonic()
    timed_out = False
    # The command starts only once its process is on record: it waits for a line on its stdin, which a relay killed
    # before then closes unwritten (EOF: it never starts); then it runs with stdin from /dev/null, as ever.
    go, go_write = os.pipe()
    wait_for_go = 'read -r _ || exit 125; exec /bin/sh -c "$1" </dev/null'
    with open(log, "wb") as out:
        try:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", wait_for_go, "relay-test", command],
                cwd=cwd,
                env=dict(env) if env is not None else procs.command_env(os.environ),
                stdin=go,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except BaseException:
            os.close(go_write)
            raise
        finally:
            os.close(go)
        with procs.kept(proc.pid, "test"):  # on record while it runs: a relay killed meanwhile, the next one kills it
            os.write(go_write, b"go\n")
            os.close(go_write)
            try:
                code = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                code = procs.stop_group(proc, TEST_KILL_GRACE_S)
            with contextlib.suppress(ProcessLookupError, PermissionError):  # what it left running goes with it
                os.killpg(proc.pid, signal.SIGKILL)
    text = log.read_bytes().decode("utf-8", "replace")
    return {
        "command": command,
        "passed": code == 0 and not timed_out,
        "exit_code": code,
        "timed_out": timed_out,
        "duration_ms": int((time.monotonic() - started) * 1000),
        "output_tail": text[-TEST_TAIL_CHARS:],
        "output_chars": len(text),
    }


def _worktree_tree(wt: Path, gd: Path, index: Path) -> str:
    """The worktree's files as git sees them (tracked and untracked; not the ignored) as a tree object, written
    through `index`, a copy of the worktree's own (its stat data spares rehashing unchanged files)."""
    with contextlib.suppress(FileNotFoundError):
        shutil.copyfile(gd / "index", index)
    env = {"GIT_INDEX_FILE": str(index)}
    _git.run(["add", "--all", "--", "."], wt, env=env, git_dir=gd)
    return _git.out(["write-tree"], wt, env=env, git_dir=gd)


def _undo(wt: Path, gd: Path, index: Path, before: str) -> list[str]:
    """Put the worktree's files back as they were in the tree `before`: what was added since is deleted (and the
    folders it leaves empty), what was changed or deleted is written back. The worktree's own index is not touched.
    The paths put back, sorted."""
    after = _worktree_tree(wt, gd, index)
    if after == before:
        return []
    listed = _git.run(["diff-tree", "-r", "-z", "--no-renames", "--name-status", before, after], wt, git_dir=gd)
    fields = listed.stdout.split("\0")
    changes = list(zip(fields[0::2], fields[1::2], strict=False))
    added = [name for status, name in changes if status == "A"]
    back = [name for status, name in changes if status != "A" and name]
    for name in added:
        path = wt / name
        if path.is_dir() and not path.is_symlink():  # a repository of its own the gate made (git adds it as one entry)
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        for parent in path.parents:  # the folders the gate made, emptied now
            if parent == wt or not parent.is_relative_to(wt):
                break
            try:
                parent.rmdir()
            except OSError:
                break
    if back:
        env = {"GIT_INDEX_FILE": str(index)}
        _git.run(["read-tree", before], wt, env=env, git_dir=gd)
        for at in range(0, len(back), UNDO_BATCH):
            _git.run(["checkout-index", "--force", "--", *back[at : at + UNDO_BATCH]], wt, env=env, git_dir=gd)
    return sorted(added + back)


def gated_test(
    rec: WorkspaceRecord, command: str, log: Path, timeout_s: float, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """`run_test` in the job's worktree (in its sub-folder), which it leaves as it found it: files the command wrote
    (a report not in .gitignore) are deleted, files it changed or deleted written back, before anything can seal or
    land them; files git ignores stay. The result's `undone`: the paths put back."""
    wt = Path(rec.path)
    gd = _git.worktree_git_dir(rec.common_dir, wt)
    index = gd / GATE_INDEX
    try:
        before = _worktree_tree(wt, gd, index)
        try:
            with procs.recorded_in(wt.parent):  # the test's processes on record (relay.workspaces.procs)
                test = run_test(command, Path(rec.cwd), log, timeout_s, env)
        finally:
            undone = _undo(wt, gd, index, before)
    finally:
        index.unlink(missing_ok=True)
    return test | {"undone": undone}


def _moved(rec: WorkspaceRecord, target: str) -> LandError:
    """The target's ref no longer holds what the land started from (someone committed or landed meanwhile)."""
    return LandError(
        ErrorCode.LAND_CONFLICT,
        f"{target} moved while job {rec.job_id} was being landed",
        "nothing was changed; land again to go onto its new tip",
        conflicts=[],
    )


def _move_target(rec: WorkspaceRecord, target: str, old: str, new: str) -> None:
    """Move refs/heads/<target> from `old` to `new`; a checkout of it is updated as `git merge --ff-only` would."""
    trees = checked_out_in(rec, target)
    if not trees:
        moved = _git.run(
            ["update-ref", "-m", f"relay: land job {rec.job_id}", f"refs/heads/{target}", new, old],
            rec.common_dir,
            check=False,
        )
        if moved.returncode != 0:
            raise _moved(rec, target)
        return
    tree = trees[0]
    gd = _git.worktree_git_dir(rec.common_dir, tree)  # the caller's checkout, or another job's worktree
    if _git.out(["rev-parse", "HEAD"], tree, git_dir=gd) != old:
        raise _moved(rec, target)
    touched = set(filter(None, _git.run(["diff", "--name-only", "-z", old, new], tree, git_dir=gd).stdout.split("\0")))
    status = _git.run(
        ["--no-optional-locks", "status", "--porcelain", "-z", "--untracked-files=all"], tree, git_dir=gd
    ).stdout
    dirty = {item[3:] for item in status.split("\0") if len(item) > 3}
    blocked = sorted(touched & dirty)
    if blocked:
        raise LandError(
            ErrorCode.LAND_CONFLICT,
            f"{target} is checked out in {tree} with uncommitted changes to files the land touches: {', '.join(blocked)}",
            f"nothing was changed; commit or stash them in {tree} (git stash), then land again",
            conflicts=blocked,
        )
    _git.run(["merge", "--quiet", "--ff-only", new], tree, git_dir=gd)


def land(
    rec: WorkspaceRecord,
    *,
    into: str | None,
    strategy: str,
    test_command: str | None,
    test_timeout_s: float,
    test_log: Path,
    message: str,
    test_env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Land the job's branch into `into` (default: the branch it was made from); changes nothing unless it lands."""
    if strategy not in STRATEGIES:
        raise invalid(
            f"strategy {strategy!r} is not one of {', '.join(STRATEGIES)}", "use rebase (default), merge or squash"
        )
    target = into or rec.base_ref
    if target is None:
        raise invalid(
            f"job {rec.job_id} was made from a commit or a detached HEAD ({rec.base_sha[:12]}): there is no branch to land into",
            "pass into='<branch>'",
        )
    if target == rec.branch or not _git.ok(["check-ref-format", "--branch", target], rec.common_dir):
        raise invalid(
            f"into={target!r} is not a branch relay can land into", "pass the name of a local branch, e.g. main"
        )
    with repo_lock(rec.common_dir):
        found = _git.run(["rev-parse", "--verify", "--quiet", f"refs/heads/{target}"], rec.common_dir, check=False)
        if found.returncode != 0:
            raise invalid(
                f"branch {target!r} does not exist in {rec.repo}",
                "pass an existing branch as into (git branch lists them)",
            )
        old = found.stdout.strip()
        restore(rec)
        wt = Path(rec.path)
        # A land a crash cut short (a rebase's folder, index.lock) is cleared first, its worktree back on the branch.
        if clear_half_done(_git.worktree_git_dir(rec.common_dir, wt)):
            _back_to_branch(rec, wt, head_of(rec))
        commit_leftovers(rec, f"Edits made in the worktree after relay job {rec.job_id}\n")
        head = head_of(rec)
        new = _apply(rec, wt, old, head, strategy, message)
        test: dict[str, Any] | None = None
        if test_command:
            try:
                test = gated_test(rec, test_command, test_log, test_timeout_s, test_env)
            except RelayError:  # git could not picture or put back the worktree: the branch goes back as it was
                _back_to_branch(rec, wt, head)
                raise
            if not test["passed"]:
                _back_to_branch(rec, wt, head)
                what = "timed out" if test["timed_out"] else f"exited {test['exit_code']}"
                raise LandError(
                    ErrorCode.LAND_TEST_FAILED,
                    f"the test command {what}; {target} was not changed",
                    f"read the whole output with job_result(job_id='{rec.job_id}', view='test'); fix it with a follow-up"
                    f" (workspace='job:{rec.job_id}') and land again",
                    test=test,
                    conflicts=[],
                )
        try:
            _move_target(rec, target, old, new)
        except RelayError:
            _back_to_branch(rec, wt, head)
            raise
        commits = int(_git.out(["rev-list", "--count", f"{old}..{new}"], rec.common_dir) or 0)
        remove_worktree(rec, later=True)
    return {
        "landed": True,
        "into": target,
        "strategy": strategy,
        "old": old,
        "new": new,
        "commits": commits,
        "test": test,
    }
