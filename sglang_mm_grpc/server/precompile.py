"""A cold first start compiles the kernels in parallel processes, and says how it goes.

Each process warms every model (compiling what the cache lacks, loading the rest), in
its own order, so they start on different kernels; ``kernels.compile_locks`` makes a
kernel that two of them need compile once while the other waits for it, and a process
skips to its next model while another is on one. The first two processes start with the
resampling passes, which most models call (the second with their largest callee, which
the first then links from the cache: ``resample_pil.warmup_rgb_rows``), then the payload
serializer's conversions; then each takes its models, whose own kernels a family warms
before the shared ones. Each model is reported ready as soon as one process has warmed
it: the server loads it from the cache then and serves it while the others compile.

A helper process runs ``main`` (``PART PARTS [--processor P] SPEC...``); it prints
``warm SPEC`` as each model is done.
"""

from __future__ import annotations

import argparse
import fcntl
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


def warm_part(specs: list[str], part: int, parts: int, processor: str | None, done=print,
              working_on=lambda what: None) -> None:
    """Warm every model in part ``part``'s order, calling ``working_on(what)`` before each
    step and ``done(spec)`` after each model."""
    from ..kernels import resample_pil, wirecast
    from ..pipeline.driver import Preprocessor

    if part < 2:  # the resampling passes, which most models call, split between two processes
        working_on("the resampling passes")
        (resample_pil.warmup if part == 0 else resample_pil.warmup_rgb_rows)()
    working_on("the payload conversions")
    wirecast.warmup()
    todo = rotated(specs, part, parts)
    while todo:
        # a model another process is on goes to the back: this one takes the next instead
        spec = next((s for s in todo if _claim(s)), todo[0])
        todo.remove(spec)
        working_on(spec)
        pp = Preprocessor.from_model(spec, processor=processor, cache_bytes=0)
        if not warm_marker(pp.spec_key).exists():  # (else warm already: by another process, or before)
            pp.warmup()
            mark_warm(pp.spec_key)
        done(spec)


_claims: list = []  # this process's claim files, held (flocked) until it exits


def _claim(spec: str) -> bool:
    """Claim ``spec`` for this process unless another one has (a non-blocking flock on a
    file named after it in the cache, released when the process exits)."""
    from ..kernels import CACHE_DIR

    path = Path(CACHE_DIR) / "locks" / ("model-" + hashlib.blake2b(spec.encode(), digest_size=8).hexdigest())
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(path, "a+b")
    except OSError:
        return True  # nowhere to say it: warm it anyway
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        return False
    _claims.append(f)
    return True


def compile_kernels(specs: list[str], processor: str | None = None, processes: int | None = None,
                    on_ready: Callable[[str], None] | None = None, cancel: threading.Event | None = None) -> None:
    """Compile every kernel these models use into the cache, in ``processes`` helper
    processes, logging progress every ``PROGRESS_EVERY_S`` seconds; ``on_ready(spec)``
    (from another thread) as each model's kernels are all in the cache. A helper that
    fails leaves its models to the others (or, the last one gone, to whoever loads them).
    ``cancel`` set: the helpers are killed and this returns (a server told to stop)."""
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
    working: dict[int, str] = {}  # what each helper is on
    readers = [threading.Thread(target=_read_helper, args=(h, i, done, working), daemon=True)
               for i, h in enumerate(helpers)]
    for r in readers:
        r.start()
    stop = threading.Event()
    ticker = threading.Thread(target=_report, args=(stop, started, warm, lock, len(specs), working), daemon=True)
    ticker.start()
    cancel = cancel or threading.Event()
    try:
        while any(h.poll() is None for h in helpers) and not cancel.wait(0.1):
            pass
    finally:
        stop.set()
        for h in helpers:
            if h.poll() is None:
                h.kill()
                h.wait()
        for r in readers:
            r.join()
    if cancel.is_set():
        log.info("kernel compile stopped after %.0f s", time.monotonic() - started)
        return
    for h in helpers:
        if h.returncode != 0:
            log.warning("a kernel-compiling process exited with %s", h.returncode)
    log.info("kernels compiled in %.0f s by %d process(es)", time.monotonic() - started, processes)


def _read_helper(helper: subprocess.Popen, index: int, done, working: dict[int, str]) -> None:
    """Follow a helper's ``on WHAT`` and ``warm SPEC`` lines."""
    assert helper.stdout is not None
    for line in helper.stdout:
        kind, _, what = line.strip().partition(" ")
        if kind == "warm":
            done(what)
        elif kind == "on":
            working[index] = what
    working.pop(index, None)


def _report(stop: threading.Event, started: float, warm: set, lock: threading.Lock, total: int,
            working: dict[int, str]) -> None:
    while not stop.wait(PROGRESS_EVERY_S):
        with lock:
            n = len(warm)
        log.info("compiling kernels: %.0f s, %d of %d model(s) ready, %d compiled kernel(s) in the cache; "
                 "%d process(es) on: %s", time.monotonic() - started, n, total, _cached_kernels(), len(working),
                 "; ".join(working[i] for i in sorted(working)) or "-")


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
    warm_part(args.specs, args.part, args.parts, args.processor, lambda spec: print("warm", spec, flush=True),
              lambda what: print("on", what, flush=True))
