"""Running git for worktree jobs: bounded, no prompts, its failures turned into RelayErrors with git's own words."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from pathlib import Path

from relay.errors import ErrorCode, RelayError

# One git command (worktree add of a large repository, a rebase) must end within this.
GIT_TIMEOUT_S = 120.0
# How often a git command that may be stopped (a job's fetch) looks whether it should be.
STOP_POLL_S = 0.1
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
    stop: Callable[[], bool] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `git args` in `cwd`; raises GitError when it fails and `check` is set.

    `stop`: asked every STOP_POLL_S; once it says so, git (its process group) is killed: CANCELLED.
    """
    full_env = {**os.environ, **_QUIET, **(env or {})}
    try:
        if stop is not None:
            out = _until_stopped([git_path(), *args], cwd, full_env, timeout, stop)
        else:
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


def _until_stopped(
    argv: list[str], cwd: str | Path, env: dict[str, str], timeout: float, stop: Callable[[], bool]
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run` of `argv` in a process group of its own, killed with that group when `stop()` says so."""
    deadline = time.monotonic() + timeout
    with subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        errors="replace",
        start_new_session=True,  # what git starts for the transport (ssh, git-remote-https) goes with it
    ) as proc:
        while True:
            try:
                stdout, stderr = proc.communicate(timeout=STOP_POLL_S)  # retried: no output is lost
                return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)
            except subprocess.TimeoutExpired:
                stopped = stop()
                if not stopped and time.monotonic() < deadline:
                    continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            if stopped:
                raise RelayError(ErrorCode.CANCELLED, f"git {' '.join(argv[1:3])} was stopped", "nothing was kept")
            raise subprocess.TimeoutExpired(argv, timeout)


def out(args: Sequence[str], cwd: str | Path, *, env: Mapping[str, str] | None = None) -> str:
    """git's stdout, stripped."""
    return run(args, cwd, env=env).stdout.strip()


def ok(args: Sequence[str], cwd: str | Path) -> bool:
    """Whether `git args` succeeds."""
    return run(args, cwd, check=False).returncode == 0


@contextlib.contextmanager
def locked(lock_file: Path) -> Generator[None]:
    """Hold an exclusive flock on `lock_file` (made if missing): one holder at a time, across every process.

    A holder may remove the file (relay.workspaces.repocache does, with the cache it guards); whoever waited
    on it then locks the file at that path anew."""
    import fcntl  # POSIX only; relay runs worktree jobs where it runs CLI jobs

    while True:
        with open(lock_file, "a+b") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            if not same_file(fh.fileno(), lock_file):  # removed by its holder meanwhile (a prune): take the new one
                continue
            try:
                yield
                return
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def same_file(fd: int, path: Path) -> bool:
    """Whether the open file `fd` is still the file at `path` (not removed or replaced)."""
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except OSError:
        return False
