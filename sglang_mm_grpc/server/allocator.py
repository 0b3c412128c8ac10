"""Memory settings for a process that allocates and frees tensors of tens of MB.

By default glibc gives every allocation above its largest dynamic threshold (32 MB) a
fresh ``mmap`` and unmaps it on free, and each worker thread allocates from an arena that
cannot hold more than 64 MB. So each request's output tensor (50 MB for a 1920x1080
Qwen2-VL image) and each payload buffer arrives as untouched pages that the kernel must
fault in and zero: 5-14 ms per 50 MB here, where reusing freed memory costs ~1.5 ms.
With one arena, no mmap below 1 GiB and no trimming below 1 GiB of free heap, freed
tensors are reused by the next request. While calls come, the process keeps its high-water mark of heap, which the server's
bounds (in-flight calls, handle store, cache) already limit; once they stop, the server
gives the free part back (``trim``, after ``IDLE_TRIM_S`` without a call).

Memory that must be new (a tensor the cache keeps) is still faulted in. numpy asks for
transparent huge pages on large arrays; on virtual machines whose host backs guest
memory lazily that made a fresh 50 MB tensor cost ~107 ms of page faults instead of
~17 ms, so the advice is turned off too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib
import logging

log = logging.getLogger(__name__)

#: Seconds without a call in flight after which the server gives freed heap back.
IDLE_TRIM_S = 2.0
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
GiB = 1 << 30


def tune_for_large_tensors() -> bool:
    """Apply the settings (malloc: glibc only, elsewhere unchanged). Call it before the
    worker threads start: a thread keeps the arena it first allocated from. Returns
    whether the malloc settings were applied."""
    _no_huge_page_advice()
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        mallopt, version = libc.mallopt, libc.gnu_get_libc_version
    except (OSError, AttributeError, TypeError):
        return False
    version.restype = ctypes.c_char_p
    ok = all(mallopt(param, value) == 1 for param, value in (
        (_M_ARENA_MAX, 1), (_M_MMAP_THRESHOLD, GiB), (_M_TRIM_THRESHOLD, GiB),
    ))
    log.debug("glibc %s malloc tuned for large tensors: %s", version().decode(), ok)
    return ok


def trim() -> bool:
    """Give the heap's free pages back to the system (glibc ``malloc_trim(0)``: every free
    page, not only the heap's top); False where there is no such call."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        return bool(libc.malloc_trim(0))
    except (OSError, AttributeError, TypeError):
        return False


def _no_huge_page_advice() -> None:
    """numpy's switch for ``madvise(MADV_HUGEPAGE)`` (what ``NUMPY_MADVISE_HUGEPAGE=0``
    sets at import); absent in some numpy versions, then nothing changes."""
    try:
        multiarray = importlib.import_module("numpy._core.multiarray")
    except ImportError:  # numpy 1.x
        multiarray = importlib.import_module("numpy.core.multiarray")
    switch = getattr(multiarray, "_set_madvise_hugepage", None)
    if switch is not None:
        switch(False)
