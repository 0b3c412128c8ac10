#!/usr/bin/env python
"""Soak: many concurrent router-like clients against one server on 127.0.0.1; prints a report.

    .venv/bin/python scripts/soak.py                      # 64 clients for 60 s
    .venv/bin/python scripts/soak.py --clients 16 --duration 10

Starts the three stub backends and one server (four models, a small preprocessing cache
and a bounded handle store so both evict), then runs tests/reliability/loadgen.py: a mix
of image sizes, models, backends and flows (one-shot, two-phase, handles left behind,
payloads forwarded to the stubs). Prints throughput, p50/p99 latency, error counts,
the store and cache peaks against their bounds, evictions, and the server's RSS curve.
Exits 1 when any service error happened, a bound was exceeded, or RSS kept growing.
Only 127.0.0.1 is contacted; every process it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "reliability"))

import loadgen  # noqa: E402
import procs  # noqa: E402

MODELS = [procs.QWEN2, procs.QWEN3, procs.PIXTRAL, procs.LLAVA]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    ap.add_argument("--workers", type=int, default=2, help="server worker threads")
    ap.add_argument("--images", type=int, default=160, help="distinct images in the pool")
    ap.add_argument("--cache-bytes", default="96MiB")
    ap.add_argument("--store-bytes", default="768MiB")
    ap.add_argument("--store-items", default="256")
    ap.add_argument("--handle-ttl", default="20")
    ap.add_argument("--max-rss-growth-mib", type=float, default=64.0, help="allowed growth from 25-50%% to the last quarter")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        work = Path(tmp)
        t = time.monotonic()
        images = loadgen.corpus(args.images)
        print(f"corpus: {len(images)} images, {sum(map(len, images)) / procs.MiB:.1f} MiB encoded ({time.monotonic() - t:.1f} s)")
        stubs = procs.start_stubs(work)
        server = None
        try:
            server = procs.Server(
                work,
                "--cache-bytes", args.cache_bytes,
                "--store-bytes", args.store_bytes,
                "--store-items", args.store_items,
                "--handle-ttl", args.handle_ttl,
                "--log-level", "WARNING",
                models=MODELS,
                workers=args.workers,
            )
            print(f"server ready in {server.ready_s:.1f} s (pid {server.pid}, RSS {server.rss_bytes() / procs.MiB:.0f} MiB)")
            load = loadgen.Load(server, models=MODELS, clients=args.clients, duration_s=args.duration, images=images, stubs=stubs)
            results = load.run()
            print(loadgen.report(results))
            problems = loadgen.summary_ok(results)
            growth = loadgen.rss_plateau(results.samples)["growth"]
            if growth > args.max_rss_growth_mib * procs.MiB:
                problems.append(f"RSS grew {growth / procs.MiB:.0f} MiB after warm-up")
            t = time.monotonic()
            rc = server.stop(60)
            print(f"server stopped with exit code {rc} in {time.monotonic() - t:.1f} s")
            if rc != 0:
                problems.append(f"server exit code {rc}")
        finally:
            if server is not None:
                server.stop()
            for s in stubs.values():
                s.stop()
    for p in problems:
        print(f"PROBLEM: {p}")
    print("soak: OK" if not problems else "soak: FAILED")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
