"""Numba kernels: pure array in, array out. They know nothing of models or gRPC.

Installed as ``sglang_mm_grpc.kernels``. Every kernel is nopython, ``nogil=True`` and
``cache=True`` so CPU workers run them in parallel threads and a restart skips compilation.

numba checks a cached function against its own source file only, yet a kernel that
calls another module's kernel caches that callee's machine code too: after an edit to
``normalize.py`` alone, ``patchify``'s cache would still hold the old ``normalize_row``.
So the cache lives in a directory named after a digest of every kernel source, and any
edit here starts a fresh one (under ``$NUMBA_CACHE_DIR`` when that is set, else beside
these files, or in the user's cache directory when this directory is read-only).
numba has one cache directory per process, so other cached numba code in a process that
imports these kernels is cached there too.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numba


def cache_dir(sources: Path, env=os.environ) -> str:
    """Where numba caches the kernels whose sources are the ``*.py`` files in ``sources``."""
    digest = hashlib.blake2b(digest_size=8)
    for source in sorted(sources.glob("*.py")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    name = f"numba-{digest.hexdigest()}"
    if env.get("NUMBA_CACHE_DIR"):
        return str(Path(env["NUMBA_CACHE_DIR"]) / name)
    local = sources / "__pycache__"
    if os.access(sources, os.W_OK) and (not local.exists() or os.access(local, os.W_OK)):
        return str(local / name)
    return str(Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sglang-mm-grpc" / name)


numba.config.CACHE_DIR = cache_dir(Path(__file__).resolve().parent)


def cached() -> bool:
    """Whether these kernels were compiled into the cache before (a warm start)."""
    return any(Path(numba.config.CACHE_DIR).rglob("*.nbi"))
