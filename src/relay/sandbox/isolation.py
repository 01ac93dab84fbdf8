"""Which isolation a sandboxed run gets on this machine, and the command line that applies it.

bubblewrap (`bwrap`) when it is installed and works here: a read-only view of the system, only the
run's temp directory writable, relay's home and the user's home hidden, no network, its own pid
namespace (killing it kills everything inside). Without it: resource limits, a scrubbed
environment, and (when relay runs as root) a drop to the `nobody` user.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# RELAY_SANDBOX_BWRAP=0 turns bubblewrap off (e.g. to compare); any other value, or none, uses it when it works.
BWRAP_ENV = "RELAY_SANDBOX_BWRAP"
# How long the one-time probe of bubblewrap may take.
PROBE_TIMEOUT_S = 10.0
# The unprivileged user code runs as when relay is root and bubblewrap is not available.
NOBODY_UID = 65534

BUBBLEWRAP = "bubblewrap"
UID_DROP = "rlimits+nobody"
RLIMITS_ONLY = "rlimits"


@dataclass(frozen=True)
class Isolation:
    """What a run is isolated with: `mode` is bubblewrap, rlimits+nobody or rlimits."""

    mode: str
    bwrap: str | None = None
    drop_uid: int | None = None

    @property
    def network(self) -> bool:
        """Whether the code can reach the network."""
        return self.bwrap is None

    def describe(self) -> str:
        if self.bwrap:
            return "bubblewrap: read-only filesystem except the temp dir, homes hidden, no network, own pid namespace"
        if self.drop_uid is not None:
            return (
                "no bubblewrap: resource limits, scrubbed environment, a private temp folder, runs as user nobody "
                "(relay's home is private to relay's user); cannot stop: " + "; ".join(self.cannot_stop)
            )
        return (
            "no bubblewrap: resource limits, a scrubbed environment and a private temp folder only (install "
            "bubblewrap for more); cannot stop: " + "; ".join(self.cannot_stop)
        )

    @property
    def cannot_stop(self) -> tuple[str, ...]:
        """What code in this sandbox can still do that a stronger one would stop (nothing listed for bubblewrap)."""
        if self.bwrap:
            return ()
        gaps = (
            "the network, loopback included (services on 127.0.0.1, relay's own HTTP port among them)",
            "reading files every user may read",
            "writing the machine's shared temp folders (/tmp, /dev/shm)",
        )
        if self.drop_uid is None:
            gaps = ("reading and writing all that relay's user can, RELAY_HOME included", *gaps)
        return gaps


@functools.cache
def _bwrap_works(path: str) -> bool:
    try:
        done = subprocess.run(
            [path, *_namespace_flags(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _namespace_flags() -> list[str]:
    return ["--unshare-all", "--die-with-parent", "--new-session"]


def detect(environ: Mapping[str, str]) -> Isolation:
    """The strongest isolation available here (probing bubblewrap once per process)."""
    wanted = environ.get(BWRAP_ENV, "1").strip().lower() not in ("0", "false", "no", "off")
    path = shutil.which("bwrap") if wanted else None
    if path and _bwrap_works(path):
        return Isolation(BUBBLEWRAP, bwrap=path)
    if getattr(os, "geteuid", lambda: -1)() == 0:  # no user ids to drop where there is no geteuid (Windows)
        return Isolation(UID_DROP, drop_uid=NOBODY_UID)
    return Isolation(RLIMITS_ONLY)


def bwrap_argv(
    iso: Isolation,
    workdir: Path,
    env: Mapping[str, str],
    hidden: Sequence[Path],
    keep: Sequence[Path],
    command: Sequence[str],
) -> list[str]:
    """`command` wrapped in bubblewrap (or unchanged without it): `workdir` writable, `hidden` folders empty.

    A hidden folder that holds one of the `keep` paths (the interpreter) stays visible.
    """
    if iso.bwrap is None:
        return list(command)
    argv = [iso.bwrap, *_namespace_flags(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    argv += ["--tmpfs", "/tmp"]
    for folder in hidden:
        resolved = folder.resolve()
        # Never hide the root, or a folder the run's own directory lives in.
        needed = [workdir, *keep]
        if resolved != Path("/") and resolved.is_dir() and not any(p.is_relative_to(resolved) for p in needed):
            argv += ["--tmpfs", str(resolved)]
    argv += ["--bind", str(workdir), str(workdir), "--chdir", str(workdir), "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return [*argv, "--", *command]
