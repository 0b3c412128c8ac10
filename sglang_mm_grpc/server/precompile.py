"""A cold first start compiles the kernels in parallel processes, and says how it goes.

Each process warms every model (compiling what the cache lacks, loading the rest), in
its own order, so they start on different kernels; ``kernels.compile_locks`` makes a
kernel that two of them need compile once while the other waits for it. The resampling
passes, which most models' other kernels call, go first, split between two processes,
after the payload serializer's conversions (small, and needed by every model). Each
model is reported ready as soon as one process has warmed it: the server loads it from
the cache then and serves it while the others compile.

A helper process runs ``main`` (``PART PARTS [--processor P] SPEC...``); it prints
``warm SPEC`` as each model is done.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

log = logging.getLogger("sglang_mm_grpc.server")

#: At most this many processes compile (each holds a model's kernels being compiled).
MAX_PROCESSES = 4
#: Seconds between progress lines.
PROGRESS_EVERY_S = 10.0


_HELPER = f"import sys; from {__name__} import main; main(sys.argv[1:])"


def default_processes() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_PROCESSES))


def warm_marker(fingerprint: str) -> Path:
    """The file that says every kernel of a model with this family fingerprint is in the
    cache for this CPU (numba keys its entries by the CPU's name and features too)."""
    from ..kernels import CACHE_DIR, machine

    key = f"{fingerprint}|{machine()}"
    return Path(CACHE_DIR) / "warm" / hashlib.blake2b(key.encode(), digest_size=12).hexdigest()


def mark_warm(fingerprint: str) -> None:
    """Record that a model with this fingerprint was warmed (its kernels are cached)."""
    marker = warm_marker(fingerprint)
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    except OSError:  # a read-only cache: the next start goes the helpers' way again
        pass


def rotated(specs: list[str], part: int, parts: int) -> list[str]:
    """Every spec, part ``part`` of ``parts`` starting its share of the way along."""
    start = part * len(specs) // parts
    return specs[start:] + specs[:start]


def warm_part(specs: list[str], part: int, parts: int, processor: str | None, done=print) -> None:
    """Warm every model in part ``part``'s order, calling ``done(spec)`` after each."""
    from ..kernels import resample_pil, wirecast
    from ..pipeline.driver import Preprocessor

    wirecast.warmup()
    primers = (resample_pil.warmup_one_size, resample_pil.warmup_two_sizes)
    if parts == 1:
        primers[0]()
        primers[1]()
    elif part < len(primers):
        primers[part]()
    for spec in rotated(specs, part, parts):
        pp = Preprocessor.from_model(spec, processor=processor, cache_bytes=0)
        pp.warmup()
        mark_warm(pp.spec_key)
        done(spec)


def compile_kernels(specs: list[str], processor: str | None = None, processes: int | None = None,
                    on_ready: Callable[[str], None] | None = None) -> None:
    """Compile every kernel these models use into the cache, in ``processes`` helper
    processes, logging progress every ``PROGRESS_EVERY_S`` seconds; ``on_ready(spec)``
    (from another thread) as each model's kernels are all in the cache. A helper that
    fails leaves its models to the others (or, the last one gone, to whoever loads them)."""
    processes = processes or default_processes()
    started = time.monotonic()
    warm: set[str] = set()
    lock = threading.Lock()

    def done(spec: str) -> None:
        with lock:
            if spec in warm:
                return
            warm.add(spec)
        log.info("kernels of %s ready after %.0f s", spec, time.monotonic() - started)
        if on_ready is not None:
            on_ready(spec)

    helpers = []
    for part in range(processes):
        args = [sys.executable, "-c", _HELPER, str(part), str(processes), *specs]
        if processor:
            args[5:5] = ["--processor", processor]
        helpers.append(subprocess.Popen(args, stdout=subprocess.PIPE, text=True))
    readers = [threading.Thread(target=_read_warm, args=(h, done), daemon=True) for h in helpers]
    for r in readers:
        r.start()
    stop = threading.Event()
    ticker = threading.Thread(target=_report, args=(stop, started, warm, lock, len(specs), processes), daemon=True)
    ticker.start()
    try:
        for h, r in zip(helpers, readers):
            if h.wait() != 0:
                log.warning("a kernel-compiling process exited with %s", h.returncode)
            r.join()
    finally:
        stop.set()
        for h in helpers:
            if h.poll() is None:
                h.kill()
                h.wait()
    log.info("kernels compiled in %.0f s by %d process(es)", time.monotonic() - started, processes)


def _read_warm(helper: subprocess.Popen, done) -> None:
    assert helper.stdout is not None
    for line in helper.stdout:
        if line.startswith("warm "):
            done(line[5:].strip())


def _report(stop: threading.Event, started: float, warm: set, lock: threading.Lock, total: int,
            processes: int) -> None:
    while not stop.wait(PROGRESS_EVERY_S):
        with lock:
            n = len(warm)
        log.info("compiling kernels: %.0f s, %d of %d model(s) ready, %d compiled kernel(s) in the cache, "
                 "%d process(es)", time.monotonic() - started, n, total, _cached_kernels(), processes)


def _cached_kernels() -> int:
    from ..kernels import CACHE_DIR

    try:
        return sum(1 for name in os.listdir(CACHE_DIR) if name.endswith(".nbc"))
    except OSError:
        return 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="precompile")
    parser.add_argument("part", type=int)
    parser.add_argument("parts", type=int)
    parser.add_argument("--processor")
    parser.add_argument("specs", nargs="+")
    args = parser.parse_args(argv)
    warm_part(args.specs, args.part, args.parts, args.processor, lambda spec: print("warm", spec, flush=True))
