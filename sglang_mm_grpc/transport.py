"""How a call's payload tensors travel: its PayloadOptions against the server's defaults.

* the pixel dtype (``WireDtype``; the backend's default when unspecified);
* the transport: inline, SHM, or AUTO (SHM only when the caller's ``shm_namespace_id``
  equals this server's, the gateway's rule) for vLLM and TokenSpeed, with the minimum
  size below which a tensor stays inline; unspecified takes the server's default
  (``serve --tensor-transport`` / ``$SMG_MM_TENSOR_TRANSPORT``, ``--shm-min-bytes`` /
  ``$SMG_MM_SHM_MIN_BYTES``), which applies where the backend can use it;
* staging: a Preprocess whose options lead to a float32 SHM pixel tensor has the kernels
  write it straight into a segment (``Stager``), which the payload then hands out;
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

from . import assemble as asm
from . import wire
from ._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from .errors import Code, PreprocessError
from .shm import DEFAULT_MIN_BYTES, Segment, ShmArena

log = logging.getLogger(__name__)

TRANSPORTS = {
    pb.TENSOR_TRANSPORT_INLINE: "inline",
    pb.TENSOR_TRANSPORT_SHM: "shm",
    pb.TENSOR_TRANSPORT_AUTO: "auto",
}
TRANSPORT_VALUES = {v: k for k, v in TRANSPORTS.items()}
ENV_TRANSPORT = "SMG_MM_TENSOR_TRANSPORT"
ENV_MIN_BYTES = "SMG_MM_SHM_MIN_BYTES"


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
    """A call's options after the defaults: what ``assemble`` gets, and whether a
    Preprocess should stage its pixel tensor in shared memory."""

    wire: asm.WireOptions
    stage: bool


class Transport:
    """The server's transport settings and its segments (``arena``; None: no /dev/shm)."""

    def __init__(self, arena: ShmArena | None, *, transport: str = "inline", min_bytes: int = DEFAULT_MIN_BYTES,
                 max_send_bytes: int | None = None):
        self.arena = arena
        self.transport = transport
        self.min_bytes = int(min_bytes)
        self.max_send_bytes = max_send_bytes

    def resolve(self, options: pb.PayloadOptions, backend: int | None, images: int = 0) -> Resolved:
        """``options`` for a payload to ``backend`` (None: not known yet, a two-phase Preprocess)
        of ``images`` images (0: not known)."""
        dtype = asm.parse_pixel_dtype(options.pixel_dtype)
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
        shm = self.arena is not None and (
            mode == "shm" or (mode == "auto" and bool(options.shm_namespace_id)
                              and options.shm_namespace_id == self.arena.namespace_id))
        name = asm.BACKEND_NAMES.get(backend) if backend else None
        wire_options = asm.WireOptions(dtype, shm, min_bytes, shm_required=named == "shm")
        if backend:
            asm.check_options(backend, wire_options)  # refused before anything is fetched
        # staged only where a payload can hand the whole float32 tensor out: vLLM's pixel
        # values, or TokenSpeed's one item (several items are several segments)
        whole = name is None or name == "vllm" or (name == "tokenspeed" and images == 1)
        stage = shm and whole and (dtype or (asm.DEFAULT_PIXEL_DTYPE[name] if name else "float32")) == "float32"
        return Resolved(wire_options, stage)

    def stager(self, resolved: Resolved) -> "Stager | None":
        if not resolved.stage or self.arena is None:
            return None
        return Stager(self.arena, resolved.wire.shm_min_bytes)

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
            resp.shm.inline_fallbacks = s["inline_fallbacks"]
            for why, n in s["removed"].items():
                resp.shm.removed[why] = n
        return resp


class Stager:
    """Allocates a Preprocess's pixel tensor in a shared-memory segment (the driver's
    ``allocate``): the kernels write it there, and the payload hands it out."""

    def __init__(self, arena: ShmArena, min_bytes: int):
        self.arena = arena
        self.min_bytes = min_bytes
        self.segment: Segment | None = None

    def __call__(self, shape: tuple[int, ...]) -> np.ndarray | None:
        nbytes = int(np.prod(shape, dtype=np.int64)) * 4
        if nbytes == 0 or nbytes < self.min_bytes or self.segment is not None:
            return None
        seg = self.arena.create(nbytes)
        if seg is None:
            return None  # no room: the driver allocates as usual, the payload goes inline
        self.segment = seg
        return seg.buffer().view(np.float32).reshape(shape)

    def keep(self, handle: str) -> Segment | None:
        """The staged segment, written, now belongs to the kept result ``handle``."""
        if self.segment is not None:
            self.segment.handle = handle
            self.arena.written(self.segment)
        return self.segment

    def abandon(self, why: str) -> None:
        """Nothing keeps the segment and no payload handed it out: remove it."""
        seg, self.segment = self.segment, None
        if seg is not None and seg.state == "staged":
            self.arena.discard(seg, why)


def _proto_version() -> str:
    try:
        return version("smg-grpc-proto")
    except PackageNotFoundError:
        return ""
