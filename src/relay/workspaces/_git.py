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
from relay.workspaces import procs

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
# relay's git is mechanical: no hook of the repository's and no fsmonitor command runs with it. An agent that can
# write a worktree's files could otherwise have relay (outside its sandbox) run any program it names. Passed as
# `-c` before every subcommand, so they also reach the git processes git starts (GIT_CONFIG_PARAMETERS).
SAFE_CONFIG = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null")


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
    git_dir: str | Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `git args` in `cwd`; raises GitError when it fails and `check` is set.

    `stop`: asked every STOP_POLL_S; once it says so, git (its process group) is killed: CANCELLED.
    Within `procs.recorded_in(...)`, git runs in a session of its own, on record while it runs: a relay killed
    meanwhile leaves it to the next relay's sweep, which kills it.
    `git_dir`: the git folder to use (GIT_DIR, with `cwd` as GIT_WORK_TREE) instead of the one git finds from
    `cwd`; a worktree's own `.git` file is its agent's to rewrite, so relay names the folder it recorded
    (`worktree_git_dir`).
    """
    where = {"GIT_DIR": str(git_dir), "GIT_WORK_TREE": str(cwd)} if git_dir is not None else {}
    full_env = {**os.environ, **_QUIET, **(env or {}), **where}
    argv = [git_path(), *SAFE_CONFIG, *args]
    try:
        if stop is not None or procs.recording():
            out = _until_stopped(argv, cwd, full_env, timeout, stop or _never)
        else:
            out = subprocess.run(
                argv,
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


def _never() -> bool:
    return False


def _until_stopped(
    argv: list[str], cwd: str | Path, env: dict[str, str], timeout: float, stop: Callable[[], bool]
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run` of `argv` in a process group of its own, killed with that group when `stop()` says so."""
    deadline = time.monotonic() + timeout
    with (
        subprocess.Popen(
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
        ) as proc,
        procs.kept(proc.pid, " ".join(argv[len(SAFE_CONFIG) + 1 :][:2])),
    ):
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
                said = " ".join(argv[len(SAFE_CONFIG) + 1 :][:2])
                raise RelayError(ErrorCode.CANCELLED, f"git {said} was stopped", "nothing was kept")
            raise subprocess.TimeoutExpired(argv, timeout)


def out(
    args: Sequence[str], cwd: str | Path, *, env: Mapping[str, str] | None = None, git_dir: str | Path | None = None
) -> str:
    """git's stdout, stripped."""
    return run(args, cwd, env=env, git_dir=git_dir).stdout.strip()


def ok(args: Sequence[str], cwd: str | Path, *, git_dir: str | Path | None = None) -> bool:
    """Whether `git args` succeeds."""
    return run(args, cwd, check=False, git_dir=git_dir).returncode == 0


def worktree_git_dir(common_dir: str | Path, worktree: str | Path) -> Path:
    """The git folder of the checkout at `worktree` of the repository whose git folder is `common_dir`.

    Found from the repository's own records, never from the worktree's `.git` file: whoever edits the
    worktree can point that at a git folder of their own, whose config names programs git runs
    (core.fsmonitor, hooks, filters). The main checkout's is `common_dir` itself (its `.git`); a linked
    worktree's is the folder `git worktree add PATH` made, `<common_dir>/worktrees/<basename of PATH>` (a
    number appended when that was taken), whose `gitdir` file points back at `<worktree>/.git`. None
    found: GIT_FAILED, and no git runs there.
    """
    common = Path(common_dir).resolve()
    if common.name == ".git" and Path(worktree).resolve() == common.parent:
        return common
    admin = common / "worktrees"
    want = Path(worktree, ".git").resolve()
    name = Path(worktree).name
    candidates = [admin / name]
    with contextlib.suppress(OSError):
        candidates += sorted(p for p in admin.iterdir() if p.name.removeprefix(name).isdigit())
    for folder in candidates:
        try:
            back = folder.joinpath("gitdir").read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if back and folder.joinpath(back).resolve() == want:  # an absolute `back` stands alone
            return folder
    raise RelayError(
        ErrorCode.GIT_FAILED,
        f"the repository at {common_dir} has no record of the worktree {worktree} (no {admin / name})",
        f"relay runs no git in a worktree the repository does not vouch for; `git worktree list` in {common_dir}"
        " shows the ones it knows; discard the job (relay discard JOB) if its worktree was removed by hand",
    )


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
