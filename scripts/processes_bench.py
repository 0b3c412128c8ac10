#!/usr/bin/env python
"""Throughput of Preprocess flows with several clients: ``serve --processes N`` vs one process.

A flow is Preprocess (two-phase, one 1280x720 JPEG, preprocessing cache off) then
Release, as in ``scripts/bench.py``'s throughput rows. ``--clients`` closed-loop clients
(each its own channel, so its own connection, which the kernel gives to one of the
processes sharing the port) run in two client processes on the same machine for
``--seconds``; the script prints flows per second for each server configuration, the
server's CPU use (all its processes), how the connections spread over the processes,
and the ratio to the first configuration. Numbers are ratios within one run: this VM's
timings drift between runs.

    .venv/bin/python scripts/processes_bench.py                   # 1 vs 2 processes (this machine's cores)
    .venv/bin/python scripts/processes_bench.py --configs 1x2,2x1,2x2,4x1 --seconds 20 --json out.json

A configuration ``PxW`` is P processes with W worker threads each.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from servers import Server  # noqa: E402  (tests/servers.py: no pytest, made for scripts too)

MODEL = "Qwen/Qwen2-VL-7B-Instruct"


def _client_process(target, raw, threads, seconds, ready, start, results) -> None:
    from sglang_mm_grpc.server.allocator import tune_for_large_tensors
    from sglang_mm_grpc.client import Client
    from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb

    tune_for_large_tensors()
    # a connection each (grpc would otherwise share one per process), as separate routers would
    clients = [Client(target, channel_options=[("grpc.use_local_subchannel_pool", 1)]) for _ in range(threads)]
    owners = []
    for c in clients:  # connect and warm outside the window; note which process took the connection
        r, call = c.stub.Preprocess.with_call(
            pb.PreprocessRequest(model=MODEL, images=[pb.MediaItem(data=raw)]), timeout=60)
        owners.append(dict(call.trailing_metadata()).get("sglang-mm-owner", "?"))
        c.release(r.handle)
    ready.put(None)
    counts = [0] * threads

    def worker(i: int, stop: float) -> None:
        c = clients[i]
        while time.perf_counter() < stop:
            c.release(c.preprocess(MODEL, [raw]).handle)
            counts[i] += 1

    start.wait()
    stop = time.perf_counter() + seconds
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(worker, range(threads), [stop] * threads))
    for c in clients:
        c.close()
    results.put((sum(counts), owners))


def _cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and every process under it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry))
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            pass
        todo += children.get(p, [])
    return total


def measure(processes: int, workers: int, raw: bytes, clients: int, seconds: float, workdir: Path) -> dict:
    srv = Server(workdir, "--processes", str(processes), "--cache-bytes", "0", "--log-level", "WARNING",
                 models=[MODEL], workers=workers, name=f"p{processes}w{workers}")
    try:
        ctx = multiprocessing.get_context("spawn")
        ready, start, results = ctx.Queue(), ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_client_process, args=(srv.target, raw, clients // 2, seconds, ready, start, results))
                 for _ in range(2)]
        for p in procs:
            p.start()
        for _ in procs:
            ready.get(timeout=300)
        cpu0, t0 = _cpu_s(srv.pid), time.perf_counter()
        start.set()
        got = [results.get(timeout=seconds + 120) for _ in procs]
        wall = time.perf_counter() - t0
        cpu = _cpu_s(srv.pid) - cpu0
        for p in procs:
            p.join(30)
    finally:
        srv.stop()
    spread = Counter(o for _, owners in got for o in owners)
    return {"processes": processes, "workers": workers, "flows_per_s": sum(n for n, _ in got) / wall,
            "server_cores_busy": cpu / wall,
            "connections_per_process": sorted(spread.values(), reverse=True)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cores = len(os.sched_getaffinity(0))
    ap.add_argument("--configs", default=f"1x{cores},{cores}x1,{cores}x{cores}",
                    help="comma-separated PxW: P processes of W workers (default: 1x<cores>,<cores>x1,<cores>x<cores>)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    import imagegen

    raw = imagegen.jpeg(1280, 720, seed=7)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.configs.split(","):
            p, w = (int(x) for x in spec.lower().split("x"))
            row = measure(p, w, raw, args.clients, args.seconds, Path(tmp))
            rows.append(row)
            print(f"{p} process(es) x {w} worker(s): {row['flows_per_s']:.1f} flows/s, server busy "
                  f"{row['server_cores_busy']:.2f} cores, connections per process {row['connections_per_process']}",
                  flush=True)
    base = rows[0]["flows_per_s"]
    for row in rows[1:]:
        row["vs_first"] = row["flows_per_s"] / base
        print(f"{row['processes']}x{row['workers']} / {rows[0]['processes']}x{rows[0]['workers']} = "
              f"{row['vs_first']:.2f}x", flush=True)
    out = {"machine_cores": cores, "clients": args.clients, "seconds": args.seconds, "image": "1280x720 JPEG",
           "flow": "Preprocess + Release (cache off)", "rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
