#!/usr/bin/env python3
"""Raw uint8 pixels against float32, in one run (docs/WIRE_CURRENT.md, "Raw pixels").

    python scripts/bench_raw.py [--repeat N] [--json out.json]

* in-process: per family with raw pixels, a never-seen 1280x720 photo-like JPEG each
  call: ``preprocess`` (float32) and ``preprocess(raw=True)`` (uint8), p50 of each and
  the ratio raw / float32;
* server: a server on 127.0.0.1 (Qwen2-VL), one-shot ``Preprocess`` with the vLLM
  payload called as a router calls it (a plain stub), back to back, over shared memory
  (the pixels staged by the kernels and handed out, the worker reading the segment
  untimed) and inline, uint8 and float32: p50 client side over the in-process time of
  its dtype, the server's own time, the response's bytes. Timed in the steady state: new
  images first fill the server's preprocessing cache and then its media store until each
  evicts, as on a server that has run a while (until then each image they keep is memory
  the process faults in fresh: ~13 ms per 22.5 MB float32 tensor, ~0.2 ms per 393 KB JPEG
  on a 2-vCPU VM);
* the same SHM uint8 one-shot alternated call by call with the in-process raw call, so
  both see the machine as it is then: p50 of each and the ratio;
* the gRPC floor: a bare ``grpc.aio`` server answering the same ``PreprocessRequest``
  (a plain stub, a new JPEG each call) at once, called as the one-shot is, a pause of the
  in-process time between calls: p50, what gRPC alone costs that call, under the
  server's overhead over in-process (back to back it costs less: the pause lets both
  processes go idle, and waking them is part of every such call).

Run from a checkout with the package installed (``pip install -e '.[test]'``); the
process tunes malloc and asks for AMX tiles as ``serve`` does.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import _Server, _timed_flows, photo_like, variant  # noqa: E402

FAMILIES = ["Qwen/Qwen2-VL-7B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen3-VL-8B-Instruct",
            "mistralai/Mistral-Small-3.1-24B-Instruct-2503"]
SERVER_MODEL = "Qwen/Qwen2-VL-7B-Instruct"
SIZE = (1280, 720)


def bench_inprocess(repeat: int, photo: bytes) -> list[dict]:
    from sglang_mm_grpc import Preprocessor

    rows = []
    fresh = iter(variant(photo, k) for k in range(1 << 20))
    for model in FAMILIES:
        pp = Preprocessor.from_model(model, cache_bytes=0)
        pp.warmup()
        f32, raw = [], []
        for _ in range(repeat + 1):  # interleaved, so both see the same machine
            for times, is_raw in ((f32, False), (raw, True)):
                data = next(fresh)
                t0 = time.perf_counter()
                pp.preprocess([data], raw=is_raw)
                times.append((time.perf_counter() - t0) * 1e3)
        row = {"model": model, "float32_p50_ms": statistics.median(f32[1:]), "uint8_p50_ms": statistics.median(raw[1:])}
        row["uint8_over_float32"] = row["uint8_p50_ms"] / row["float32_p50_ms"]
        rows.append(row)
        print(f"{model:<48} float32 {row['float32_p50_ms']:7.2f}  uint8 {row['uint8_p50_ms']:7.2f}  "
              f"uint8/float32 {row['uint8_over_float32']:.2f}x", flush=True)
    return rows


def bench_server(repeat: int, photo: bytes, inproc: dict) -> dict:
    """One-shot Preprocess with the vLLM payload, as a router calls it (a plain stub on one
    channel), back to back; the worker's read of the segment is not timed."""
    import grpc
    from smg_grpc_servicer import mm_shm

    from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
    from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2_grpc as pb_grpc
    from sglang_mm_grpc.client import payload_options

    srv = _Server("--model", SERVER_MODEL, "--shm-lease", "60")
    out: dict = {}
    try:
        srv.wait_serving()
        fresh = iter(variant(photo, k) for k in range(1 << 20))
        limits = [("grpc.max_receive_message_length", 256 << 20), ("grpc.enable_http_proxy", 0)]
        with grpc.insecure_channel(srv.target, limits) as channel:
            stub = pb_grpc.MultimodalPreprocessorStub(channel)
            filled = _fill_cache(stub, fresh)
            for dtype in ("uint8", "float32"):
                for transport in ("shm", "inline"):
                    req = pb.PreprocessRequest(model=SERVER_MODEL, images=[pb.MediaItem(data=photo)],
                                               backend=pb.BACKEND_VLLM, payload_options=payload_options(dtype, transport))
                    server_ms: list[float] = []

                    def call():
                        req.images[0].data = next(fresh)
                        resp = stub.Preprocess(req, timeout=60)
                        server_ms.append(resp.timings.total_ms)
                        return resp

                    def read(resp) -> None:  # what the worker does: read the segment, which removes it
                        td = resp.payload.vllm.pixel_values
                        if td.WhichOneof("payload") == "shm":
                            mm_shm.tensor_payload_bytes(td)

                    key = f"{transport}_{dtype}"
                    out[f"{key}_p50_ms"] = _timed_flows(call, repeat, read)
                    out[f"{key}_server_p50_ms"] = statistics.median(server_ms[1:])
                    out[f"{key}_over_inprocess"] = out[f"{key}_p50_ms"] / inproc[dtype]
                    out[f"{key}_bytes"] = call().ByteSize()
            out.update(_alternated(stub, fresh, repeat))
    finally:
        srv.proc.terminate()
        srv.proc.wait(30)
    print(f"(the server's cache filled by {filled} new images first, then its media store)")
    for dtype in ("uint8", "float32"):
        for transport in ("shm", "inline"):
            key = f"{transport}_{dtype}"
            print(f"server one-shot vLLM, {transport:<6} {dtype:<7}: p50 {out[f'{key}_p50_ms']:7.2f} ms "
                  f"({out[f'{key}_over_inprocess']:.2f}x in-process {inproc[dtype]:.2f}; the server's own "
                  f"{out[f'{key}_server_p50_ms']:.2f}), response {out[f'{key}_bytes'] / 1e6:.2f} MB")
    print(f"the SHM uint8 one-shot alternated with the in-process call: p50 {out['alternated_shm_uint8_p50_ms']:.2f} "
          f"ms against {out['alternated_inprocess_p50_ms']:.2f} ({out['alternated_shm_uint8_over_inprocess']:.2f}x)")
    return out


def _alternated(stub, fresh, repeat: int) -> dict:
    """The SHM uint8 one-shot and the in-process raw call, alternated on new images so both
    see the machine as it is then (the rows above time the in-process call minutes
    earlier): p50 of each and their ratio."""
    from smg_grpc_servicer import mm_shm

    from sglang_mm_grpc import Preprocessor
    from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
    from sglang_mm_grpc.client import payload_options

    pp = Preprocessor.from_model(SERVER_MODEL, cache_bytes=0)
    pp.warmup()
    req = pb.PreprocessRequest(model=SERVER_MODEL, images=[pb.MediaItem()], backend=pb.BACKEND_VLLM,
                               payload_options=payload_options("uint8", "shm"))
    local: list[float] = []
    remote: list[float] = []
    for _ in range(repeat + 1):
        data = next(fresh)
        t0 = time.perf_counter()
        pp.preprocess([data], raw=True)
        local.append((time.perf_counter() - t0) * 1e3)
        req.images[0].data = next(fresh)
        t0 = time.perf_counter()
        resp = stub.Preprocess(req, timeout=60)
        remote.append((time.perf_counter() - t0) * 1e3)
        mm_shm.tensor_payload_bytes(resp.payload.vllm.pixel_values)  # the worker's read, untimed
    server, inproc = statistics.median(remote[1:]), statistics.median(local[1:])
    return {"alternated_shm_uint8_p50_ms": server, "alternated_inprocess_p50_ms": inproc,
            "alternated_shm_uint8_over_inprocess": server / inproc}


def _echo_server(port_out) -> None:
    """A bare ``grpc.aio`` server (the server's kind) whose Preprocess answers any request
    at once with an empty response."""
    import asyncio

    import grpc

    async def at_once(_request: bytes, _context) -> bytes:
        return b""

    async def serve() -> None:
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 << 20)])
        answer = grpc.unary_unary_rpc_method_handler(at_once)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "sglang_mm.v1.MultimodalPreprocessor", {"Preprocess": answer}),))
        port_out.put(server.add_insecure_port("127.0.0.1:0"))
        await server.start()
        await server.wait_for_termination()

    asyncio.run(serve())


def bench_grpc_floor(repeat: int, photo: bytes, pause_ms: float) -> float:
    """p50 ms of the one-shot's call to a server that answers at once (no work), a new
    JPEG each call and ``pause_ms`` between calls, as the work leaves them: what gRPC alone
    costs this call on this machine, the floor under the server's overhead."""
    import multiprocessing

    import grpc

    from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
    from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2_grpc as pb_grpc
    from sglang_mm_grpc.client import payload_options

    ctx = multiprocessing.get_context("spawn")
    port_out = ctx.Queue()
    proc = ctx.Process(target=_echo_server, args=(port_out,), daemon=True)
    proc.start()
    fresh = iter(variant(photo, k) for k in range(1 << 20))
    req = pb.PreprocessRequest(model=SERVER_MODEL, images=[pb.MediaItem()], backend=pb.BACKEND_VLLM,
                               payload_options=payload_options("uint8", "shm"))
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port_out.get(timeout=60)}") as channel:
            stub = pb_grpc.MultimodalPreprocessorStub(channel)

            def call():
                req.images[0].data = next(fresh)
                time.sleep(pause_ms / 1e3)
                t0 = time.perf_counter()
                stub.Preprocess(req, timeout=60)
                return (time.perf_counter() - t0) * 1e3

            call()
            return statistics.median(call() for _ in range(repeat))
    finally:
        proc.kill()


def _fill_cache(stub, fresh) -> int:
    """Send new images (the largest payload: float32, inline) until the server's
    preprocessing cache evicts, then Plan new ones (which keeps their bytes for media ids,
    and decodes nothing) until its media store evicts too; returns how many Preprocess calls
    the cache took. Until the store is full, each new image's bytes are memory the process
    faults in fresh (~0.2 ms per 393 KB JPEG here); a server that has run a while reuses
    what the store let go."""
    from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
    from sglang_mm_grpc.client import payload_options

    req = pb.PreprocessRequest(model=SERVER_MODEL, backend=pb.BACKEND_VLLM,
                               payload_options=payload_options("float32", "inline"))
    for n in range(1, 10_000):
        del req.images[:]
        req.images.add(data=next(fresh))
        stub.Preprocess(req, timeout=60)
        if stub.GetStats(pb.GetStatsRequest()).cache.evictions:
            break
    else:
        raise RuntimeError("the server's cache never evicted")
    plan = pb.PreprocessRequest(model=SERVER_MODEL, images=[pb.MediaItem()])
    for _ in range(100_000):
        plan.images[0].data = next(fresh)
        stub.Plan(plan, timeout=60)
        if stub.GetStats(pb.GetStatsRequest()).media.evictions:
            return n
    raise RuntimeError("the server's media store never evicted")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=40)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    from sglang_mm_grpc.server.allocator import tune_for_large_tensors
    from sglang_mm_grpc.kernels import amx

    tune_for_large_tensors()
    amx.request()
    photo = photo_like(*SIZE)
    print(f"in-process, one thread, a new {SIZE[0]}x{SIZE[1]} photo-like JPEG each call, ms (median)")
    rows = bench_inprocess(args.repeat, photo)
    server_row = next(r for r in rows if r["model"] == SERVER_MODEL)
    server = bench_server(args.repeat, photo, {"uint8": server_row["uint8_p50_ms"],
                                               "float32": server_row["float32_p50_ms"]})
    server["grpc_floor_p50_ms"] = floor = bench_grpc_floor(args.repeat * 3, photo, server_row["uint8_p50_ms"])
    print(f"the same call to a server answering at once, {server_row['uint8_p50_ms']:.1f} ms apart: p50 {floor:.2f} ms "
          f"(gRPC alone; the SHM uint8 one-shot's overhead over in-process: "
          f"{server['shm_uint8_p50_ms'] - server_row['uint8_p50_ms']:.2f})")
    if args.json:
        Path(args.json).write_text(json.dumps({"inprocess": rows, "server": server}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
