"""Which runtime serves this process: chosen once, at start-up, from what the platform offers.

`linux` needs os.pidfd_open, /proc and prctl(PR_SET_CHILD_SUBREAPER); `portable` needs psutil and
POSIX process groups, and sees exits through kqueue where select.kqueue exists, else by a bounded
poll. `auto` (the default) takes `linux` when everything it needs is there, else `portable`. The
setting (`RELAY_RUNTIME`, read by relay.config) can force either; forcing one the platform cannot
run is a configuration error at start-up, never a failure of each job.

Windows is not a platform relay runs on natively (no POSIX process groups, no `sh` shim): see
`unsupported_platform()`. WSL2 is Linux.
"""

from __future__ import annotations

import ctypes
import os
import select
import sys
from dataclasses import dataclass
from pathlib import Path

from relay.config import RUNTIMES
from relay.errors import ErrorCode, RelayError
from relay.runtime.seam import Runtime


@dataclass(frozen=True)
class Choice:
    """The runtime in use and why (what `relay doctor` prints)."""

    runtime: Runtime
    requested: str
    reason: str

    @property
    def name(self) -> str:
        return self.runtime.name


def _has_prctl() -> bool:
    try:
        return hasattr(ctypes.CDLL(None), "prctl")
    except OSError:
        return False


def linux_missing() -> str | None:
    """What the Linux runtime needs and this platform lacks (None: nothing)."""
    if not sys.platform.startswith("linux"):
        return f"the platform is {sys.platform}, not Linux"
    if not hasattr(os, "pidfd_open"):
        return "os.pidfd_open is missing (Linux 5.3+ and Python 3.9+ have it)"
    if not Path("/proc/self/stat").exists():
        return "/proc is not mounted"
    if not _has_prctl():
        return "prctl() cannot be called"
    return None


def unsupported_platform() -> str | None:
    """Why relay cannot run on this platform at all (None: it can)."""
    if sys.platform == "win32" or os.name == "nt":
        return "relay does not run natively on Windows (it needs POSIX process groups and a POSIX sh)"
    if not hasattr(os, "killpg"):
        return f"{sys.platform} has no POSIX process groups"
    return None


def choose(requested: str = "auto") -> Choice:
    """The runtime for `requested` (auto, linux or portable) on this platform; RelayError if it cannot run here."""
    if requested not in RUNTIMES:
        raise RelayError(
            ErrorCode.CONFIG_INVALID, f"RELAY_RUNTIME={requested!r} is not a runtime", "use auto, linux or portable"
        )
    fatal = unsupported_platform()
    if fatal is not None:
        raise RelayError(ErrorCode.CONFIG_INVALID, fatal, "run relay inside WSL2, where it works as on Linux")
    missing = linux_missing()
    if requested == "linux" and missing is not None:
        raise RelayError(
            ErrorCode.CONFIG_INVALID,
            f"RELAY_RUNTIME=linux cannot run here: {missing}",
            "unset RELAY_RUNTIME (or set it to portable) to use the portable runtime",
        )
    if requested != "portable" and missing is None:
        from relay.runtime._linux import LinuxRuntime

        why = "forced by RELAY_RUNTIME=linux" if requested == "linux" else "this is Linux with pidfd, /proc and prctl"
        return Choice(LinuxRuntime(), requested, why + "; exits seen through a pidfd, the shim is a child subreaper")
    from relay.runtime._portable import PortableRuntime

    kqueue = hasattr(select, "kqueue")
    why = "forced by RELAY_RUNTIME=portable" if requested == "portable" else str(missing)
    waits = "exits seen through kqueue" if kqueue else "exits seen by a bounded poll (no kqueue here)"
    return Choice(PortableRuntime(kqueue=kqueue), requested, f"{why}; {waits}, no child subreaper")


_active: Choice | None = None


def use(requested: str = "auto") -> Choice:
    """Choose the runtime for this process (at start-up: the job engine calls this once as it is built)."""
    global _active
    _active = choose(requested)
    return _active


def active() -> Choice:
    """The runtime chosen at start-up; code that runs before any engine (a lone spawn) gets `auto`'s choice."""
    return _active if _active is not None else use("auto")


def reset() -> None:
    """Forget the choice (tests: the next `active()` chooses again)."""
    global _active
    _active = None
