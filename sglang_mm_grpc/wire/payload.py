"""What the four backend modules (``wire.backends``) share, below both them and the dispatch
(``wire.assemble``): the options and the result of one assembly, the per-backend facts
the dispatch reads, the tensor placer, an output cut into modalities, item hashes and
the dtype rules that more than one backend follows.

Large tensors are not copied into the message: the placer leaves them out of the
payload and appends a *tail* (``wire.Hole`` parts: the array, its wire dtype) that the
serializer writes after the message, converting while it copies (``wire.encode``); or,
over shared memory, the tensor is written into a segment and the message carries its
handle.

A video's item hash (vLLM ``mm_hashes``, TokenSpeed ``content_hash``) is ``video_item_hash``:
blake3 over its bytes' hash, the sampled frame indices and the resized size, since one
file sampled at another fps is another encoder input (vLLM keys its encoder cache by it).
An image's is ``image_item_hash``: its bytes' hash while its effective options are the
model's defaults (what routers and the gateway hash), else blake3 over the bytes' hash
and those options, so the same bytes preprocessed another way are another item.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, cast

import numpy as np
from smg_grpc_proto.generated import common_pb2

from . import tensors, serialize as wire
from .._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from ..core.carriers import ImageOptions, ImageResult, PreprocessOutput
from ..core.errors import Code, PreprocessError
from ..core.hashing import keyed_hash
from .shm import DEFAULT_MIN_BYTES, STAGED, Segment, ShmArena

#: Wire dtypes the kernels write themselves (a staged segment in one of them is handed out as is).
KERNEL_DTYPES = ("float32", "uint8")
UINT32_MAX = 2**32 - 1
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class WireOptions:
    """How one payload's tensors travel, resolved by the caller (the servicer applies its
    defaults and the shm namespace check)."""

    pixel_dtype: str = ""  # "" = the backend's default; else float32 | bfloat16 | float16 | uint8
    shm: bool = False  # tensors of shm_min_bytes or more go to /dev/shm (vLLM, TokenSpeed)
    shm_min_bytes: int = DEFAULT_MIN_BYTES
    shm_required: bool = False  # the caller asked for SHM by name: refuse backends without it
    pixel_dtype_source: str = "payload_options.pixel_dtype"  # who asked for pixel_dtype (messages)

    @property
    def dtype_named(self) -> bool:
        return bool(self.pixel_dtype)


@dataclass
class Assembled:
    """A payload: the message (without its large inline tensors), the tail that carries
    them (``wire`` parts, appended to the serialized BackendPayload), and the shared-memory
    segments it hands out."""

    payload: pb.BackendPayload
    tail: list = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)

    @property
    def tail_nbytes(self) -> int:
        return wire.parts_nbytes(self.tail)

    def message(self) -> pb.BackendPayload:
        """The complete message (its tensors copied in): for in-process callers and tests."""
        if not self.tail:
            return self.payload
        return pb.BackendPayload.FromString(wire.encode([self.payload.SerializeToString(), *self.tail]))


@dataclass(frozen=True)
class Job:
    """One payload's inputs, as every backend's ``build`` takes them (``assemble``'s
    arguments, the pixel dtype already checked)."""

    out: PreprocessOutput
    field_layout: Any  # the family's FieldLayout of the image tensors
    video_field_layout: Any  # ... of the video tensors (None: the model has none)
    dtype: str  # the pixel tensors' wire dtype
    image_defaults: ImageOptions | None
    audio_field_layout: Any = None  # ... of the audio tensors (None: the model takes none)


@dataclass(frozen=True)
class Backend:
    """One backend as the dispatch and the option checks see it; its module fills it in,
    so what a backend refuses, and why, sits next to the payload it builds. The refusal
    texts finish a sentence the checks begin ("X cannot take ...: <why>")."""

    name: str  # as requests, metrics and the CLI spell it
    enum: pb.Backend  # its Backend enum value
    label: str  # as messages name it
    build: Callable[[Job, pb.BackendPayload, "Placer"], None]  # fills the payload's oneof
    default_dtype: str  # the pixel dtype when the request names none (the gateway's own)
    #: The engine runs its own processor on the encoded images: it gets the unexpanded
    #: ids and no pixel tensor, so no pixel dtype or raw-pixel rule applies.
    own_processor: bool = False
    pixel_dtypes: tuple[str, ...] = ()  # the only pixel dtypes it takes (empty: all)
    dtype_refusal: str = ""  # why not another one ({dtype}: the one asked for)
    no_shm: str = ""  # why its TensorData cannot carry a shared-memory handle ("": it can)
    no_raw: str = ""  # why it cannot take raw uint8 pixels ("": it can)
    no_video: str = ""  # why it cannot take videos ("": it can)
    no_audio: str = ""  # why it cannot take audio clips ("": it can)


# -- item hashes -------------------------------------------------------------------------


def videos_of(out) -> list:
    """``out.videos`` (empty for an output without videos)."""
    return list(getattr(out, "videos", None) or ())


def video_item_hash(video) -> str:
    """The hex id a backend caches a video's encoder output under: blake3 over its bytes'
    hash, the sampled frame indices and the resized size (what decides its pixels for one
    model), so the same file sampled another way is another item."""
    frames = ",".join(str(int(i)) for i in video.frame_indices)
    return keyed_hash(f"video:{video.hash}:frames={frames}:size={video.resized_height}x{video.resized_width}")


def image_item_hash(image: ImageResult, defaults: ImageOptions | None) -> str:
    """The hex id a backend caches an image's encoder output under: its bytes' hash when
    it was preprocessed with the model's default options (``defaults``, or unknown), else
    blake3 over ``image:<bytes hash>:`` and its effective options (``name=value``, by name,
    comma-separated), since other pixel bounds or another detail make other pixels."""
    options = image.options
    if defaults is None or options is None or options == defaults:
        return image.hash
    fields = ",".join(f"{k}={v}" for k, v in sorted(options.as_dict().items()))
    return keyed_hash(f"image:{image.hash}:{fields}")


# -- an output by modality ---------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """One modality's part of an output: what a vLLM batch or TokenSpeed's items of that
    modality are cut from."""

    modality: int  # common_pb2.IMAGE / VIDEO / AUDIO
    results: list  # ImageResult / VideoResult / AudioResult
    pixels: np.ndarray
    pixels_key: str  # the pixel tensor's name in the layout
    tensors: dict
    layout: Any  # FieldLayout
    token_id: int
    item_hash: Callable  # result -> its hex item id (``image_item_hash`` / ``video_item_hash``)


def sources(job: Job, no_video_layout: str) -> Iterator[Source]:
    """The images' source, then the videos' (each only when present). Lazy, so each backend
    keeps its own order of refusals: the videos' layout is checked (INTERNAL
    ``no_video_layout``) when their source is reached, after vLLM built the images' batch,
    or before any item where TokenSpeed lists the sources first."""
    out = job.out
    if out.images:
        yield Source(common_pb2.IMAGE, out.images, out.pixel_values, "pixel_values", out.tensors, job.field_layout,
                     out.image_token_id, lambda im: image_item_hash(im, job.image_defaults))
    if videos_of(out):
        if job.video_field_layout is None:
            raise PreprocessError(Code.INTERNAL, no_video_layout)
        # the videos' pixels and token id are set whenever there are videos
        yield Source(common_pb2.VIDEO, videos_of(out), cast(np.ndarray, out.pixel_values_videos), "pixel_values_videos",
                     dict(out.video_tensors), job.video_field_layout, cast(int, out.video_token_id), video_item_hash)
    if audios_of(out):
        layout = job.audio_field_layout
        if layout is None:
            raise PreprocessError(Code.INTERNAL, "this model declares no layout for its audio tensors")
        key = layout.encoder_input_key
        tensors = {k: v for k, v in out.audio_tensors.items() if k != key}
        # the encoder input in the pixel dtypes (integer features, e.g. dMel bins, exactly as floats,
        # as the gateway sends Inkling's)
        features = np.asarray(out.audio_tensors[key])
        features = features.astype(np.float32) if features.dtype.kind in "iub" else features
        yield Source(common_pb2.AUDIO, audios_of(out), features, key, tensors, layout,
                     cast(int, out.audio_token_id), audio_item_hash)


def audios_of(out) -> list:
    """``out.audios`` (empty for an output without audio clips)."""
    return list(getattr(out, "audios", None) or ())


def audio_item_hash(audio) -> str:
    """The hex id a backend caches a clip's encoder output under: its bytes' hash with the
    model's default options, else blake3 over it and the truncation asked."""
    options = audio.options
    if options is None or options.max_seconds is None:
        return audio.hash
    return keyed_hash(f"audio:{audio.hash}:max_seconds={options.max_seconds}")


def patch_runs(result) -> tuple:
    """An item's placeholder runs for a backend that embeds patches only; an expansion
    without any (no family makes one) falls back to its whole range, as the gateway does."""
    return result.patch_ranges or (result.structural_range,)


# -- values ------------------------------------------------------------------------------


def token_id(value: int) -> int:
    """A placeholder token id for the wire's ``uint32`` (INTERNAL when it does not fit)."""
    if not 0 <= int(value) <= UINT32_MAX:
        raise PreprocessError(Code.INTERNAL, f"image token id {value} does not fit in uint32")
    return int(value)


def vllm_tensor(name: str, arr: np.ndarray) -> np.ndarray:
    """float32, int64 or uint32: what every vLLM and TokenSpeed servicer version reads."""
    if arr.dtype.kind == "f":
        return arr.astype(np.float32, copy=False)
    if arr.dtype == np.uint32:
        return arr
    if arr.dtype.kind in "iub":
        return as_int64(name, arr)
    raise PreprocessError(Code.INTERNAL, f"tensor {name!r} has dtype {arr.dtype}, which vLLM cannot take")


def as_int64(name: str, arr: np.ndarray) -> np.ndarray:
    """An integer or bool tensor as int64 (INTERNAL for uint64 values beyond it)."""
    if arr.dtype == np.uint64 and arr.size and int(arr.max()) > _INT64_MAX:
        raise PreprocessError(Code.INTERNAL, f"tensor {name!r} holds values beyond int64")
    return arr.astype(np.int64, copy=False)


# -- placing tensors ---------------------------------------------------------------------


class Placer:
    """Puts each tensor of a payload inline (directly, or in the tail) or into shared memory."""

    def __init__(self, res: Assembled, options: WireOptions, arena: ShmArena | None,
                 staged: Mapping[str, Segment] | None):
        self.res = res
        self.options = options
        self.arena = arena if options.shm else None
        self.staged = list((staged or {}).values())  # the kept result's, by tensor

    def small(self, td, arr: np.ndarray) -> None:
        """A model-specific tensor (its own dtype), inline or in shared memory."""
        arr = np.ascontiguousarray(arr)
        name = tensors.wire_dtype_name(arr.dtype)
        seg = self._segment(arr.nbytes)
        if seg is None:
            tensors.fill(td, arr)
            return
        seg.buffer()[:] = arr.astype(arr.dtype.newbyteorder("<"), copy=False).reshape(-1).view(np.uint8)
        self._shm(td, seg, arr.shape, name)

    def large(self, td, path: tuple[int, ...], arr: np.ndarray, dtype: str) -> None:
        """A pixel tensor converted to ``dtype`` while it is copied once: into a segment, or
        into the serialized message (a ``wire.Hole`` in the tail at field ``path`` of the
        payload); none when a staged segment holds exactly it, which is handed out."""
        arr = np.asarray(arr)
        nbytes = arr.size * wire.WIDTHS[dtype]
        staged = self._staged(arr, dtype)  # handed out once; later payloads copy
        if staged is not None and (handle := self._shared.hand_out_staged(staged)) is not None:
            self.res.segments.append(staged)
            td.shm.name, td.shm.offset, td.shm.nbytes, td.shm.owner_id = handle
            _shape(td, arr.shape, dtype)
            return
        seg = self._segment(nbytes)
        if seg is None:
            _shape(td, arr.shape, dtype)
            self.res.tail.append(wire.nest(path, wire.Hole(arr, dtype)))
            return
        wire.cast_into(arr, seg.buffer(), dtype)
        self._shm(td, seg, arr.shape, dtype)

    def whole(self, number: int, msg, fill: Callable[[], None]) -> list:
        """``msg``, filled by ``fill``, as one occurrence of field ``number`` that travels
        whole in the tail, the tail parts ``fill`` makes (its pixels) inside it: occurrences
        of a repeated field do not merge, so its pixels cannot follow it separately."""
        saved, self.res.tail = self.res.tail, []
        try:
            fill()
            parts = self.res.tail
        finally:
            self.res.tail = saved
        return wire.field(number, [msg.SerializeToString(), *parts])

    def _staged(self, arr: np.ndarray, dtype: str) -> Segment | None:
        """The staged segment whose memory ``arr`` is, all of it, when the payload can hand
        it out as is (in the dtype the kernels wrote, shared memory, not handed out yet,
        not under the minimum)."""
        if self.arena is None or dtype not in KERNEL_DTYPES or arr.dtype != np.dtype(dtype) \
                or not arr.flags.c_contiguous:
            return None
        if arr.nbytes == 0 or arr.nbytes < self.options.shm_min_bytes:
            return None
        address = arr.ctypes.data
        for seg in self.staged:
            if seg.state == STAGED and seg.nbytes == arr.nbytes and _address(seg) == address:
                return seg
        return None

    @property
    def _shared(self) -> ShmArena:
        """The arena, for a segment it made (no segment is staged or made without one)."""
        assert self.arena is not None
        return self.arena

    def _segment(self, nbytes: int) -> Segment | None:
        if self.arena is None or nbytes == 0 or nbytes < self.options.shm_min_bytes:
            return None
        seg = self.arena.create(nbytes)
        if seg is not None:
            self.res.segments.append(seg)
        return seg

    def _shm(self, td, seg: Segment, shape, dtype: str) -> None:
        name, offset, nbytes, owner = self._shared.hand_out(seg)
        td.shm.name, td.shm.offset, td.shm.nbytes, td.shm.owner_id = name, offset, nbytes, owner
        _shape(td, shape, dtype)

    def abandon(self) -> None:
        """The payload will not be sent: remove the segments written for it (a kept
        result's staged segment is its own again)."""
        for seg in self.res.segments:
            if self.arena is None:
                break
            if seg.handle == "" and seg.state != "gone":
                self.arena.discard(seg, "failed")
            elif seg.handle:
                self.arena.take_back(seg)
        self.res.segments.clear()


def _address(seg: Segment) -> int | None:
    """Where ``seg`` is mapped here (None: not mapped any more)."""
    m = seg.map
    try:
        return np.frombuffer(m, dtype=np.uint8, count=1).ctypes.data if m is not None else None
    except ValueError:  # closed meanwhile
        return None


def _shape(td, shape, dtype: str) -> None:
    del td.shape[:]
    td.shape.extend(int(d) for d in shape)
    td.dtype = dtype
