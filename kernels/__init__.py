"""Numba kernels: pure array in, array out. They know nothing of models or gRPC.

Installed as ``sglang_mm_grpc.kernels``. Every kernel is nopython, ``nogil=True`` and
``cache=True`` so CPU workers run them in parallel threads and a restart skips compilation.

numba checks a cached function against its own source file only, yet a kernel that
calls another module's kernel caches that callee's machine code too: after an edit to
``normalize.py`` alone, ``patchify``'s cache would still hold the old ``normalize_row``.
So the cache lives in a directory named after a digest of every kernel source, and any
edit here starts a fresh one (under ``$NUMBA_CACHE_DIR`` when that is set, else beside
these files, or in the user's cache directory when this directory is read-only).
A cache locator of numba's that claims the files of this directory only puts them there:
numba's own settings, and where other numba code in the process caches, stay as they were.
Entries are stamped with that digest rather than file times, so another checkout of the
same sources, given the same ``$NUMBA_CACHE_DIR``, loads them instead of compiling, and
processes may compile into one cache at once (``compile_locks``).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from numba.core import caching

from . import compile_locks, inline_copy


def sources_digest(sources: Path) -> str:
    """A digest of the ``*.py`` files in ``sources``: their names and contents."""
    digest = hashlib.blake2b(digest_size=8)
    for source in sorted(sources.glob("*.py")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()


def cache_dir(sources: Path, env=os.environ) -> str:
    """Where numba caches the kernels whose sources are the ``*.py`` files in ``sources``."""
    name = f"numba-{sources_digest(sources)}"
    if env.get("NUMBA_CACHE_DIR"):
        return str(Path(env["NUMBA_CACHE_DIR"]) / name)
    local = sources / "__pycache__"
    if os.access(sources, os.W_OK) and (not local.exists() or os.access(local, os.W_OK)):
        return str(local / name)
    return str(Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sglang-mm-grpc" / name)


HERE = Path(__file__).resolve().parent
DIGEST = sources_digest(HERE)
CACHE_DIR = cache_dir(HERE)


class _KernelCacheLocator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
    """numba's cache files of the kernels in this directory (and nothing else) go to ``CACHE_DIR``."""

    def __init__(self, py_func, py_file):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = CACHE_DIR

    def get_cache_path(self) -> str:
        return self._cache_path

    def get_source_stamp(self) -> str:
        """The sources' digest, not numba's file time and size: the same sources in
        another checkout (or installed) find the same entries in a shared cache."""
        return DIGEST

    @classmethod
    def from_function(cls, py_func, py_file):
        if Path(py_file).resolve().parent != HERE:
            return None
        return super().from_function(py_func, py_file)


if _KernelCacheLocator not in caching.CacheImpl._locator_classes:
    caching.CacheImpl._locator_classes.insert(0, _KernelCacheLocator)

inline_copy.install()
compile_locks.install(CACHE_DIR, lambda py_func: Path(py_func.__code__.co_filename).resolve().parent == HERE)


def cached() -> bool:
    """Whether these kernels were compiled into the cache before (a warm start)."""
    return any(Path(CACHE_DIR).rglob("*.nbi"))


def machine() -> str:
    """The CPU the cache's entries are for (numba keys them by its name and features, which
    ``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES`` may set)."""
    from llvmlite import binding

    return repr((binding.get_process_triple(), binding.get_host_cpu_name(),
                 binding.get_host_cpu_features().flatten(), os.environ.get("NUMBA_CPU_NAME"),
                 os.environ.get("NUMBA_CPU_FEATURES")))
