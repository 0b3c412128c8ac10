"""What every stub shares: the process around the servicer, the servicers' tensor reading,
and the JSON report.

Tensors are read the way smg-grpc-servicer (0.14) reads them, with its own torch-free
code where it has some: ``smg_grpc_servicer.mm_shm.tensor_payload_bytes`` takes the
bytes from ``inline`` or a ``/dev/shm`` segment (which it unlinks, as the worker does),
refusing an unset payload, symlinks, non-regular files, names that are not one path
component and short segments. ``tensor_wire.tensor_from_parts`` imports torch, so its
dtype table (``PROTO_DTYPE_MAP``) and length check are mirrored here; a test compares
the table with the installed source. bfloat16 has no numpy type: its elements are
kept as their uint16 bit patterns.

The report travels as trailing metadata (``x-stub-decoded``) so the backend messages
stay the upstream ones; tensors are described by shape, wire dtype and the sha256 of
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
from smg_grpc_servicer import mm_shm

REPORT_KEY = "x-stub-decoded"
MiB = 1 << 20

#: smg_grpc_servicer/tensor_wire.py PROTO_DTYPE_MAP, as little-endian numpy dtypes.
PROTO_DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype("<f4"),
    "bfloat16": np.dtype("<u2"),
    "float16": np.dtype("<f2"),
    "uint8": np.dtype("u1"),
    "int64": np.dtype("<i8"),
    "uint32": np.dtype("<u4"),
}


class Rejected(ValueError):
    """What the real servicer would refuse (sent as INVALID_ARGUMENT)."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tensor_from_parts(payload: bytes, shape, dtype_name: str) -> np.ndarray:
    """``tensor_wire.tensor_from_parts`` in numpy: a dtype not in the table is refused, the
    byte length must equal numel x width."""
    dt = PROTO_DTYPES.get(dtype_name)
    if dt is None:
        raise Rejected(f"Unsupported proto tensor dtype: {dtype_name!r}")
    dims = [int(d) for d in shape]
    expected = int(np.prod(dims, dtype=np.int64)) * dt.itemsize if dims else dt.itemsize
    if len(payload) != expected:
        raise Rejected(
            f"TensorData byte length mismatch for dtype={dtype_name!r}, shape={dims}: "
            f"expected {expected}, got {len(payload)}")
    return np.frombuffer(payload, dtype=dt).reshape(dims)


def payload_bytes(td) -> bytes:
    """``mm_shm.tensor_payload_bytes``: inline bytes, or a /dev/shm segment read and unlinked."""
    try:
        return mm_shm.tensor_payload_bytes(td)
    except OSError as e:  # a missing segment: the real servicer fails the request too
        raise Rejected(f"TensorData.shm {td.shm.name!r}: {e.strerror}") from None


def tensor_from_proto(td) -> np.ndarray:
    """vLLM's ``mm_tensors.tensor_from_proto``."""
    return tensor_from_parts(payload_bytes(td), td.shape, td.dtype)


def describe(arr: np.ndarray, dtype_name: str | None = None) -> dict:
    """shape, wire dtype and sha256 of the C-order little-endian element bytes."""
    a = np.asarray(arr, order="C")  # not ascontiguousarray: it turns 0-d into 1-d
    le = a.astype(a.dtype.newbyteorder("<"), copy=False)
    return {"shape": list(a.shape), "dtype": dtype_name or str(a.dtype), "sha256": sha256(le.tobytes())}


def transport(td) -> str:
    """inline | shm (the TensorData payload oneof)."""
    return td.WhichOneof("payload") or "unset"


def ids_digest(ids) -> dict:
    return {"count": len(ids), "sha256": sha256(np.asarray(ids, dtype="<u4").tobytes())}


def finish(context, report: dict) -> None:
    context.set_trailing_metadata(((REPORT_KEY, json.dumps(report, sort_keys=True)),))


def run_decode(decode, request, context) -> dict:
    """decode(request) -> report; a Rejected or ValueError aborts with INVALID_ARGUMENT."""
    try:
        return decode(request)
    except (Rejected, ValueError, KeyError, IndexError, TypeError) as e:
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
