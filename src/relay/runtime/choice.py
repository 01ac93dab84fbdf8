"""Which runtime serves this process: chosen once, at start-up, from what the platform offers.

`linux` needs os.pidfd_open, /proc and prctl(PR_SET_CHILD_SUBREAPER); `portable` needs psutil and
POSIX process groups, and sees exits through kqueue where select.kqueue exists, else by a bounded
poll. `auto` (the default) takes `linux` when everything it needs is there, else `portable`. The
setting (`RELAY_RUNTIME`, read by relay.config) can force either; forcing one the platform cannot
run is a configuration error at start-up, never a failure of each job.

Windows (and any platform without POSIX process groups) gets a third runtime, `none`
(`_unsupported.py`): relay starts and serves everything that needs no local CLI process, and every CLI
job is refused with one clear error (UNSUPPORTED_PLATFORM, hint: WSL2). This is the one place that
branches on the platform for it (`unsupported_platform()`). WSL2 is Linux.
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
    """What CLI jobs need and this platform lacks (None: nothing); relay still serves everything else."""
    if sys.platform == "win32" or os.name == "nt":
        return "it needs POSIX process groups, a POSIX sh for the job shim and a process-tree kill"
    if not hasattr(os, "killpg"):
        return "it has no POSIX process groups"
    return None


def platform_name() -> str:
    return "Windows" if sys.platform == "win32" or os.name == "nt" else sys.platform


def choose(requested: str = "auto") -> Choice:
    """The runtime for `requested` (auto, linux or portable) on this platform; RelayError if it cannot run here.

    Where CLI jobs cannot run at all (Windows), `auto` gives the `none` runtime, which refuses them.
    """
    if requested not in RUNTIMES:
        raise RelayError(
            ErrorCode.CONFIG_INVALID, f"RELAY_RUNTIME={requested!r} is not a runtime", "use auto, linux or portable"
        )
    lacking = unsupported_platform()
    if lacking is not None:
        if requested != "auto":
            raise RelayError(
                ErrorCode.CONFIG_INVALID,
                f"RELAY_RUNTIME={requested} cannot run on {platform_name()}: {lacking}",
                "unset RELAY_RUNTIME; for CLI jobs run relay inside WSL2, where it works as on Linux",
            )
        from relay.runtime._unsupported import UnsupportedRuntime

        why = f"no CLI jobs on {platform_name()}: {lacking}; model-API tools, the gateway and the tracker work"
        return Choice(UnsupportedRuntime(platform_name(), lacking), requested, why)
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
