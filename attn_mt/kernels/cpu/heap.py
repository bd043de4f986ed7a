"""glibc's heap settings for CPU training: keep freed memory for reuse, hand the holes back between phases.

By default glibc serves every allocation over 32 MiB (a step's logits on a big vocabulary, their
gradient, the output layer's products) with a fresh mmap, so each training step faults in and
zeroes hundreds of megabytes anew, a large share of a whole-corpus CPU step. Linux with glibc only;
elsewhere these do nothing and say so by returning False.
"""

from __future__ import annotations

import ctypes
import sys


def keep_freed_memory() -> bool:
    """Make glibc keep freed memory for reuse instead of handing it back to the kernel.

    Keeping freed memory (as jemalloc or tcmalloc would) raises peak memory, more so with many batch
    shapes, which fragment the heap (docs/benchmarks.md); `release_freed_memory` returns the holes.
    Returns whether it applied.
    """
    libc = _glibc()
    if libc is None:
        return False
    m_trim_threshold, m_mmap_max = -1, -4
    return bool(libc.mallopt(m_mmap_max, 0)) and bool(libc.mallopt(m_trim_threshold, 1 << 30))


def release_freed_memory() -> bool:
    """Hand the free pages inside glibc's heap back to the kernel (malloc_trim); False off glibc.

    With freed memory kept (keep_freed_memory), batches of many shapes leave free holes in the heap
    that still count as resident, and the process grows through a long run. Called at each
    validation, it returns the holes; the next steps fault back in only what they reuse.
    """
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))


def _glibc() -> ctypes.CDLL | None:
    """The C library on Linux (where keep/release_freed_memory apply), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None
