"""Run a snippet of python, bash or node in a sandbox: a fresh temp dir, no inherited secrets, limits, no network.

The process is started by the runtime's supervisor (a subreaper shim in its own process group), so
whatever the code starts is killed with it, at its timeout or when its job is cancelled. The
isolation in force (see `isolation.py`) is reported with every outcome.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio

from relay.errors import ErrorCode, RelayError, invalid
from relay.runtime import supervisor
from relay.runtime.invocation import Invocation
from relay.runtime.supervisor import JobFiles
from relay.sandbox.isolation import Isolation, bwrap_argv, detect, private_folders

LANGUAGES = ("python", "bash", "node")
ALIASES = {
    "python": "python",
    "python3": "python",
    "py": "python",
    "bash": "bash",
    "sh": "bash",
    "shell": "bash",
    "node": "node",
    "nodejs": "node",
    "javascript": "node",
    "js": "node",
}
SUFFIXES = {"python": ".py", "bash": ".sh", "node": ".js"}
DEFAULT_TIMEOUT_S = 30
MAX_TIMEOUT_S = 600
MAX_CODE_CHARS = 1_000_000
# What comes back of stdout/stderr (the rest is cut, and `truncated` says so).
MAX_OUTPUT_CHARS = 200_000
# Address space, largest file written, open files: generous for scripts, fatal for runaway ones.
MEMORY_BYTES = 1 << 30
FILE_BYTES = 64 << 20
OPEN_FILES = 256
# CPU seconds beyond the wall-clock timeout before the kernel stops a busy loop itself.
CPU_MARGIN_S = 2
# After SIGTERM at the timeout, how long before SIGKILL (snippets have nothing to save).
KILL_GRACE_S = 0.5
# How often the wait wakes to check the deadline (exit itself is seen at once).
POLL_S = 0.1
# The run's own wall-clock kill (coreutils `timeout`), this long after its timeout: it ends the run even
# when relay itself died meanwhile and nobody is left to enforce the timeout.
BACKSTOP_S = 5.0
LIMITS_SCRIPT = Path(__file__).with_name("_limits.py")
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
# The runs' folders live in one folder of relay's that the code's user may pass through but not list:
# a run cannot find another run's folder (its code and inputs), as it could in the machine-wide /tmp.
RUNS_DIR_MODE = 0o711


@dataclass(frozen=True)
class Outcome:
    """How a sandboxed run ended; `result` is its stdout."""

    success: bool
    result: str
    language: str
    execution_time: float
    exit_code: int | None
    stderr: str
    timed_out: bool
    isolation: str
    isolation_details: str
    network: bool
    timeout_s: float
    cannot_stop: tuple[str, ...] = ()
    truncated: bool = False
    limits: dict[str, int] = field(default_factory=lambda: {})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def language_of(name: str) -> str:
    """The canonical language for `name` (python, bash or node; common aliases accepted)."""
    found = ALIASES.get(name.strip().lower())
    if found is None:
        raise invalid(f"language {name!r} is not supported", f"use one of: {', '.join(LANGUAGES)}")
    return found


def check_timeout(timeout: float | None) -> float:
    value = DEFAULT_TIMEOUT_S if timeout is None else timeout
    if not 0 < value <= MAX_TIMEOUT_S:
        raise invalid(f"timeout {value} is outside 1..{MAX_TIMEOUT_S} seconds", "omit timeout for 30 seconds")
    return float(value)


def check_code(code: str) -> None:
    if not code.strip():
        raise invalid("code is empty", "pass the code to run")
    if len(code) > MAX_CODE_CHARS or "\x00" in code:
        raise invalid(f"code is over {MAX_CODE_CHARS} characters or holds NUL bytes", "run a smaller snippet")


def interpreter(language: str) -> list[str]:
    """The command that runs a file of `language` (raises when its interpreter is not installed)."""
    if language == "python":
        # The system's python (nothing of relay's virtualenv in reach) when there is one.
        return [shutil.which("python3", path=SAFE_PATH) or sys.executable, "-I"]
    name = "bash" if language == "bash" else "node"
    path = shutil.which(name, path=SAFE_PATH) or shutil.which(name)
    if path is None:
        install = "install bash" if name == "bash" else "install Node.js (node on PATH)"
        raise RelayError(ErrorCode.AGENT_NOT_INSTALLED, f"{name} is not installed here", install)
    return [path, "--noprofile", "--norc"] if name == "bash" else [path]


def limits_for(timeout_s: float) -> dict[str, list[int]]:
    cpu = int(timeout_s) + CPU_MARGIN_S
    return {
        "RLIMIT_CPU": [cpu, cpu + 1],
        "RLIMIT_AS": [MEMORY_BYTES, MEMORY_BYTES],
        "RLIMIT_FSIZE": [FILE_BYTES, FILE_BYTES],
        "RLIMIT_NOFILE": [OPEN_FILES, OPEN_FILES],
        "RLIMIT_CORE": [0, 0],
    }


def child_env(workdir: Path) -> dict[str, str]:
    """The whole environment the code sees: nothing of relay's (no keys, no tokens)."""
    return {
        "PATH": SAFE_PATH,
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
        "TMP": str(workdir),
        "TEMP": str(workdir),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
    }


def runs_dir() -> Path:
    """The folder the runs' own folders are made in (`relay-sandbox-<uid>` in the temp dir, mode 0711)."""
    uid = os.geteuid() if hasattr(os, "geteuid") else 0
    base = Path(tempfile.gettempdir()) / f"relay-sandbox-{uid}"
    with contextlib.suppress(FileExistsError):
        base.mkdir(mode=RUNS_DIR_MODE)
    info = os.lstat(base)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
        raise RelayError(
            ErrorCode.CONFIG_INVALID,
            f"{base} is not a folder of relay's user: sandboxed runs will not start in it",
            f"remove {base} (another user may have made it to read the runs), then run the code again",
        )
    if stat.S_IMODE(info.st_mode) != RUNS_DIR_MODE:
        os.chmod(base, RUNS_DIR_MODE)
    return base


def _read(path: Path) -> tuple[str, bool]:
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_OUTPUT_CHARS * 4 + 1)
    except OSError:
        return "", False
    text = raw.decode("utf-8", "replace")
    cut = len(raw) > MAX_OUTPUT_CHARS * 4 or len(text) > MAX_OUTPUT_CHARS
    return text[:MAX_OUTPUT_CHARS], cut


def _strip_newline(text: str) -> str:
    return text[:-1] if text.endswith("\n") else text


@dataclass(frozen=True)
class _Prepared:
    workdir: Path
    invocation: Invocation
    files: JobFiles
    isolation: Isolation


def _prepare(
    code: str,
    lang: str,
    timeout_s: float,
    out_dir: Path,
    environ: Mapping[str, str],
    hidden: Sequence[Path],
    inputs: Mapping[str, bytes],
) -> _Prepared:
    """In a worker thread: the isolation, a fresh temp dir holding the code and its inputs, the command line."""
    program, *flags = interpreter(lang)
    # The interpreter's own file, through any link: bubblewrap shows its folder and nothing around it.
    command = [os.path.realpath(program), *flags]
    iso = detect(environ)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = JobFiles(out_dir)
    for stale in (files.stdout, files.stderr, files.exit, files.pid):
        stale.unlink(missing_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="relay-exec-", dir=runs_dir())).resolve()
    script = workdir / f"main{SUFFIXES[lang]}"
    script.write_text(code, encoding="utf-8")
    for name, data in inputs.items():
        (workdir / name).write_bytes(data)
    if iso.drop_uid is not None:
        for path in (workdir, *workdir.iterdir()):
            os.chown(path, iso.drop_uid, iso.drop_uid)
    os.chmod(workdir, 0o700)
    env = child_env(workdir)
    private = private_folders(environ, hidden)
    inner = bwrap_argv(iso, workdir, env, private, [*command, str(script)])
    backstop = shutil.which("timeout", path=SAFE_PATH)
    if backstop is not None:
        inner = [backstop, "-s", "KILL", f"{timeout_s + BACKSTOP_S:g}", *inner]
    head = [json.dumps(limits_for(timeout_s))]
    if iso.drop_uid is not None and iso.bwrap is None:  # under bubblewrap, setpriv drops inside the sandbox
        head += ["--uid", str(iso.drop_uid)]
    argv = (sys.executable, "-I", "-S", str(LIMITS_SCRIPT), *head, "--", *inner)
    return _Prepared(workdir, Invocation(argv, env, str(workdir)), files, iso)


def _outcome(
    prep: _Prepared, lang: str, timeout_s: float, elapsed: float, exit_code: int | None, timed_out: bool
) -> Outcome:
    stdout, cut_out = _read(prep.files.stdout)
    stderr, cut_err = _read(prep.files.stderr)
    if timed_out:
        stderr = (stderr + "\n" if stderr else "") + f"execution timed out after {timeout_s:g} seconds"
    shutil.rmtree(prep.workdir, ignore_errors=True)
    return Outcome(
        success=exit_code == 0 and not timed_out,
        result=_strip_newline(stdout),
        language=lang,
        execution_time=round(elapsed, 3),
        exit_code=exit_code,
        stderr=stderr,
        timed_out=timed_out,
        isolation=prep.isolation.mode,
        isolation_details=prep.isolation.describe(),
        network=prep.isolation.network,
        timeout_s=timeout_s,
        cannot_stop=prep.isolation.cannot_stop,
        truncated=cut_out or cut_err,
        limits={k: v[0] for k, v in limits_for(timeout_s).items()},
    )


async def run_code(
    code: str,
    language: str,
    timeout_s: float,
    out_dir: Path,
    *,
    environ: Mapping[str, str],
    hidden: Sequence[Path] = (),
    inputs: Mapping[str, bytes] | None = None,
) -> Outcome:
    """Run `code` to its end or its timeout; its output files go to `out_dir`. Cancelling kills it too."""
    lang = language_of(language)
    check_code(code)
    prep = await anyio.to_thread.run_sync(_prepare, code, lang, timeout_s, out_dir, environ, hidden, inputs or {})
    started = time.monotonic()
    try:
        proc = await anyio.to_thread.run_sync(supervisor.spawn, prep.invocation, prep.files)
    except BaseException:
        shutil.rmtree(prep.workdir, ignore_errors=True)
        raise
    timed_out = finished = False
    try:
        deadline = started + timeout_s
        while not await proc.wait_exit(POLL_S):
            if time.monotonic() >= deadline:
                timed_out = True
                break
        finished = True
    finally:
        # Reached at the timeout, at exit, and when the job is cancelled: nothing of the run survives it.
        with anyio.CancelScope(shield=True):
            if timed_out or not await proc.wait_exit(0):
                await proc.kill_group(KILL_GRACE_S)
            proc.reap_group()
            proc.close()
            if not finished:
                shutil.rmtree(prep.workdir, ignore_errors=True)
    exit_code = None if timed_out else proc.exit_code()
    elapsed = time.monotonic() - started
    return await anyio.to_thread.run_sync(_outcome, prep, lang, timeout_s, elapsed, exit_code, timed_out)
