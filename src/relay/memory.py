"""Handing freed memory back to the system after a large message.

glibc keeps memory a process has freed in its heaps (one per thread that allocated), so one 10 MB
request would leave relay's RSS up by several times that for good. `malloc_trim(0)` returns the
free parts of every heap, and large blocks get mappings of their own (returned when freed).
Elsewhere (macOS, musl) this is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
from collections.abc import Callable

# A line on the wire at least this long is "large": once it has been answered, freed memory is handed back.
LARGE_MESSAGE_BYTES = 1 << 20

# A block at least this large gets a mapping of its own, handed back to the system the moment it is freed.
MMAP_THRESHOLD_BYTES = 1 << 20
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter

_trim: Callable[[int], int] | None = None
_mallopt: Callable[[int, int], int] | None = None
_looked_up = False


def _look_up() -> None:
    global _trim, _mallopt, _looked_up
    if _looked_up:
        return
    _looked_up = True
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _trim, _mallopt = libc.malloc_trim, libc.mallopt
        except (OSError, AttributeError):
            _trim = _mallopt = None


def map_large_blocks() -> bool:
    """Have glibc give every block of 1 MB or more its own mapping; False where there is no way to.

    By default glibc raises that threshold to the largest block freed so far (up to 32 MB), so after
    one 10 MB request the next ones are carved from a thread's heap, and the free top of a thread's
    heap is something `malloc_trim` does not hand back. A fixed threshold also keeps the heaps'
    trim threshold at its 128 KB default.
    """
    _look_up()
    return _mallopt is not None and _mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1


def release_freed_memory() -> bool:
    """Ask the C allocator to return freed heap memory to the system; False where there is no way to."""
    _look_up()
    # Frames kept alive by a reference cycle (an exception's traceback) can hold the large message: free them first.
    gc.collect()
    if _trim is None:
        return False
    _trim(0)
    return True
