"""What every stub shares: the process around the servicer, and the JSON report.

The report travels as trailing metadata (``x-stub-decoded``) so the backend messages
stay exactly the wire subset; tensors are described by shape, dtype and the sha256 of
their element bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import signal
import threading
from concurrent import futures

import grpc
import numpy as np
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

REPORT_KEY = "x-stub-decoded"
MiB = 1 << 20


class Rejected(ValueError):
    """What the real servicer would refuse (sent as INVALID_ARGUMENT)."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def describe(arr: np.ndarray) -> dict:
    """shape, dtype and sha256 of the C-order little-endian element bytes."""
    a = np.asarray(arr, order="C")  # not ascontiguousarray: it turns 0-d into 1-d
    le = a.astype(a.dtype.newbyteorder("<"), copy=False)
    return {"shape": list(a.shape), "dtype": str(a.dtype), "sha256": sha256(le.tobytes())}


def ids_digest(ids) -> dict:
    return {"count": len(ids), "sha256": sha256(np.asarray(ids, dtype="<u4").tobytes())}


def finish(context, report: dict) -> None:
    context.set_trailing_metadata(((REPORT_KEY, json.dumps(report, sort_keys=True)),))


def run_decode(decode, request, context) -> dict:
    """decode(request) -> report; a Rejected or ValueError aborts with INVALID_ARGUMENT."""
    try:
        return decode(request)
    except (Rejected, ValueError, KeyError, IndexError) as e:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{type(e).__name__}: {e}")


def complete(pb, decode, request, context, **response):
    """What every stub's Generate answers: ``decode(request)``'s report as trailing
    metadata and one ``pb.GenerateResponse`` (``response`` fields, a GenerateComplete)."""
    report = run_decode(decode, request, context)
    finish(context, report)
    done = pb.GenerateComplete(finish_reason="stop", prompt_tokens=report["input_ids"]["count"])
    return pb.GenerateResponse(**response, complete=done)


def serve(name: str, add_servicer, servicer) -> None:
    ap = argparse.ArgumentParser(description=f"{name} stub backend")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args()
    server = grpc.server(
        futures.ThreadPoolExecutor(4),
        options=[
            ("grpc.max_receive_message_length", 512 * MiB),
            ("grpc.max_send_message_length", 512 * MiB),
            ("grpc.so_reuseport", 0),
        ],
    )
    add_servicer(servicer, server)
    hs = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(hs, server)
    if server.add_insecure_port(f"{args.host}:{args.port}") == 0:
        raise SystemExit(f"cannot listen on {args.host}:{args.port}")
    server.start()
    hs.set("", health_pb2.HealthCheckResponse.SERVING)
    print(f"{name} stub listening on {args.host}:{args.port}", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    server.stop(2).wait()
