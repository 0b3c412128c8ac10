"""How a call's payload tensors travel: its PayloadOptions against the server's defaults.

* the pixel dtype (``WireDtype``; unspecified: what the worker's server info asks for,
  else the backend's default); uint8 (raw pixels, for an engine that normalizes on the
  device) is decided here, before Preprocess, since the kernels then write the bytes;
* the chosen worker's server info (``worker_info``): its item limits, checked before
  any fetch, its encoder budget per item, its /dev/shm identity for AUTO;
* the transport: inline, SHM, or AUTO (SHM only when the caller's ``shm_namespace_id``
  equals this server's, the gateway's rule) for vLLM and TokenSpeed, with the minimum
  size below which a tensor stays inline; unspecified takes the server's default
  (``serve --tensor-transport`` / ``$SMG_MM_TENSOR_TRANSPORT``, ``--shm-min-bytes`` /
  ``$SMG_MM_SHM_MIN_BYTES``), which applies where the backend can use it;
* staging: a Preprocess whose options lead to float32 or uint8 SHM pixel tensors has the kernels
  write ``pixel_values`` and ``pixel_values_videos`` straight into a segment each
  (``Stager``), which the payload then hands out;
* the segments a kept result owns, removed when it leaves the store.

Bad values are INVALID_ARGUMENT; options the chosen backend cannot honour are
FAILED_PRECONDITION (``assemble``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

import numpy as np

from ..wire import assemble as asm
from ..wire import serialize as wire, worker_info
from .._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from ..core.errors import Code, PreprocessError
from ..wire.shm import DEFAULT_MIN_BYTES, STAGED, Segment, ShmArena

log = logging.getLogger(__name__)

TRANSPORTS = {
    pb.TENSOR_TRANSPORT_INLINE: "inline",
    pb.TENSOR_TRANSPORT_SHM: "shm",
    pb.TENSOR_TRANSPORT_AUTO: "auto",
}
TRANSPORT_VALUES = {v: k for k, v in TRANSPORTS.items()}
ENV_TRANSPORT = "SMG_MM_TENSOR_TRANSPORT"
ENV_MIN_BYTES = "SMG_MM_SHM_MIN_BYTES"
#: The pixel tensors a Preprocess may stage, by the name the driver's ``allocate`` gets.
STAGEABLE = ("pixel_values", "pixel_values_videos")


def default_transport(value: str | None = None, env=os.environ) -> str:
    """``value``, else ``$SMG_MM_TENSOR_TRANSPORT``, else inline (``rdma`` is the gateway's
    NIXL lane, which this server does not offer: inline)."""
    raw = (value if value is not None else env.get(ENV_TRANSPORT, "")).strip().lower() or "inline"
    if raw == "rdma":
        log.warning("%s=rdma: this server has no RDMA lane; tensors stay inline", ENV_TRANSPORT)
        return "inline"
    if raw not in TRANSPORT_VALUES:
        raise ValueError(f"tensor transport {raw!r} is not one of inline, shm, auto")
    return raw


def default_min_bytes(value: int | None = None, env=os.environ) -> int:
    if value is not None:
        return int(value)
    raw = env.get(ENV_MIN_BYTES, "").strip()
    if not raw:
        return DEFAULT_MIN_BYTES
    try:
        n = int(raw)
    except ValueError:
        raise ValueError(f"{ENV_MIN_BYTES}={raw!r} is not a whole number of bytes") from None
    if n < 0:
        raise ValueError(f"{ENV_MIN_BYTES} must not be negative, got {n}")
    return n


@dataclass(frozen=True)
class Resolved:
    """A call's options after the defaults: what ``assemble`` gets, which pixel tensors a
    Preprocess should stage in shared memory (``STAGEABLE`` names), whether it keeps raw
    uint8 pixels, and the most feature tokens one item may carry (0: no such bound)."""

    wire: asm.WireOptions
    stage: frozenset[str] = frozenset()
    worker: worker_info.WorkerInfo | None = None

    @property
    def raw(self) -> bool:
        return self.wire.pixel_dtype == "uint8"

    @property
    def encoder_budget(self) -> int:
        return self.worker.encoder_budget if self.worker is not None else 0


class Transport:
    """The server's transport settings and its segments (``arena``; None: no /dev/shm)."""

    def __init__(self, arena: ShmArena | None, *, transport: str = "inline", min_bytes: int = DEFAULT_MIN_BYTES,
                 max_send_bytes: int | None = None):
        self.arena = arena
        self.transport = transport
        self.min_bytes = int(min_bytes)
        self.max_send_bytes = max_send_bytes

    def resolve(self, options: pb.PayloadOptions, backend: int | None, images: int | None = None,
                videos: int | None = None, audios: int = 0) -> Resolved:
        """``options`` for a payload to ``backend`` (None: not known yet, a two-phase Preprocess)
        of ``images`` images and ``videos`` videos (what a Preprocess stages depends on them;
        None: not known, an Assemble, whose items were checked at Preprocess)."""
        worker = worker_info.from_options(options)
        name = asm.BACKEND_NAMES.get(backend) if backend else None
        if worker is not None and name is not None and name != worker.backend:
            raise PreprocessError(Code.INVALID_ARGUMENT, f"payload_options carries a {worker.backend} worker's server "
                                  f"info, but the payload is for {name}")
        if worker is not None and images is not None:
            worker.check_items(images, videos or 0, audios)
        dtype, source = asm.parse_pixel_dtype(options.pixel_dtype), "payload_options.pixel_dtype"
        if not dtype and worker is not None:
            dtype, source = worker.pixel_dtype()
        if options.transport and options.transport not in TRANSPORTS:
            raise PreprocessError(Code.INVALID_ARGUMENT,
                                  f"transport {options.transport} is not a TensorTransport value")
        named = TRANSPORTS.get(options.transport)
        mode = named or self.transport
        min_bytes = int(options.shm_min_bytes) if options.HasField("shm_min_bytes") else self.min_bytes
        if mode == "shm" and self.arena is None and named:
            raise PreprocessError(Code.FAILED_PRECONDITION,
                                  "this server has no shared memory (/dev/shm is not writable here): "
                                  "ask for TENSOR_TRANSPORT_INLINE or AUTO")
        namespace = options.shm_namespace_id or (worker.shm_namespace_id if worker is not None else "")
        shm = self.arena is not None and (
            mode == "shm" or (mode == "auto" and bool(namespace) and namespace == self.arena.namespace_id))
        wire_options = asm.WireOptions(dtype, shm, min_bytes, shm_required=named == "shm", pixel_dtype_source=source)
        if backend:
            asm.check_options(backend, wire_options)  # refused before anything is fetched
        staged = _staged(name, dtype, images or 0, videos or 0) if shm else frozenset()
        return Resolved(wire_options, staged, worker)

    def stager(self, resolved: Resolved) -> "Stager | None":
        if not resolved.stage or self.arena is None:
            return None
        return Stager(self.arena, resolved.wire.shm_min_bytes, resolved.stage)

    def serialize(self, resp, assembled: asm.Assembled) -> bytes:
        """``resp`` with its assembled payload, as bytes; RESOURCE_EXHAUSTED (and the
        payload's new segments removed) when it is over the send limit."""
        try:
            return wire.serialize(resp, assembled.tail, max_bytes=self.max_send_bytes)
        except BaseException:
            self.abandon(assembled)
            raise

    def abandon(self, assembled: asm.Assembled) -> None:
        """The payload will not be sent: remove what it wrote (a staged segment it handed out
        goes back to being the kept result's, which removes it in time)."""
        if self.arena is None:
            return
        for seg in assembled.segments:
            if seg.handle == "":
                self.arena.discard(seg, "failed")
            else:  # the kept result's staged segment: still unsent, still its own
                self.arena.take_back(seg)

    def drop(self, segments, why: str, *, unread_too: bool = False) -> None:
        if self.arena is not None and segments:
            self.arena.drop_handle(segments, why, unread_too=unread_too)

    def reap(self) -> None:
        if self.arena is not None:
            self.arena.reap()

    def info(self) -> pb.GetServerInfoResponse:
        a = self.arena
        resp = pb.GetServerInfoResponse(
            shm_namespace_id=a.namespace_id if a else "",
            shm_owner_id=a.owner_id if a else "",
            default_transport=TRANSPORT_VALUES[self.transport],
            default_shm_min_bytes=self.min_bytes,
            shm_budget_bytes=a.budget if a else 0,
            shm_bytes=a.bytes if a else 0,
            shm_lease_s=a.lease_s if a else 0.0,
            max_send_bytes=self.max_send_bytes or 0,
            smg_grpc_proto_version=_proto_version(),
        )
        if a is not None:
            s = a.stats()
            resp.shm.segments, resp.shm.peak_bytes = s["segments"], s["peak_bytes"]
            resp.shm.written, resp.shm.handed_out, resp.shm.read = s["written"], s["handed_out"], s["read"]
            resp.shm.inline_fallbacks, resp.shm.reused = s["inline_fallbacks"], s["reused"]
            for why, n in s["removed"].items():
                resp.shm.removed[why] = n
        return resp


def _staged(backend: str | None, dtype: str, images: int, videos: int) -> frozenset[str]:
    """The pixel tensors a payload to ``backend`` (None: not known yet) can hand out whole
    in the dtype the kernels write (float32, or uint8 raw pixels): vLLM's (each
    modality's batch carries all of its tensor), TokenSpeed's where one item is all of
    it (one image, one video; several items are several segments); none in another
    dtype (the payload converts as it copies)."""
    if backend not in (None, *asm.SHM_BACKENDS):
        return frozenset()  # its payload has no shared memory
    if (dtype or (asm.DEFAULT_PIXEL_DTYPE[backend] if backend else "float32")) not in asm.KERNEL_DTYPES:
        return frozenset()
    if backend == "tokenspeed":
        return frozenset(t for t, n in zip(STAGEABLE, (images, videos)) if n == 1)
    return frozenset(STAGEABLE)


class Stager:
    """Allocates a Preprocess's pixel tensors in shared memory (the driver's ``allocate``),
    one segment per tensor named in ``tensors``: the kernels write them there, and the
    payload hands them out."""

    def __init__(self, arena: ShmArena, min_bytes: int, tensors=STAGEABLE):
        self.arena = arena
        self.min_bytes = min_bytes
        self.tensors = frozenset(tensors)
        self.segments: dict[str, Segment] = {}  # tensor name -> its staged segment

    def __call__(self, shape: tuple[int, ...], tensor: str = "pixel_values", dtype=np.float32) -> np.ndarray | None:
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if tensor not in self.tensors or tensor in self.segments or nbytes == 0 or nbytes < self.min_bytes:
            return None
        seg = self.arena.create(nbytes)
        if seg is None:
            return None  # no room: the driver allocates as usual, the payload goes inline
        self.segments[tensor] = seg
        return seg.buffer().view(dtype).reshape(shape)

    def keep(self, handle: str) -> None:
        """The staged segments, written, now belong to the kept result ``handle``."""
        for seg in self.segments.values():
            seg.handle = handle
            self.arena.written(seg)

    def abandon(self, why: str) -> None:
        """Nothing keeps the segments and no payload handed them out: remove them."""
        segments, self.segments = self.segments, {}
        for seg in segments.values():
            if seg.state == STAGED:
                self.arena.discard(seg, why)


def _proto_version() -> str:
    try:
        return version("smg-grpc-proto")
    except PackageNotFoundError:
        return ""
