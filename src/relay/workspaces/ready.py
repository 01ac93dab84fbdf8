"""A worktree ready to work in: the checkout's ignored files it needs, a block of ports, the person's setup command.

Before a new worktree's agent starts (docs/workspaces.md, "A worktree ready to work in"):

- files the repository's `.worktreeinclude` names (gitignore syntax, at the checkout's top) AND git ignores are
  copied from the checkout (Claude Code's convention): a `.env`, local config, even node_modules; never a tracked
  file, never through a symlink out of the checkout, never a pattern that reaches outside the repository;
- the person's setup command for the repository (`[workspaces] setup_command`, or `[workspaces.repos."<folder or
  URL>"]`: config.toml only, never a caller's or the repository's) runs at the worktree's top, bounded, its output
  kept in the job's `setup.log` (job_result view="setup"); a failure ends the job before its agent starts; never on
  a branch whose commits only relay's job branches hold (an agent's unlanded work: what the command runs, a
  package.json or a Makefile, would be the agent's, outside its sandbox);
- the worktree holds a block of ports of its own (RELAY_PORT, RELAY_PORTS, PORT in its agents' environment),
  recorded with its workspace row and held until the worktree is removed, so two agents never share one.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from relay.config import Settings
from relay.errors import ErrorCode, RelayError
from relay.workspaces import _git, procs
from relay.workspaces.make import CARRY_MESSAGE
from relay.workspaces.records import WorkspaceRecord, WorkspaceStore

# The repository's list of ignored files a new worktree gets from the checkout (Claude Code's name and syntax).
INCLUDE_FILE = ".worktreeinclude"
# What a job's folder keeps of its worktree's readying: what was copied, the ports, the setup command's output.
SETUP_LOG = "setup.log"
# How much of a failed setup's output the job's error quotes (the whole of it pages with view="setup").
SETUP_TAIL_CHARS = 2000
# After the setup's time is up (or its job cancelled): SIGTERM to its process group, this long, then SIGKILL.
SETUP_KILL_GRACE_S = 2.0
# How often a running setup command looks whether its job was cancelled.
STOP_POLL_S = 0.1
# A copy looks whether its job was cancelled every this many files.
COPY_STOP_EVERY = 500
# The top-level entries the log names one by one (the rest are counted).
SHOWN_ENTRIES = 30
# The mark in a worktree's git folder (<common>/worktrees/<name>, outside the worktree) that it was made ready.
READY_MARK = "relay-ready"
# The lock every relay of this home takes to hand out blocks of ports (beside relay.db, not among the worktrees).
PORTS_LOCK = "worktree-ports.lock"
# A workspace in one of these states holds no ports any more (its worktree was removed).
RELEASED = ("landed", "discarded", "pruned")
# The most workspace rows read when looking for the ports in use.
ROWS_LIMIT = 100_000

Stop = Callable[[], bool]


# .worktreeinclude: what is copied -----------------------------------------------------------------------


@dataclass
class Copied:
    """What was copied into a worktree from its checkout, and what was not (with why)."""

    files: int = 0
    bytes: int = 0
    entries: dict[str, list[int]] = field(default_factory=lambda: {})  # top-level name -> [files, bytes]
    skipped: list[tuple[str, str]] = field(default_factory=lambda: [])

    def add(self, rel: str, size: int) -> None:
        parts = PurePosixPath(rel).parts
        top = parts[0] + ("/" if len(parts) > 1 else "")
        entry = self.entries.setdefault(top, [0, 0])
        entry[0] += 1
        entry[1] += size
        self.files += 1
        self.bytes += size

    def lines(self) -> list[str]:
        """How the setup log says it."""
        if not self.files and not self.skipped:
            return []
        said = [f"relay: copied from the checkout ({INCLUDE_FILE}): {_files(self.files)}, {_size(self.bytes)}"]
        shown = sorted(self.entries.items())[:SHOWN_ENTRIES]
        said += [f"  {top}  ({_files(files)}, {_size(size)})" for top, (files, size) in shown]
        if len(self.entries) > len(shown):
            said.append(f"  ... and {len(self.entries) - len(shown)} more")
        said += [f"relay: not copied: {rel} ({why})" for rel, why in self.skipped]
        return said

    def summary(self) -> dict[str, Any]:
        return {"files": self.files, "bytes": self.bytes, "skipped": [rel for rel, _ in self.skipped]}


def _files(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"


def _size(n: int) -> str:
    for unit in ("B", "kB", "MB"):
        if n < 1000:
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000  # pyright: ignore[reportAssignmentType]
    return f"{n:.1f} GB"


def _escapes(pattern: str) -> bool:
    """Whether a pattern line names a path outside the repository (`..` among its parts)."""
    body = pattern.strip().removeprefix("!")
    return any(part == ".." for part in body.replace("\\", "/").split("/"))


def included(checkout: Path) -> tuple[list[str], list[tuple[str, str]]]:
    """The files (relative, `/`-separated) of `checkout` its `.worktreeinclude` names and git ignores; the lines
    refused, with why. No file (or a symlink in its place): nothing."""
    source = checkout / INCLUDE_FILE
    try:
        if not stat.S_ISREG(os.lstat(source).st_mode):
            return [], [(INCLUDE_FILE, "not a regular file: a symlink is not followed")]
        lines = source.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return [], []
    refused = [(line.strip(), "it escapes the repository") for line in lines if _escapes(line)]
    kept = [line for line in lines if not _escapes(line)]
    if not any(line.strip() and not line.lstrip().startswith("#") for line in kept):
        return [], refused
    with tempfile.TemporaryDirectory(prefix="relay-include-") as tmp:
        patterns = Path(tmp, "patterns")
        patterns.write_text("\n".join(kept) + "\n", encoding="utf-8")
        named = _listed(checkout, f"--exclude-from={patterns}")
    ignored = set(_listed(checkout, "--exclude-standard"))
    return [rel for rel in named if rel in ignored], refused


def _listed(checkout: Path, excludes: str) -> list[str]:
    """Untracked files of the checkout that `excludes` matches (git ls-files -o -i), folders of other repositories
    left out."""
    out = _git.run(["ls-files", "-z", "--others", "--ignored", excludes], checkout)
    return [rel for rel in out.stdout.split("\0") if rel and not rel.endswith("/")]


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def copy_included(checkout: Path, worktree: Path, stop: Stop | None = None) -> Copied:
    """The files `.worktreeinclude` names and git ignores, copied from the checkout to the same place in the worktree.

    A file already in the worktree (a tracked one) is left as it is; a symlink is copied as the link only when it
    points inside the checkout (relative), else left out; a path whose real place is outside the checkout, or
    whose folder in the worktree is a symlink, is refused. `stop` (a cancel) is asked every COPY_STOP_EVERY files.
    """
    copied = Copied()
    names, copied.skipped = included(checkout)
    top, into = os.path.realpath(checkout), os.path.realpath(worktree)
    folders: dict[tuple[str, str], str | None] = {}  # (source folder, its folder in the worktree) -> why not
    for count, rel in enumerate(names):
        if stop is not None and count % COPY_STOP_EVERY == 0 and stop():
            raise RelayError(ErrorCode.CANCELLED, "the job was cancelled while its worktree was made ready", "")
        src, dst = os.path.join(top, rel), os.path.join(into, rel)
        where = (os.path.dirname(src), os.path.dirname(dst))
        if where not in folders:
            folders[where] = (
                "it escapes the repository" if ".." in PurePosixPath(rel).parts else _folders(top, into, *where)
            )
        why = folders[where] or _copy_one(top, src, dst, rel, copied)
        if why:
            copied.skipped.append((rel, why))
    return copied


def _folders(top: str, into: str, source: str, target: str) -> str | None:
    """Why a file of folder `source` cannot go to folder `target` (made here, inside the worktree), or None."""
    if not _inside(os.path.realpath(source), top):
        return "it escapes the repository"
    existing = target
    while not os.path.lexists(existing):  # the nearest folder there is: never made through a symlink out
        existing = os.path.dirname(existing)
    if not _inside(os.path.realpath(existing), into):
        return "its folder in the worktree leads outside it"
    try:
        os.makedirs(target, exist_ok=True)
    except OSError as exc:
        return f"could not copy: {exc.strerror or exc}"
    return None


def _copy_one(top: str, src: str, dst: str, rel: str, copied: Copied) -> str | None:
    """Copy one file (or an inside symlink) to a folder made ready; None when done, else why it was not."""
    try:
        st = os.lstat(src)
        if os.path.lexists(dst):
            return "the worktree has its own"
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(src)
            if os.path.isabs(target) or not _inside(os.path.realpath(src), top):
                return "a symlink out of the checkout is not followed"
            os.symlink(target, dst)
            copied.add(rel, 0)
        elif stat.S_ISREG(st.st_mode):
            if not _copy_file(src, dst, st):
                return "it changed while it was copied"
            copied.add(rel, st.st_size)
        else:
            return "not a regular file"
    except OSError as exc:
        return f"could not copy: {exc.strerror or exc}"
    return None


def _copy_file(src: str, dst: str, st: os.stat_result) -> bool:
    """Copy the regular file `st` describes: read through a descriptor that is that very file (never a symlink put
    in its place since), written to a new file (never through a link at `dst`). False when `src` is another file now."""
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            return False
        out = os.open(
            dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, stat.S_IMODE(now.st_mode)
        )
        with open(fd, "rb", closefd=False) as reader, open(out, "wb") as writer:
            shutil.copyfileobj(reader, writer, 1 << 20)
            os.fchmod(writer.fileno(), stat.S_IMODE(now.st_mode))  # the mode as it is, whatever the umask took
    finally:
        os.close(fd)
    return True


# the setup command ------------------------------------------------------------------------------------------


def _plain(url: str) -> str:
    """A remote URL as compared: no trailing slash or `.git`."""
    return url.strip().rstrip("/").removesuffix(".git")


def setup_command_for(settings: Settings, rec: WorkspaceRecord, url: str | None) -> str:
    """The person's setup command for the workspace's repository ("" for none): `[workspaces.repos."<folder>"]`
    (the checkout's top folder), else `[workspaces.repos."<URL>"]` (the URL it was placed from, or one of the
    checkout's remotes), else `[workspaces] setup_command`."""
    commands = settings.setup_commands
    if url is None and os.path.realpath(rec.repo) in commands:
        return commands[os.path.realpath(rec.repo)]
    by_url = {_plain(key): command for key, command in commands.items() if key and not key.startswith("/")}
    if by_url:
        if url is not None:
            remotes = [url]
        else:
            found = _git.run(["config", "--get-regexp", r"^remote\..*\.url$"], rec.repo, check=False).stdout
            remotes = [line.partition(" ")[2] for line in found.splitlines()]
        for remote in remotes:
            if _plain(remote) in by_url:
                return by_url[_plain(remote)]
    return commands.get("", "")


# Refs that hold the person's commits: branches, tags, remote branches (a worker's cache keeps a URL's under
# refs/relay-cache/), all but relay's job branches (relay/<job-id>: an agent's work until it is landed).
_PERSONS_REFS = ("refs/heads", "refs/tags", "refs/remotes", "refs/relay-cache")
_JOB_BRANCH = re.compile(r"^refs/(heads|remotes/[^/]+|relay-cache/heads)/relay/")


def _persons(common_dir: str, sha: str) -> bool:
    """Whether a ref of the person's (not a job branch) holds commit `sha`."""
    found = _git.run(
        ["for-each-ref", f"--contains={sha}", "--format=%(refname)", *_PERSONS_REFS], common_dir, check=False
    )
    return found.returncode == 0 and any(not _JOB_BRANCH.match(ref) for ref in found.stdout.split())


def not_the_persons(rec: WorkspaceRecord) -> str | None:
    """Why the worktree's branch holds content that is not the person's (commits only relay's job branches hold:
    an agent's work nobody landed, a `base` that names such a branch), or None: its head is on a branch, tag or
    remote branch of theirs, or is the caller's uncommitted changes relay carried onto such a commit."""
    head = _git.run(
        ["rev-parse", "--verify", "--quiet", f"refs/heads/{rec.branch}^{{commit}}"], rec.common_dir, check=False
    )
    sha = head.stdout.strip()
    if head.returncode != 0 or not sha:
        return f"its branch {rec.branch} could not be read"
    if _persons(rec.common_dir, sha):
        return None
    shown = _git.run(["log", "-1", "--format=%P%n%B", sha], rec.common_dir, check=False).stdout
    parents, _, body = shown.partition("\n")
    if body.strip() == CARRY_MESSAGE and parents.split() == [rec.base_sha] and _persons(rec.common_dir, rec.base_sha):
        return None
    return (
        f"its branch {rec.branch} holds commits that no branch or tag of yours does (an agent's work nobody "
        "landed), and the setup command would run what they hold outside any agent's sandbox"
    )


def run_setup(
    command: str, cwd: Path, env: Mapping[str, str], log: Path, timeout_s: float, stop: Stop | None = None
) -> dict[str, Any]:
    """The setup command in a shell of its own process group at `cwd`, its output (both streams) appended to `log`;
    stopped (SIGTERM, a grace, SIGKILL to the group) after `timeout_s` or once `stop()` says so. Within
    `procs.recorded_in`, on record while it runs: a relay killed meanwhile leaves it to the next one's sweep."""
    started = time.monotonic()
    deadline = started + timeout_s
    timed_out = stopped = False
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        with procs.kept(proc.pid, "setup"):  # on record while it runs: a relay killed meanwhile, the next one kills it
            while True:
                try:
                    code: int | None = proc.wait(timeout=STOP_POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    stopped = stop is not None and stop()
                    timed_out = not stopped and time.monotonic() >= deadline
                    if stopped or timed_out:
                        code = procs.stop_group(proc, SETUP_KILL_GRACE_S)
                        break
    return {
        "command": command,
        "exit_code": code,
        "timed_out": timed_out,
        "stopped": stopped,
        "passed": code == 0 and not (timed_out or stopped),
        "duration_ms": int((time.monotonic() - started) * 1000),
    }


# ports ---------------------------------------------------------------------------------------------------


def _block(ports: str | None) -> tuple[int, int] | None:
    first, _, last = (ports or "").partition("-")
    return (int(first), int(last)) if first.isdigit() and last.isdigit() else None


def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def port_free(port: int) -> bool:
    """Whether nothing on this host listens on `port` (a bind to it on 127.0.0.1 works)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def reserve_ports(
    settings: Settings,
    store: WorkspaceStore,
    job_id: str,
    busy: set[str],
    free: Callable[[int], bool] = port_free,
) -> str | None:
    """The workspace's block of ports, "FIRST-LAST": the one it holds, else the first block of the range that no
    workspace still there holds and nothing on the host listens on, recorded on its row. Every relay of this home
    takes turns here (a lock file). When none is left, the block of the worktree whose job ended longest ago and
    that no job runs in (`busy`: workspaces a job runs in) is taken from it (it gets a new one at its next job).
    None when the block's size (`ports_per_worktree`) is 0; LIMIT_REACHED when every block is in use."""
    first, last, per = settings.worktree_ports
    if per <= 0:
        return None
    settings.home.mkdir(parents=True, exist_ok=True)
    with _git.locked(settings.home / PORTS_LOCK):
        rec = store.get(job_id)
        if rec is None:
            return None
        others = [
            r
            for r in store.list(limit=ROWS_LIMIT)
            if r.job_id != job_id and _block(r.ports) and r.removed_at is None and r.state not in RELEASED
        ]
        held = [b for r in others if (b := _block(r.ports))]
        own = _block(rec.ports)
        if own is not None and not any(_overlaps(own, b) for b in held):
            return rec.ports
        idle = sorted((r for r in others if r.job_id not in busy and r.ended_at), key=lambda r: r.ended_at or 0.0)
        for taken in [None, *idle]:
            if taken is not None:  # every block is held: the longest idle worktree's taken back
                store.update(taken.job_id, ports=None)
                held = [b for b in held if b != _block(taken.ports)]
            for start in range(first, last - per + 2, per):
                block = (start, start + per - 1)
                if any(_overlaps(block, b) for b in held) or not all(free(p) for p in range(start, start + per)):
                    continue
                store.update(job_id, ports=f"{block[0]}-{block[1]}")
                return f"{block[0]}-{block[1]}"
    raise RelayError(
        ErrorCode.LIMIT_REACHED,
        f"no block of {per} free ports is left in {first}-{last} for a worktree: {len(held)} worktrees hold theirs",
        "land or discard worktrees (relay discard JOB; relay doctor lists them), or widen [workspaces] ports in "
        "config.toml",
    )


def port_env(ports: str | None) -> dict[str, str]:
    """The agent's (and the setup command's) environment for a block of ports: RELAY_PORT, RELAY_PORTS, PORT."""
    block = _block(ports)
    if block is None:
        return {}
    return {"RELAY_PORT": str(block[0]), "RELAY_PORTS": f"{block[0]}-{block[1]}", "PORT": str(block[0])}


# all of it, before the agent starts -----------------------------------------------------------------------


def make_ready(
    settings: Settings,
    rec: WorkspaceRecord,
    log: Path,
    *,
    url: str | None = None,
    env: Mapping[str, str] | None = None,
    stop: Stop | None = None,
) -> dict[str, Any] | None:
    """A worktree made ready for its agent: the included files copied from the checkout (not for a worktree placed
    from a URL: there is no checkout), then the person's setup command run at its top, everything said in `log`.
    Once per worktree as git made it: a mark in its git folder (outside the worktree) says it was; a worktree made
    again from its branch (a follow-up after a land or a prune) has a new git folder, and is made ready again.
    None when it was ready. Raises SETUP_FAILED (the output's tail in the message) or CANCELLED (`stop`)."""
    try:
        mark: Path | None = _git.worktree_git_dir(rec.common_dir, rec.path) / READY_MARK
    except RelayError:  # the repository does not vouch for it: no mark where the worktree could write one
        mark = None
    if mark is not None and mark.exists():
        return None
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        copied = Copied() if url is not None else copy_included(Path(rec.repo), Path(rec.path), stop)
    except RelayError as err:  # the checkout cannot be listed now (gone, git failing): the job runs without
        if err.code is ErrorCode.CANCELLED:
            raise
        copied = Copied(skipped=[(INCLUDE_FILE, f"the checkout could not be listed: {err.message}")])
    command = setup_command_for(settings, rec, url)
    said = copied.lines()
    refused = not_the_persons(rec) if command else None
    if refused:
        said.append(f"relay: the setup command was not run: {refused}; land the work first, or run it yourself")
        command = ""
    if rec.ports:
        said.append(f"relay: ports {rec.ports} for this worktree's agents (RELAY_PORT, RELAY_PORTS, PORT)")
    elif settings.worktree_ports[2]:
        first, last, _ = settings.worktree_ports
        said.append(f"relay: no ports for this worktree: no block of {first}-{last} was free for it")
    if command:
        said.append(f"relay: $ {command}    (in {rec.path}, at most {settings.setup_timeout_s:.0f} s)")
    log.write_text("".join(line + "\n" for line in said), encoding="utf-8")
    ready: dict[str, Any] = {"copied": copied.summary(), "ports": rec.ports, "setup": None}
    if not command:
        return _marked(mark, ready)
    # Never relay's own environment (tokens, keys): the allowlist and what the person set for commands (procs.command_env).
    base = procs.command_env(settings.environ, settings.command_pass_env, settings.command_env)
    setup_env = {**base, **(env or {}), **port_env(rec.ports), "RELAY_WORKTREE": rec.path}
    if url is None:
        setup_env["RELAY_CHECKOUT"] = rec.repo
    with procs.recorded_in(Path(rec.path).parent):  # the setup's processes on record (relay.workspaces.procs)
        ran = run_setup(command, Path(rec.path), setup_env, log, settings.setup_timeout_s, stop)
    how = "was stopped" if ran["stopped"] else f"ended with exit code {ran['exit_code']}"
    how = f"did not end within {settings.setup_timeout_s:.0f} s" if ran["timed_out"] else how
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"\nrelay: the setup command {how} after {ran['duration_ms'] / 1000:.1f} s\n")
    if ran["stopped"]:
        raise RelayError(ErrorCode.CANCELLED, "the job was cancelled while its setup command ran", "")
    if not ran["passed"]:
        tail = log.read_text(encoding="utf-8", errors="replace")[-SETUP_TAIL_CHARS:]
        raise RelayError(
            ErrorCode.SETUP_FAILED,
            f"the setup command `{command}` {how} in the new worktree; its agent was not started. Its output "
            f"ends:\n{tail}",
            "job_result(view='setup') shows its whole output; fix the command ([workspaces] setup_command in "
            "config.toml) or the repository, then submit the job again"
            + (" (or raise [workspaces] setup_timeout_s)" if ran["timed_out"] else ""),
        )
    return _marked(mark, ready | {"setup": ran})


def _marked(mark: Path | None, ready: dict[str, Any]) -> dict[str, Any]:
    if mark is not None:
        with contextlib.suppress(OSError):  # no mark: made ready again at its next job
            mark.touch()
    return ready
