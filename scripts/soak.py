#!/usr/bin/env python
"""Soak: many concurrent router-like clients against one server on 127.0.0.1; prints a report.

    .venv/bin/python scripts/soak.py                      # 64 clients for 60 s
    .venv/bin/python scripts/soak.py --clients 16 --duration 10

Starts the four stub backends and one server (four models, a small preprocessing cache
and a bounded handle store so both evict), then runs tests/reliability/loadgen.py: a mix
of image sizes, models, backends and flows (one-shot, two-phase, handles left behind,
payloads forwarded to the stubs), a third of the vLLM and TokenSpeed ones over shared
memory (the forwarded ones read by the stubs, the others left to the server's lease). Prints throughput, p50/p99 latency, error counts,
the store and cache peaks against their bounds, evictions, and the server's RSS curve;
then sends a burst past the in-flight limit and checks the server is healthy and fast
again after it.
Exits 1 when any service error happened, a bound was exceeded, RSS kept growing, or a
shared-memory segment was left in /dev/shm once the server stopped.
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
import imagegen  # noqa: E402  (on sys.path through procs)

MODELS = [procs.QWEN2, procs.QWEN3, procs.PIXTRAL, procs.LLAVA]
SMALL = imagegen.png(64, 64, seed=99)  # for the idle latency before the load and after the burst


def overload(server, photos: list[bytes], idle_before: float) -> list[str]:
    """A burst past the in-flight limit, then a small call's latency again."""
    b = loadgen.burst(server, procs.QWEN2, photos)
    st = server.stats()
    healthy = server.health()
    idle_after = loadgen.idle_latency(server, procs.QWEN2, SMALL)
    print(
        f"overload: {b['n']} calls at once (distinct 768x1024 photos, 16 connections) against a limit of "
        f"{st.max_in_flight}: {b['codes']}; as the clients saw it (upload included): refused in p50 "
        f"{b['busy_p50'] * 1e3:.0f} ms (max {b['busy_max'] * 1e3:.0f} ms), accepted ones p50 {b['ok_p50'] * 1e3:.0f} ms "
        f"(max {b['ok_max'] * 1e3:.0f} ms). After it: health {healthy}, in flight {st.in_flight}, a small call "
        f"p50 {idle_after * 1e3:.1f} ms (before the load: {idle_before * 1e3:.1f} ms)"
    )
    problems = []
    if set(b["codes"]) - {"OK", "RESOURCE_EXHAUSTED"}:
        problems.append(f"burst statuses {b['codes']}")
    if healthy != "SERVING" or idle_after > 3 * idle_before + 0.05:
        problems.append(f"not healthy and fast after the burst: {healthy}, {idle_after * 1e3:.1f} ms")
    return problems


def shm_report(server) -> str:
    from sglang_mm_grpc.client import Client

    with Client(server.target) as c:
        s = c.server_info().shm
    return (f"{s.written} segments written ({s.reused} in files a read one gave back), {s.handed_out} handed out, "
            f"{s.read} read by the stubs, removed unread "
            f"{dict(s.removed)}, {s.inline_fallbacks} sent inline for want of room, peak {s.peak_bytes / procs.MiB:.0f} MiB")


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
    ap.add_argument(
        "--max-rss-growth", type=float, default=0.15, metavar="FRACTION",
        help="allowed RSS growth from 25-50%% of the run to the last quarter, as a fraction of the "
        "former (at least 64 MiB): large arrays churning through malloc move RSS by about this "
        "much without any trend",
    )
    ap.add_argument("--server-env", action="append", default=[], metavar="K=V", help="environment for the server only")
    ap.add_argument(
        "--max-in-flight", type=int, default=0, metavar="N",
        help="the server's limit (default: the clients plus a quarter, so the load itself is never "
        "refused; the burst afterwards goes past it)",
    )
    ap.add_argument("--burst", type=int, default=256, help="calls sent at once after the load, one 768x1024 photo each (0: none)")
    ap.add_argument("--shm-lease", default="5", help="seconds an unread segment lives (the server's --shm-lease)")
    ap.add_argument("--no-shm", action="store_true", help="no flows over shared memory")
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
                "--max-in-flight", str(args.max_in_flight or args.clients + args.clients // 4),
                "--log-level", "WARNING",
                "--shm-lease", args.shm_lease,
                models=MODELS,
                workers=args.workers,
                env=dict(kv.split("=", 1) for kv in args.server_env),
            )
            print(f"server ready in {server.ready_s:.1f} s (pid {server.pid}, RSS {server.rss_bytes() / procs.MiB:.0f} MiB)")
            idle_before = loadgen.idle_latency(server, procs.QWEN2, SMALL)
            load = loadgen.Load(server, models=MODELS, clients=args.clients, duration_s=args.duration, images=images,
                                stubs=stubs, shm=not args.no_shm)
            results = load.run()
            print(loadgen.report(results))
            problems = loadgen.summary_ok(results)
            if args.burst:
                photos = [imagegen.jpeg(768, 1024, seed=10_000 + i) for i in range(args.burst)]
                problems += overload(server, photos, idle_before)
            plateau = loadgen.rss_plateau(results.samples)
            if plateau["growth"] > max(64 * procs.MiB, args.max_rss_growth * plateau["warm"]):
                problems.append(f"RSS grew {plateau['growth'] / procs.MiB:.0f} MiB after warm-up")
            shm = shm_report(server)
            t = time.monotonic()
            rc = server.stop(60)
            print(f"server stopped with exit code {rc} in {time.monotonic() - t:.1f} s")
            if rc != 0:
                problems.append(f"server exit code {rc}")
            left = procs.leftover_segments(procs.shm_owners([], server.port))
            print(f"shared memory: {shm}; left in /dev/shm after the stop: {len(left)}")
            if left:
                problems.append(f"{len(left)} shared-memory segments left in /dev/shm: {left[:3]}")
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
