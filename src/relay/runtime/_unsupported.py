"""The runtime where CLI jobs cannot run (Windows): everything else relay does still works.

On Windows relay serves MCP, the model-API tools (ask and the API-backed profiles), the gateway, the
tracker and every other tool that starts no local CLI process. What a CLI job needs and Windows lacks:
POSIX process groups (os.setsid, os.killpg), the `sh` job shim and a way to kill a job's whole process
tree (a Windows runtime would use CREATE_NEW_PROCESS_GROUP and a Job Object, and resolve npm `.cmd`
shims without a shell; the pure parts of that are in `relay.runtime.windows_cmd`). So this runtime
refuses every spawn with one clear RelayError, and its process queries never touch a POSIX-only call:
identity (a start time, alive or not) comes from psutil, which Windows has; group queries are empty,
as no job of this relay ever has a group.
"""

from __future__ import annotations

from relay.errors import ErrorCode, RelayError
from relay.runtime import _portable
from relay.runtime.seam import ExitWatch

# What the refusal tells the user to do instead.
WSL2_HINT = (
    "use WSL2 (relay runs there as on Linux, CLI jobs included); on Windows itself use the model-API tools "
    "(ask, the API-backed profiles), the gateway and the tracker"
)


def cli_jobs_refused(platform: str, missing: str) -> RelayError:
    """The error every CLI job gets on a platform without a job runtime."""
    return RelayError(
        ErrorCode.UNSUPPORTED_PLATFORM,
        f"CLI jobs cannot run on {platform}: relay has no job runtime here ({missing})",
        WSL2_HINT,
    )


class UnsupportedRuntime:
    """No CLI jobs: `check_spawn` refuses; identity through psutil; no process groups."""

    name = "none"
    subreaper = False

    def __init__(self, platform: str, missing: str) -> None:
        self.platform = platform
        self.missing = missing

    def check_spawn(self) -> None:
        raise cli_jobs_refused(self.platform, self.missing)

    boot_id = staticmethod(_portable.boot_id)
    reads_boot_id = staticmethod(_portable.reads_boot_id)
    start_ticks = staticmethod(_portable.start_ticks)
    start_epoch = staticmethod(_portable.start_epoch)
    is_alive = staticmethod(_portable.is_alive)

    def group_members(self, pgid: int) -> list[int]:
        """Empty: there are no process groups here, and no job of this relay has one."""
        return []

    def job_processes(self, leader: int, *, descendants: bool = True) -> list[int]:
        """Empty: no job process was started here."""
        return []

    def watch_exit(self, pid: int, start_ticks: int | None) -> ExitWatch | None:
        """A bounded poll of the process's identity (psutil), None if it is gone."""
        if not _portable.is_alive(pid, start_ticks):
            return None
        return _portable.PollWatch(pid, start_ticks)
