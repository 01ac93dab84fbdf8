"""What the fake agent CLIs share: recordings, prompt directives, the argv log, and misbehaviour on demand.

Directives ride in the prompt (argv or stdin) as `[[fake:key=value,flag,...]]`; several blocks merge.
Common ones (each fake documents its own extras):
  replay=NAME      recording to replay (file name, with or without its extension)
  exit=N           exit with N instead of the exit code the real CLI gives for that recording
  sleep=S          sleep S seconds at the fake's pause point (after the session is announced)
  until=PATH       wait at the pause point until PATH exists (at most UNTIL_MAX_S), as a test's gate
  hang             stop at the pause point and never finish
  ignore_term      ignore SIGTERM
  stderr=TEXT      write TEXT to stderr first
  noise            write the CLI's usual harmless notices to stderr
  echo             answer with the prompt instead of the recorded text
  missing_session  fail the way the CLI does when the resumed session does not exist
  pidfile=PATH     write this process's pid to PATH
  write=F~TEXT     write TEXT (\n for a newline) to file F under the cwd, as an agent's edit; `;` between files
Env FAKE_ARGV_LOG: append {"argv", "cwd", "prompt", "env"} as one JSON line to that file.
Env FAKE_GOLDEN_DIR: one more folder of recordings, searched after tests/fakes/recordings.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def recording_dirs() -> list[Path]:
    extra = os.environ.get("FAKE_GOLDEN_DIR")
    return [HERE / "recordings", *([Path(extra)] if extra else [])]


def find_recording(name: str, suffixes: tuple[str, ...]) -> Path:
    for folder in recording_dirs():
        for suffix in ("", *suffixes):
            candidate = folder / f"{name}{suffix}"
            if candidate.is_file():
                return candidate
    raise SystemExit(f"{Path(sys.argv[0]).name} (fake): no recording named {name!r}")


def directives(text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for block in re.findall(r"\[\[fake:([^\]]*)\]\]", text):
        for part in block.split(","):
            key, _, value = part.strip().partition("=")
            if key:
                found[key] = value
    return found


def read_stdin() -> str:
    return "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()


def log_argv(argv: list[str], prompt: str, env_prefixes: tuple[str, ...]) -> None:
    path = os.environ.get("FAKE_ARGV_LOG")
    if not path:
        return
    env = {k: v for k, v in os.environ.items() if k.startswith((*env_prefixes, "RELAY_", "FAKE_"))}
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"argv": argv, "cwd": os.getcwd(), "prompt": prompt, "env": env}) + "\n")


def prepare(opts: dict[str, str], noise: tuple[str, ...]) -> None:
    """Apply the directives that act before any output: signals, pidfile, stderr text."""
    if "ignore_term" in opts:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if opts.get("pidfile"):
        Path(opts["pidfile"]).write_text(str(os.getpid()))
    if "noise" in opts:
        for line in noise:
            err(line)
    if "stderr" in opts:
        err(opts["stderr"])
    write_files(opts)


def write_files(opts: dict[str, str]) -> None:
    """The `write=` directive: edit files under the cwd the way an agent with edit permission would."""
    for item in filter(None, opts.get("write", "").split(";")):
        name, _, text = item.partition("~")
        path = Path(os.getcwd(), name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("\\n", "\n"), encoding="utf-8")


def pause(opts: dict[str, str]) -> None:
    if "hang" in opts:
        hang()
    if opts.get("sleep"):
        time.sleep(float(opts["sleep"]))
    if opts.get("until"):
        wait_until(Path(opts["until"]))


# The longest a fake waits for its `until=` gate before it goes on (a test that never opens it fails anyway).
UNTIL_MAX_S = 120.0


def wait_until(gate: Path) -> None:
    deadline = time.monotonic() + UNTIL_MAX_S
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def hang() -> None:
    while True:
        time.sleep(3600)


def emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def err(text: str) -> None:
    sys.stderr.write(text if text.endswith("\n") else text + "\n")
    sys.stderr.flush()


def exit_code(opts: dict[str, str], default: int) -> int:
    return int(opts["exit"]) if opts.get("exit") else default


def flag_value(argv: list[str], *names: str) -> str | None:
    """The value of `--name value` or `--name=value` (first match), or None."""
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(name + "=") and name.startswith("--"):
                return arg[len(name) + 1 :]
    return None
