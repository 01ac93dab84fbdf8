"""Handing freed memory back to the system after a large message.

glibc keeps memory a process has freed in its heaps (one per thread that allocated), so one 10 MB
request would leave relay's RSS up by several times that for good. `malloc_trim(0)` returns the
free parts of every heap. Elsewhere (macOS, musl) this is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
from collections.abc import Callable

# A line on the wire at least this long is "large": once it has been answered, freed memory is handed back.
LARGE_MESSAGE_BYTES = 1 << 20

_trim: Callable[[int], int] | None = None
_looked_up = False


def release_freed_memory() -> bool:
    """Ask the C allocator to return freed heap memory to the system; False where there is no way to."""
    global _trim, _looked_up
    if not _looked_up:
        _looked_up = True
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                _trim = libc.malloc_trim
            except (OSError, AttributeError):
                _trim = None
    # Frames kept alive by a reference cycle (an exception's traceback) can hold the large message: free them first.
    gc.collect()
    if _trim is None:
        return False
    _trim(0)
    return True
