"""Several processes compiling into one kernel cache at once, safely and each kernel once.

A first start compiles in parallel processes (and a test run's workers, or two servers,
may start together), all writing the same cache directory. numba's cache is not made for
that: ``IndexDataCacheFile.save`` reads a function's index, picks the first free data
file name and writes both back, so two processes saving two signatures of one function
can both pick ``1``, and the index can end up naming the other signature's machine code.
And two processes needing the same kernel would both spend its minute compiling it.

So, for the kernels in this directory:
- a save holds an exclusive ``flock`` on its index (``<index>.lock``): read, pick, write
  are one step across processes;
- compiling one signature of one kernel holds a ``flock`` on a file named after the two
  (under ``locks/`` in the cache directory): a second process needing it waits, then
  finds it in the cache and loads it. Taken inside numba's own compiler lock, so threads
  of one process never wait on each other's file locks.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import threading
from pathlib import Path

from numba.core import caching, dispatcher, sigutils
from numba.core.compiler_lock import global_compiler_lock

_held = threading.local()  # the signature locks this thread holds (a nested compile)


@contextlib.contextmanager
def _flock(path: Path):
    """An exclusive flock on ``path``; none where it cannot be made (a read-only cache
    compiles nothing into it anyway)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(path, "a+b")
    except OSError:
        yield
        return
    with f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _signature_key(disp, sig) -> str:
    """numba's own cache key of the signature (types, CPU, and digests of the bytecode
    and of the closure's values: each ``_specialized`` geometry is its own kernel), with
    the kernel's name."""
    key = disp._cache._index_key(sig, disp.targetctx.codegen())
    text = repr((disp.py_func.__module__, disp.py_func.__qualname__, key))
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def install(cache_dir: str, is_kernel) -> None:
    """Once per process. ``is_kernel(py_func)``: a function whose cache is ``cache_dir``."""
    compile_one = dispatcher.Dispatcher.compile
    save = caching.IndexDataCacheFile.save
    if getattr(compile_one, "_kernel_locks", False):
        return

    def compile_locked(self, sig):
        if (tuple(sigutils.normalize_signature(sig)[0]) in self.overloads  # compiled in this process already
                or not isinstance(self._cache, caching.Cache) or not is_kernel(self.py_func)):  # not cached here
            return compile_one(self, sig)
        with global_compiler_lock:
            key = _signature_key(self, sig)
            held = _held.__dict__.setdefault("keys", set())
            if key in held:
                return compile_one(self, sig)
            with _flock(Path(cache_dir) / "locks" / key):
                held.add(key)
                try:
                    return compile_one(self, sig)
                finally:
                    held.discard(key)

    def save_locked(self, key, data):
        if os.path.dirname(self._index_path) != cache_dir:
            return save(self, key, data)
        with _flock(Path(self._index_path + ".lock")):
            return save(self, key, data)

    compile_locked._kernel_locks = True  # type: ignore[attr-defined]
    compile_locked.__wrapped__ = compile_one  # type: ignore[attr-defined]
    save_locked.__wrapped__ = save  # type: ignore[attr-defined]
    dispatcher.Dispatcher.compile = compile_locked
    caching.IndexDataCacheFile.save = save_locked
