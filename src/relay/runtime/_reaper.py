"""The end of a job's shim when processes outlived its agent: kill every descendant, reap them, exit.

The job shim is a child subreaper, so a descendant orphaned by its parent (even one that called
setsid() to leave the job's process group) re-parents to the shim instead of init. When the shim
finds children left after its agent exited, it execs this script (same pid, still the subreaper):
SIGKILL every live descendant, reap what re-parents to it, repeat until none is left, bounded.
Run as `python -I -S _reaper.py EXIT_CODE`; stdlib only, imports nothing from relay. Linux runtime only
(it reads /proc): the portable runtime's shim ends by killing its group instead (see supervisor.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

# How long to keep killing and reaping before giving up (a process stuck in the kernel, D state).
REAP_BOUND_S = 5.0
# Pause between rounds while killed processes are still exiting.
REAP_STEP_S = 0.005


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="utf-8", errors="replace") as fh:
                raw = fh.read()
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[0] not in ("Z", "X"):
            children.setdefault(int(fields[1]), []).append(int(name))
    found: list[int] = []
    stack = list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, ()))
    return found


def _reap_all() -> bool:
    """Reap every exited child; False once no child is left at all."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def main(exit_code: int) -> int:
    me = os.getpid()
    deadline = time.monotonic() + REAP_BOUND_S
    while True:
        live = _descendants(me)
        for pid in live:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        has_children = _reap_all()
        if (not live and not has_children) or time.monotonic() >= deadline:
            return exit_code
        time.sleep(REAP_STEP_S)


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 0))
