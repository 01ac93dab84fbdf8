"""`relay jobs --watch`: the jobs table redrawn in place on a terminal until Ctrl-C."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

# How often the table is read again and redrawn.
WATCH_INTERVAL_S = 1.0
HOME_AND_CLEAR = "\x1b[H\x1b[2J"


def watch(render: Callable[[], str], out: TextIO, interval_s: float = WATCH_INTERVAL_S) -> int:
    """Redraw `render()` every `interval_s` until interrupted; returns the exit code (0)."""
    try:
        while True:
            stamp = time.strftime("%H:%M:%S")
            out.write(f"{HOME_AND_CLEAR}relay jobs · {stamp} · every {interval_s:g}s · Ctrl-C to stop\n\n{render()}\n")
            out.flush()
            time.sleep(interval_s)
    except KeyboardInterrupt:
        out.write("\n")
        out.flush()
        return 0
