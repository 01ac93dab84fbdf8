"""Running git for worktree jobs: bounded, no prompts, its failures turned into RelayErrors with git's own words."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Generator, Mapping, Sequence
from pathlib import Path

from relay.errors import ErrorCode, RelayError

# One git command (worktree add of a large repository, a rebase) must end within this.
GIT_TIMEOUT_S = 120.0
# Who commits what an agent left in its worktree.
AUTHOR = {
    "GIT_AUTHOR_NAME": "relay",
    "GIT_AUTHOR_EMAIL": "relay@localhost",
    "GIT_COMMITTER_NAME": "relay",
    "GIT_COMMITTER_EMAIL": "relay@localhost",
}
# Never ask a person anything (credentials, an editor for a message).
_QUIET = {"GIT_TERMINAL_PROMPT": "0", "GIT_EDITOR": "true", "GIT_SEQUENCE_EDITOR": "true", "GIT_MERGE_AUTOEDIT": "no"}


class GitError(RelayError):
    """A git command that exited non-zero; `stderr` is what git said."""

    def __init__(self, args: Sequence[str], returncode: int, stderr: str) -> None:
        said = stderr.strip().splitlines()[-3:] if stderr.strip() else [f"exit status {returncode}"]
        super().__init__(
            ErrorCode.GIT_FAILED,
            f"git {' '.join(args[:2])} failed: {' / '.join(said)}",
            "check the repository with `git status`; relay changed nothing it could not undo",
        )
        self.returncode = returncode
        self.stderr = stderr


def git_path() -> str:
    found = shutil.which("git")
    if found is None:
        raise RelayError(
            ErrorCode.AGENT_NOT_INSTALLED,
            "git is not installed, and a worktree workspace needs it",
            "install git (apt install git, brew install git), or omit workspace",
        )
    return found


def run(
    args: Sequence[str],
    cwd: str | Path,
    *,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    timeout: float = GIT_TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    """Run `git args` in `cwd`; raises GitError when it fails and `check` is set."""
    full_env = {**os.environ, **_QUIET, **(env or {})}
    try:
        out = subprocess.run(
            [git_path(), *args],
            cwd=cwd,
            env=full_env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise RelayError(
            ErrorCode.TIMEOUT,
            f"git {' '.join(args[:2])} took more than {timeout:.0f} s",
            "check the repository (a lock held, a huge checkout) and try again",
        ) from None
    except OSError as exc:
        raise RelayError(
            ErrorCode.GIT_FAILED, f"could not run git in {cwd}: {exc}", "check that the folder exists"
        ) from None
    if check and out.returncode != 0:
        raise GitError(args, out.returncode, out.stderr)
    return out


def out(args: Sequence[str], cwd: str | Path, *, env: Mapping[str, str] | None = None) -> str:
    """git's stdout, stripped."""
    return run(args, cwd, env=env).stdout.strip()


def ok(args: Sequence[str], cwd: str | Path) -> bool:
    """Whether `git args` succeeds."""
    return run(args, cwd, check=False).returncode == 0


@contextlib.contextmanager
def locked(lock_file: Path) -> Generator[None]:
    """Hold an exclusive flock on `lock_file` (made if missing): one holder at a time, across every process."""
    import fcntl  # POSIX only; relay runs worktree jobs where it runs CLI jobs

    with open(lock_file, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
