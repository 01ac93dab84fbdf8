"""The processes relay runs for worktrees belong to the runtime: recorded while they run, killed once their relay is gone.

git's checkout of a new worktree, a land's rebase or merge, a test gate: each runs in a session of its own,
and while it runs a file under `<worktrees>/.procs/` names it (pid and start time) and the relay that
started it. A relay killed meanwhile leaves the file behind; the next relay's sweep (at start-up, and
before each prune) sees that relay gone and kills the process's whole group, so nothing a dead relay
started goes on changing a worktree that is being cleaned up or landed again. A worktree being made
has a file of the same kind under `<worktrees>/.creating/<job-id>`: whose creation it is, so a sweep
never takes back one that a live relay (this one or another sharing the home) is still making.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Generator, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from relay.agents.base import BASE_ENV_ALLOWLIST, BASE_ENV_PREFIXES
from relay.runtime import procinfo

PROCS = ".procs"
CREATING = ".creating"
# After SIGKILL to a left-over group, how long its members may take to be gone (bounded; then it is left).
GONE_WAIT_S = 5.0
GONE_STEP_S = 0.02

_FOLDER: ContextVar[Path | None] = ContextVar("relay_workspace_procs", default=None)


@contextlib.contextmanager
def recorded_in(worktrees_dir: Path) -> Generator[None]:
    """Within: every process relay.workspaces starts (git, a test command) is recorded under `worktrees_dir`."""
    token = _FOLDER.set(worktrees_dir / PROCS)
    try:
        yield
    finally:
        _FOLDER.reset(token)


def recording() -> bool:
    return _FOLDER.get() is not None


def me() -> dict[str, Any]:
    """This relay process, as a later one can tell it from a pid reused since."""
    pid = os.getpid()
    return {"pid": pid, "start": procinfo.start_ticks(pid), "boot": procinfo.boot_id()}


def _alive(who: dict[str, Any]) -> bool:
    try:
        pid, start, boot = int(who["pid"]), who.get("start"), who.get("boot")
    except (KeyError, TypeError, ValueError):
        return False
    return start is not None and procinfo.is_alive(pid, int(start), str(boot) if boot else None)


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None  # pyright: ignore[reportUnknownVariableType]


@contextlib.contextmanager
def kept(pid: int, what: str) -> Generator[None]:
    """While inside: the process `pid` (the leader of its own group) is on record as this relay's."""
    folder = _FOLDER.get()
    if folder is None:
        yield
        return
    path = folder / f"{pid}.json"
    with contextlib.suppress(OSError):  # a record that cannot be written: the process still runs, unrecorded
        _write(
            path,
            {"pid": pid, "start": procinfo.start_ticks(pid), "boot": procinfo.boot_id(), "what": what, "owner": me()},
        )
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # gone once nothing runs (a refused request leaves no folder)
            folder.rmdir()


def stop_group(proc: subprocess.Popen[bytes], grace_s: float) -> int | None:
    """Stop a process that leads its own group: SIGTERM to the group, `grace_s` to end, then SIGKILL; its code."""
    for sig, grace in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue
    return proc.returncode


def kill_left_over(worktrees_dir: Path) -> list[dict[str, Any]]:
    """Kill the groups of recorded processes whose relay is gone (still running: killed; ended: forgotten)."""
    killed: list[dict[str, Any]] = []
    folder = worktrees_dir / PROCS
    if not folder.is_dir():
        return killed
    for path in folder.glob("*.json"):
        found = _read(path)
        if found is None:
            path.unlink(missing_ok=True)
            continue
        if _alive(found.get("owner") or {}):
            continue
        if _alive(found):
            pid = int(found["pid"])
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            deadline = time.monotonic() + GONE_WAIT_S
            while procinfo.group_members(pid) and time.monotonic() < deadline:
                time.sleep(GONE_STEP_S)
            killed.append(found)
        path.unlink(missing_ok=True)
    return killed


@contextlib.contextmanager
def creating(worktrees_dir: Path, job_id: str) -> Generator[None]:
    """While inside: the worktree of `job_id` is being made by this relay (see `being_made`)."""
    path = worktrees_dir / CREATING / job_id
    _write(path, me())
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            path.parent.rmdir()


def being_made(worktrees_dir: Path, job_id: str) -> bool:
    """Whether a live relay is making the worktree of `job_id` now."""
    found = _read(worktrees_dir / CREATING / job_id)
    return found is not None and _alive(found)


def forget_creating(worktrees_dir: Path, job_id: str) -> None:
    """The mark of a creation whose relay is gone (its sweep took the worktree back)."""
    (worktrees_dir / CREATING / job_id).unlink(missing_ok=True)


def command_env(
    environ: Mapping[str, str], pass_env: tuple[str, ...] = (), extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a setup command or a land gate (code an agent may have written): the allowlist agents get
    (BASE_ENV_ALLOWLIST, LC_*), the names the person passes (`[workspaces] pass_env`) and the values the person sets
    (`[workspaces] env`); never the rest of relay's own: principals' bearer tokens, vendor keys, RELAY_* settings."""
    names = set(BASE_ENV_ALLOWLIST) | set(pass_env)
    env = {key: value for key, value in environ.items() if key in names or key.startswith(BASE_ENV_PREFIXES)}
    env.update(extra or {})
    return env
