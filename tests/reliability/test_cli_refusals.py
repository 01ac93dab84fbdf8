"""`relay run` refusals at submit time: one line on stderr, its own exit status, no job recorded, no traceback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from relay.store import Store
from tests.reliability.conftest import ADVERSARIAL, RELAY, relay_env

CASES = {
    "invalid UTF-8 prompt": (["claude", b"\xff".decode("utf-8", "surrogateescape")], {}, "INVALID_ARGUMENT", 2),
    "invalid UTF-8 inside a prompt": (
        ["claude", "ok" + b"\xfe".decode("utf-8", "surrogateescape")],
        {},
        "INVALID_ARGUMENT",
        2,
    ),
    "unknown agent": (["nosuchagent", "hi"], {}, "AGENT_UNKNOWN", 2),
    "depth limit": (["claude", "hi"], {"RELAY_DEPTH": "2", "RELAY_MAX_DEPTH": "2"}, "LIMIT_REACHED", 2),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_refused_relay_run_is_one_line_and_its_exit_status(case: str, relay_home: Path, workdir: Path) -> None:
    argv, env, code, status = CASES[case]
    (relay_home / "config.toml").write_text(f'[agents.claude]\ncommand = "{ADVERSARIAL}"\n')
    out = subprocess.run(
        [os.fsencode(RELAY), b"run", *(os.fsencode(a) for a in argv), b"--cwd", os.fsencode(workdir)],
        env=relay_env(relay_home, **env),
        cwd=workdir,
        capture_output=True,
        timeout=60,
    )
    stderr = out.stderr.decode("utf-8", "replace")
    lines = stderr.strip().splitlines()
    assert (len(lines), out.returncode, out.stdout) == (1, status, b""), stderr
    assert lines[0].startswith(f"relay: {code}: ") and " — hint: " in lines[0]
    assert Store(relay_home / "relay.db").list_jobs() == []
