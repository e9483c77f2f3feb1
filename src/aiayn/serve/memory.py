"""Resident memory that stays flat under steady load.

Continuous batching makes tensors of a new size at almost every step (the cache is repacked as rows join and
leave). glibc's malloc serves large blocks with ``mmap`` and returns them to the system when freed, but by default
it raises that threshold to the size of each such block freed (up to 32 MiB), after which blocks of those sizes
come from the heap instead, where freed holes of many sizes stay resident: the server's memory then grew by 12%
in ten minutes of steady load (``benchmarks/results/serve_soak.json`` has the figure after the fix). Fixing the
threshold (as ``MALLOC_MMAP_THRESHOLD_`` does) keeps every large block on ``mmap``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
THRESHOLD = 128 * 1024  # glibc's initial value, kept


def fix_mmap_threshold() -> bool:
    """Fix glibc's mmap threshold at :data:`THRESHOLD` for this process; ``False`` where there is no glibc."""
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        return bool(libc.mallopt(M_MMAP_THRESHOLD, THRESHOLD))
    except (OSError, AttributeError):  # musl and others: no mallopt
        return False


__all__ = ["fix_mmap_threshold"]
