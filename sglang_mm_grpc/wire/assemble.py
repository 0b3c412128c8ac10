"""Backend payloads, built from a PreprocessOutput in each backend's own wire format.

The messages are the gateway's own definitions (``smg-grpc-proto``); what each backend
needs is what its servicer in ``smg-grpc-servicer`` reads (docs/WIRE_CURRENT.md has the
evidence for every rule below):

* SGLang (``sglang.grpc.scheduler``): float32 ``pixel_values`` of all images,
  model-specific tensors as float32 or int64 only (servicers before smg-grpc-servicer
  0.14 read any other dtype string as float32), patch-only ranges, ``im_token_id``, the
  encoded images in ``image_data``, ``modalities=["image"]``, expanded ids. Its
  ``TensorData`` has plain ``data`` bytes: no shared memory, no narrower dtype.
* vLLM (``vllm.grpc.engine``): ``TensorData`` with its ``payload`` oneof always set
  (``inline`` or ``shm``, zero-size tensors included); structural ranges (one per image),
  the images' item hashes as ``mm_hashes``, the family's field layout as ``batched_keys``/``flat_keys``
  (every sizes tensor sent), ``keep_on_cpu_keys`` as vLLM declares them for the model,
  ``modality=IMAGE``, ``encoder_input_key`` where the model's kwarg for the pixel tensor
  is not ``pixel_values`` (and that name in the layout keys), ``im_token_id``, expanded
  ids. Pixel tensors as float32 (default), bfloat16 or float16, or raw uint8 for an
  engine that normalizes on the device (an output preprocessed raw: its pixels are
  uint8, and they go on the wire as uint8 only).
* TensorRT-LLM (``trtllm``): the encoded images and the unexpanded ids; it decodes the
  ids back to text and runs its own processor, which expands the placeholders.
* TokenSpeed (``tokenspeed.grpc.scheduler``): one item per image, each with its own
  encoder input (bfloat16 by default, as the gateway sends it), its rows of the
  model-specific tensors, its patch ranges, ``placeholder_token_id`` and
  ``content_hash`` = blake3 of the image's hex item hash (the gateway's ``hash_hex_strings``).

Videos (``out.videos``, docs/VIDEO.md), per backend as its servicer reads them:

* vLLM: a batch with ``modality=VIDEO`` (the servicer registers its ``pixel_values`` as
  ``pixel_values_videos``), the video tensors (``video_grid_thw``, ``patches_per_video``,
  Qwen2.5-VL's ``second_per_grid_ts``) laid out by the family's ``video_field_layout``,
  the videos' structural ranges, ``im_token_id`` = the video token (its is_embed mask).
  One batch per modality: videos alone go in ``vllm`` (``mm_inputs``); with images, the
  image batch stays in ``vllm`` and the video batch goes to ``vllm_extra``
  (``GenerateRequest.extra_mm_inputs``, read by ``mm_keys.mm_batches``).
* TokenSpeed: one item per video (``modality=VIDEO``, its rows of the tensors, its patch
  runs, ``placeholder_token_id`` = the video token), items in prompt order.
* SGLang and TensorRT-LLM: refused (FAILED_PRECONDITION): their servicers take images only.

A video's item hash (vLLM ``mm_hashes``, TokenSpeed ``content_hash``) is ``video_item_hash``:
blake3 over its bytes' hash, the sampled frame indices and the resized size, since one
file sampled at another fps is another encoder input (vLLM keys its encoder cache by it).
An image's is ``image_item_hash``: its bytes' hash while its effective options are the
model's defaults (what routers and the gateway hash), else blake3 over the bytes' hash
and those options, so the same bytes preprocessed another way are another item.

Large tensors are not copied into the message: ``assemble`` returns the payload without
them and a *tail* (``wire.Hole`` parts: the array, its wire dtype) that the serializer
writes after the message, converting while it copies (``wire.encode``); or, over shared
memory, the tensor is written into a segment and the message carries its handle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np
from smg_grpc_proto.generated import common_pb2
from smg_grpc_proto.generated import sglang_scheduler_pb2 as sglang_pb
from smg_grpc_proto.generated import tokenspeed_scheduler_pb2 as tokenspeed_pb
from smg_grpc_proto.generated import trtllm_service_pb2 as trtllm_pb
from smg_grpc_proto.generated import vllm_engine_pb2 as vllm_pb

from . import tensors, serialize as wire
from .._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from ..core.carriers import ImageOptions, ImageResult, PreprocessOutput
from ..core.errors import Code, PreprocessError
from ..core.hashing import hash_of_hashes, keyed_hash
from .shm import DEFAULT_MIN_BYTES, STAGED, Segment, ShmArena

BACKENDS: dict[str, int] = {
    "sglang": pb.BACKEND_SGLANG,
    "vllm": pb.BACKEND_VLLM,
    "trtllm": pb.BACKEND_TRTLLM,
    "tokenspeed": pb.BACKEND_TOKENSPEED,
}
BACKEND_NAMES = {v: k for k, v in BACKENDS.items()}
#: Wire dtypes by enum value, and the names the servicers' dtype table uses.
WIRE_DTYPES = {
    pb.WIRE_DTYPE_FLOAT32: "float32",
    pb.WIRE_DTYPE_BFLOAT16: "bfloat16",
    pb.WIRE_DTYPE_FLOAT16: "float16",
    pb.WIRE_DTYPE_UINT8: "uint8",
}
#: Wire dtypes the kernels write themselves (a staged segment in one of them is handed out as is).
KERNEL_DTYPES = ("float32", "uint8")
#: The pixel dtype each backend gets when the request names none (the gateway's own).
DEFAULT_PIXEL_DTYPE = {"sglang": "float32", "vllm": "float32", "trtllm": "", "tokenspeed": "bfloat16"}
#: Backends whose TensorData can carry a shared-memory handle.
SHM_BACKENDS = ("vllm", "tokenspeed")
_UINT32_MAX = 2**32 - 1
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


def parse_backend(value) -> int:
    """``"vllm"``, ``"BACKEND_VLLM"`` or the enum number -> the Backend enum number."""
    if isinstance(value, str):
        key = value.lower().removeprefix("backend_")
        if key in BACKENDS:
            return BACKENDS[key]
        raise PreprocessError(Code.INVALID_ARGUMENT, f"unknown backend {value!r}; use one of {', '.join(BACKENDS)}")
    if int(value) in BACKEND_NAMES:
        return int(value)
    raise PreprocessError(
        Code.INVALID_ARGUMENT,
        f"backend {value} is not one of {', '.join(f'{n}={v}' for n, v in BACKENDS.items())}",
    )


def parse_pixel_dtype(value) -> str:
    """A WireDtype enum value or name, or a dtype name -> "" (unspecified) or the wire name."""
    if value in (None, "", 0, pb.WIRE_DTYPE_UNSPECIFIED):
        return ""
    if isinstance(value, str):
        key = value.lower().removeprefix("wire_dtype_")
        key = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "f32": "float32",
               "raw": "uint8"}.get(key, key)
        if key in WIRE_DTYPES.values():
            return key
        raise PreprocessError(Code.INVALID_ARGUMENT,
                              f"unknown pixel dtype {value!r}; use one of {', '.join(WIRE_DTYPES.values())}")
    if int(value) in WIRE_DTYPES:
        return WIRE_DTYPES[int(value)]
    raise PreprocessError(Code.INVALID_ARGUMENT, f"pixel_dtype {value} is not a WireDtype value")


def assemble(
    out: PreprocessOutput,
    backend,
    field_layout,
    into: pb.BackendPayload | None = None,
    *,
    options: WireOptions | None = None,
    arena: ShmArena | None = None,
    staged: Mapping[str, Segment] | None = None,
    video_field_layout=None,
    image_defaults: ImageOptions | None = None,
) -> Assembled:
    """The payload a router puts into the chosen backend's GenerateRequest.

    ``into``: fill this (empty) message instead of a new one (a response's ``payload``).
    ``field_layout``: the model's vLLM layout (``families.FieldLayout`` values).
    ``arena``: where SHM segments come from (``options.shm``); ``staged``: segments that
    already hold pixel tensors of ``out`` (written there by Preprocess, float32 or raw
    uint8; by tensor name), each handed out instead of a copy when an SHM tensor of the
    payload in that dtype is exactly its memory (vLLM's batch, TokenSpeed's lone item of a modality).
    ``video_field_layout``: the model's vLLM layout of the video tensors (with videos).
    ``image_defaults``: the effective options of an image preprocessed with none (the
    model's ``family.effective_options(None)``): an image whose options differ gets an
    item hash over them (``image_item_hash``); None: every image's is its bytes' hash.
    Refusals: FAILED_PRECONDITION for an option, model or modality the backend's consumer
    cannot take (the message says why and what works)."""
    b = parse_backend(backend)
    name = BACKEND_NAMES[b]
    options = options or WireOptions()
    dtype = check_options(b, options, raw=is_raw(out))
    check_videos(b, len(videos_of(out)))
    msg = pb.BackendPayload() if into is None else into
    msg.backend = b
    res = Assembled(msg)
    place = _Placer(res, options if name in SHM_BACKENDS else WireOptions(), arena, staged)
    try:
        if name == "sglang":
            msg.input_ids.extend(token_ids(out.input_ids))
            sglang_inputs(out, msg.sglang, place)
        elif name == "vllm":
            msg.input_ids.extend(token_ids(out.input_ids))
            if out.images:
                vllm_inputs(out, field_layout, msg.vllm, place, dtype, image_defaults)
            if videos_of(out):
                vllm_video_batch(out, video_field_layout, msg, place, dtype, extra=bool(out.images))
        elif name == "tokenspeed":
            msg.input_ids.extend(token_ids(out.input_ids))
            tokenspeed_inputs(out, field_layout, msg.tokenspeed, place, dtype, video_field_layout, image_defaults)
        else:
            msg.input_ids.extend(token_ids(out.original_input_ids))
            trtllm_input(out, msg.trtllm)
    except BaseException:
        place.abandon()
        raise
    return res


_LABEL = {"sglang": "SGLang", "vllm": "vLLM", "trtllm": "TensorRT-LLM", "tokenspeed": "TokenSpeed"}
_NO_SHM = {
    "sglang": "its TensorData (sglang_scheduler.proto) has only inline data bytes",
    "trtllm": "it receives the encoded images, not tensors",
}


def check_options(backend, options: WireOptions, raw: bool | None = None) -> str:
    """The pixel wire dtype ``backend`` gets under ``options`` for an output whose pixels
    are ``raw`` uint8 or not (None: not made yet, they will be raw when uint8 is asked),
    or FAILED_PRECONDITION for an option its consumer cannot take (checked before any
    work by the servicer, and again when assembling)."""
    name = BACKEND_NAMES[parse_backend(backend)]
    dtype = _pixel_dtype(name, options, raw)
    if options.shm_required and name not in SHM_BACKENDS:
        raise PreprocessError(
            Code.FAILED_PRECONDITION,
            f"{_LABEL[name]} payloads cannot use shared memory: {_NO_SHM[name]}; "
            f"ask for TENSOR_TRANSPORT_INLINE or AUTO, or use vLLM or TokenSpeed",
        )
    return dtype


#: Why a backend cannot take raw uint8 pixels: its engine normalizes on the host.
_NO_RAW = {
    "sglang": "its servicer hands pixel_values to the model as the normalized tensor its own processor "
              "would make, and SGLang normalizes no pixels on the device",
    "tokenspeed": "its servicer casts the encoder input to the model dtype and TokenSpeed normalizes no pixels "
                  "on the device",
    "trtllm": "it receives the encoded images, not tensors",
}

#: Why a backend cannot take videos: what its servicer reads.
_NO_VIDEO = {
    "sglang": (
        "SGLang's gRPC servicer takes images only: smg_grpc_servicer/sglang/servicer.py `_parse_mm_inputs` "
        "turns every payload into one MultimodalDataItem with modality=IMAGE from pixel_values and never "
        "reads video_data, video_urls or modalities, so a video's tensors would reach the image encoder "
        "(the gateway routes no video to SGLang either: model_gateway/src/routers/grpc/multimodal/capability.rs)"
    ),
    "trtllm": (
        "TensorRT-LLM's gRPC servicer takes images only: trtllm_service.proto's MultimodalInput carries only "
        "image_data, and tensorrt_llm/grpc/smg/servicer.py passes multi_modal_data={'image': ...} to the engine"
    ),
}


def check_videos(backend, videos: int) -> None:
    """FAILED_PRECONDITION when the request has videos and ``backend``'s consumer takes
    none (checked before any work by the servicer, and again when assembling)."""
    name = BACKEND_NAMES[parse_backend(backend)]
    if videos and name in _NO_VIDEO:
        raise PreprocessError(
            Code.FAILED_PRECONDITION,
            f"{_LABEL[name]} cannot take this request's {videos} video(s): {_NO_VIDEO[name]}. "
            "Use the vLLM or TokenSpeed backend for videos, or send the images without the videos",
        )


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


def is_raw(out) -> bool:
    """Whether ``out``'s pixel tensors are raw uint8 (preprocessed for an engine that
    normalizes on the device) rather than normalized floats."""
    return out.pixel_values.dtype == np.uint8 or (bool(videos_of(out)) and out.pixel_values_videos.dtype == np.uint8)


def _pixel_dtype(backend: str, options: WireOptions, raw: bool | None = None) -> str:
    """The pixel tensor's wire dtype for this backend, or FAILED_PRECONDITION."""
    if raw is None:
        raw = options.pixel_dtype == "uint8"
    dtype = options.pixel_dtype or ("uint8" if raw and backend != "trtllm" else DEFAULT_PIXEL_DTYPE[backend])
    if dtype == "uint8" and backend in _NO_RAW:
        who = f"{options.pixel_dtype_source} asks for them" if options.pixel_dtype else "this result was preprocessed raw"
        raise PreprocessError(
            Code.FAILED_PRECONDITION,
            f"{_LABEL[backend]} cannot take raw uint8 pixels ({who}): "
            f"{_NO_RAW[backend]}; use vLLM for raw pixels, or ask for float pixels")
    if backend != "trtllm" and raw and dtype != "uint8":
        raise PreprocessError(
            Code.FAILED_PRECONDITION,
            f"this result's pixels were kept raw (uint8, neither rescaled nor normalized: its Preprocess asked for "
            f"WIRE_DTYPE_UINT8 or named a worker that normalizes on the device), and {options.pixel_dtype_source} "
            f"asks for {dtype}, which {_LABEL[backend]} would read as normalized values; assemble it for a worker "
            "that normalizes on the device (uint8), or Preprocess again without asking for raw pixels")
    if backend != "trtllm" and not raw and dtype == "uint8":
        raise PreprocessError(
            Code.FAILED_PRECONDITION,
            f"{options.pixel_dtype_source} asks for raw uint8 pixels, but this result's pixels were rescaled and "
            "normalized at Preprocess, and an engine that normalizes on the device would normalize them twice; "
            "Preprocess with payload_options.pixel_dtype WIRE_DTYPE_UINT8 (or the worker's server info) to keep "
            "raw pixels")
    if backend == "trtllm" and dtype not in ("", "float32"):
        raise PreprocessError(
            Code.FAILED_PRECONDITION,
            f"TensorRT-LLM payloads carry the encoded images, not tensors: pixel_dtype {dtype} does not apply; "
            "leave it unspecified",
        )
    if backend == "sglang" and dtype != "float32":
        raise PreprocessError(
            Code.FAILED_PRECONDITION,
            f"SGLang payloads carry float32 pixel values only: SGLang's servicer before smg-grpc-servicer 0.14 "
            f"reads any dtype but float32 and int64 as float32 bytes, and the gateway sends it float32; "
            f"ask for WIRE_DTYPE_FLOAT32 (or leave it unspecified), or use vLLM or TokenSpeed for {dtype}",
        )
    return dtype


class _Placer:
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
        staged = self._staged(arr, dtype)
        handle = self.arena.hand_out_staged(staged) if staged is not None else None  # once; later payloads copy
        if handle is not None:
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

    def _segment(self, nbytes: int) -> Segment | None:
        if self.arena is None or nbytes == 0 or nbytes < self.options.shm_min_bytes:
            return None
        seg = self.arena.create(nbytes)
        if seg is not None:
            self.res.segments.append(seg)
        return seg

    def _shm(self, td, seg: Segment, shape, dtype: str) -> None:
        name, offset, nbytes, owner = self.arena.hand_out(seg)
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


# -- SGLang ---------------------------------------------------------------------------------


def sglang_inputs(out: PreprocessOutput, into: sglang_pb.MultimodalInputs, place: _Placer) -> None:
    msg = into
    msg.modalities.append("image")
    msg.image_data.extend(out.raw_images)
    place.large(msg.pixel_values, _SGLANG_PIXELS, out.pixel_values, "float32")
    for name, arr in out.tensors.items():
        tensors.fill(msg.model_specific_tensors[name], _sglang_dtype(name, arr))
    msg.im_token_id = _token_id(out.image_token_id)
    for im in out.images:
        # Patch-only runs; an expansion without any (no family makes one) falls back to
        # its whole range, as the gateway does.
        for offset, length in im.patch_ranges or (im.structural_range,):
            msg.mm_placeholders.add(offset=offset, length=length)


_SGLANG_PIXELS = wire.field_path(pb.BackendPayload, ("sglang", "pixel_values", "data"))


# -- vLLM -----------------------------------------------------------------------------------


def vllm_inputs(out: PreprocessOutput, field_layout, into: vllm_pb.MultimodalInputs, place: _Placer,
                dtype: str = "float32", image_defaults: ImageOptions | None = None) -> None:
    msg = into
    _check_vllm_items(out, field_layout)
    key = getattr(field_layout, "encoder_input_key", "") or "pixel_values"

    def wire_key(k: str) -> str:  # the layout keys name the pixel tensor by the model's kwarg
        return key if k == "pixel_values" else k

    msg.modality = common_pb2.IMAGE
    if key != "pixel_values":
        msg.encoder_input_key = key
    msg.mm_hashes.extend(image_item_hash(im, image_defaults) for im in out.images)
    place.large(msg.pixel_values, _VLLM_PIXELS, out.pixel_values, dtype)
    for name, arr in out.tensors.items():
        place.small(msg.model_specific_tensors[name], _vllm_dtype(name, arr))
    _vllm_keys(msg, field_layout, "pixel_values", out.tensors, wire_key, "tensor")
    _vllm_placeholders(msg, out.image_token_id, out.images)


def _vllm_keys(msg: vllm_pb.MultimodalInputs, field_layout, pixels_key: str, tensors: dict, wire_key,
               what: str) -> None:
    """The batch's batched / flat / keep-on-CPU keys: the layout's keys of the tensors
    present (the pixels under ``pixels_key``, and ``tensors``), named as on the wire."""
    present = {pixels_key, *tensors}
    msg.batched_keys.extend(wire_key(k) for k in field_layout.batched if k in present)
    for k, sizes_key in field_layout.flat.items():
        if k not in present:
            continue
        if sizes_key not in tensors:
            raise PreprocessError(
                Code.INTERNAL, f"vLLM layout splits {k!r} by {sizes_key!r}, but no such {what} was produced"
            )
        msg.flat_keys[wire_key(k)] = wire_key(sizes_key)
    msg.keep_on_cpu_keys.extend(wire_key(k) for k in getattr(field_layout, "keep_on_cpu", ()) if k in present)


def _vllm_placeholders(msg: vllm_pb.MultimodalInputs, token_id: int, items) -> None:
    """The batch's token id and each item's whole expansion."""
    msg.im_token_id = _token_id(token_id)
    for item in items:
        offset, length = item.structural_range
        msg.mm_placeholders.add(offset=offset, length=length)


_VLLM_PIXELS = wire.field_path(pb.BackendPayload, ("vllm", "pixel_values", "inline"))
_VLLM_EXTRA = pb.BackendPayload.DESCRIPTOR.fields_by_name["vllm_extra"].number
_BATCH_PIXELS = wire.field_path(vllm_pb.MultimodalInputs, ("pixel_values", "inline"))


def vllm_video_batch(out, field_layout, msg: pb.BackendPayload, place: _Placer, dtype: str, *, extra: bool) -> None:
    """The videos' batch: in ``msg.vllm`` (videos alone), or with images as one
    ``vllm_extra`` entry, which travels whole in the tail (a repeated field's occurrences
    do not merge), its pixel tensor appended inside it."""
    if field_layout is None:
        raise PreprocessError(Code.INTERNAL, "this model declares no vLLM layout for its video tensors")
    if not extra:
        vllm_video_inputs(out, field_layout, msg.vllm, place, dtype, _VLLM_PIXELS)
        return
    batch = vllm_pb.MultimodalInputs()
    sub = _Tail()
    place.res.tail, saved = sub.parts, place.res.tail
    try:
        vllm_video_inputs(out, field_layout, batch, place, dtype, _BATCH_PIXELS)
    finally:
        place.res.tail = saved
    place.res.tail.append(wire.field(_VLLM_EXTRA, [batch.SerializeToString(), *sub.parts]))


def vllm_video_inputs(out, field_layout, msg: vllm_pb.MultimodalInputs, place: _Placer, dtype: str,
                      path: tuple[int, ...]) -> None:
    """One vLLM batch of every video: ``modality=VIDEO``, the pixels in ``pixel_values``
    (the servicer registers them as ``pixel_values_videos``; the layout keys name them
    ``pixel_values``, as the gateway does), the video tensors as the family lays them out."""
    videos = videos_of(out)
    pixels_key = "pixel_values_videos"

    def wire_key(k: str) -> str:
        return "pixel_values" if k == pixels_key else k

    video_tensors = out.video_tensors
    msg.modality = common_pb2.VIDEO
    msg.mm_hashes.extend(video_item_hash(v) for v in videos)
    place.large(msg.pixel_values, path, out.pixel_values_videos, dtype)
    for name, arr in video_tensors.items():
        place.small(msg.model_specific_tensors[name], _vllm_dtype(name, arr))
    _vllm_keys(msg, field_layout, pixels_key, video_tensors, wire_key, "video tensor")
    _vllm_placeholders(msg, out.video_token_id, videos)


def _check_vllm_items(out: PreprocessOutput, field_layout) -> None:
    """Refuse a padded batch for a model whose vLLM processor crops each item itself
    (the servicer's path skips the processor, so the tower would see the padding)."""
    sizes_key = getattr(field_layout, "unpadded_by", None)
    if not sizes_key or sizes_key not in out.tensors or out.pixel_values.ndim < 2:
        return
    sizes = np.asarray(out.tensors[sizes_key]).reshape(len(out.images), -1)
    full = tuple(int(d) for d in out.pixel_values.shape[-sizes.shape[1]:])
    padded = [i for i, s in enumerate(sizes.tolist()) if tuple(s) != full]
    if padded:
        shown = ", ".join(f"image {i} {'x'.join(map(str, sizes[i].tolist()))}" for i in padded[:4])
        raise PreprocessError(
            Code.FAILED_PRECONDITION,
            f"vLLM cannot take these images in one payload: this model's vLLM processor crops each image's "
            f"pixel_values to its own size before the vision tower, a step the gRPC servicer skips, and these "
            f"images were zero-padded to the batch's {'x'.join(map(str, full))} ({shown}), so the tower would "
            f"produce more image embeddings than the prompt has placeholders. Send images of one resized size "
            f"together, one image per request, or use the SGLang, TokenSpeed or TensorRT-LLM backend",
        )


# -- TokenSpeed -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Source:
    """One modality's part of an output, as TokenSpeed items are cut from it."""

    modality: int
    results: list  # ImageResult / VideoResult
    pixels: np.ndarray
    pixels_key: str  # the pixel tensor's name in the layout
    tensors: dict
    layout: object  # FieldLayout
    token_id: int
    item_hash: Callable  # result -> its hex item id (``image_item_hash`` / ``video_item_hash``)


def _ts_sources(out, field_layout, video_field_layout, image_defaults=None) -> list[_Source]:
    sources = []
    if out.images:
        sources.append(_Source(common_pb2.IMAGE, out.images, out.pixel_values, "pixel_values", out.tensors,
                               field_layout, out.image_token_id, lambda im: image_item_hash(im, image_defaults)))
    if videos_of(out):
        if video_field_layout is None:
            raise PreprocessError(Code.INTERNAL, "this model declares no layout for its video tensors")
        sources.append(_Source(common_pb2.VIDEO, videos_of(out), out.pixel_values_videos, "pixel_values_videos",
                               dict(out.video_tensors), video_field_layout, out.video_token_id, video_item_hash))
    return sources


def tokenspeed_inputs(out: PreprocessOutput, field_layout, into: tokenspeed_pb.MultimodalInputs, place: _Placer,
                      dtype: str = "bfloat16", video_field_layout=None, image_defaults: ImageOptions | None = None
                      ) -> None:
    """One item per image and per video, in prompt order. The items go into the tail (each
    item's serialized bytes with its encoder input appended inside it), so the head holds
    an empty MultimodalInputs."""
    into.SetInParent()
    sources = _ts_sources(out, field_layout, video_field_layout, image_defaults)
    items = []
    for src in sources:
        for i, res in enumerate(src.results):
            item = _ts_item(src, res, i, place, dtype)
            items.append((res.structural_range[0], item))
    items.sort(key=lambda pair: pair[0])
    # BackendPayload.tokenspeed { items {...} items {...} }: merged into the head's empty one
    place.res.tail.append(wire.field(_TS_FIELD, [item for _offset, item in items]))


def _ts_item(src: _Source, res, i: int, place: _Placer, dtype: str) -> list:
    """Item ``i`` of ``src``: its serialized bytes with its encoder input inside."""
    item = tokenspeed_pb.MultimodalItem()
    item.modality = src.modality
    item.content_hash = content_hash(src.item_hash(res))
    item.placeholder_token_id = _token_id(src.token_id)
    for offset, length in res.patch_ranges or (res.structural_range,):
        item.placeholders.add(offset=offset, length=length)
    for name, arr in src.tensors.items():
        rows = _item_rows(src.tensors, src.layout, name, arr, i)
        place.small(item.model_specific_tensors[name], _vllm_dtype(name, rows))
    pixels = _item_rows(src.tensors, src.layout, src.pixels_key, src.pixels, i)
    sub = _Tail()
    place.res.tail, saved = sub.parts, place.res.tail
    try:
        place.large(item.encoder_input, _TS_ENCODER_INLINE, pixels, dtype)
    finally:
        place.res.tail = saved
    return wire.field(_TS_ITEMS, [item.SerializeToString(), *sub.parts])


class _Tail:
    def __init__(self):
        self.parts: list = []


_TS_FIELD = pb.BackendPayload.DESCRIPTOR.fields_by_name["tokenspeed"].number
_TS_ITEMS = tokenspeed_pb.MultimodalInputs.DESCRIPTOR.fields_by_name["items"].number
_TS_ENCODER_INLINE = wire.field_path(tokenspeed_pb.MultimodalItem, ("encoder_input", "inline"))


def _item_rows(tensors: dict, field_layout, name: str, arr: np.ndarray, i: int) -> np.ndarray:
    """Item ``i``'s part of a tensor, as the gateway splits it for TokenSpeed: batched ->
    ``arr[i:i+1]`` (the item dim kept), flat -> its rows by the sizes tensor (in
    ``tensors``), else all."""
    if name in field_layout.batched:
        return arr[i : i + 1]
    sizes_key = field_layout.flat.get(name)
    if sizes_key is not None:
        sizes = np.asarray(tensors[sizes_key]).reshape(-1).astype(np.int64)
        start = int(sizes[:i].sum())
        return arr[start : start + int(sizes[i])]
    return arr


def content_hash(hex_hash: str) -> bytes:
    """TokenSpeed's ``MultimodalItem.content_hash``: blake3 over the bytes of the item's hex
    blake3 string (the gateway's ``hash_hex_strings`` of one hash)."""
    return hash_of_hashes(hex_hash)


# -- TensorRT-LLM ------------------------------------------------------------------------------


def trtllm_input(out: PreprocessOutput, into: trtllm_pb.MultimodalInput | None = None) -> trtllm_pb.MultimodalInput:
    msg = trtllm_pb.MultimodalInput() if into is None else into
    msg.SetInParent()  # present even when empty, so the payload's oneof is set
    msg.image_data.extend(out.raw_images)
    return msg


# -- values -------------------------------------------------------------------------------------


def pixel_wire_array(out: PreprocessOutput) -> np.ndarray:
    """``pixel_values`` as float32, C order (what the wire carries as float32)."""
    return np.ascontiguousarray(out.pixel_values, dtype="<f4")


def token_ids(ids) -> list[int]:
    """Token ids for the wire's ``repeated uint32`` (checked, not wrapped)."""
    arr = np.asarray(ids).reshape(-1)
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) > _UINT32_MAX):
        raise PreprocessError(Code.INVALID_ARGUMENT, "token ids must fit in uint32")
    return arr.tolist()


def output_nbytes(out: PreprocessOutput) -> int:
    """What keeping ``out`` costs in memory (for the handle store's byte bound)."""
    arrays = [out.input_ids, out.original_input_ids, out.pixel_values, *out.tensors.values()]
    if out.positions is not None:
        arrays.append(out.positions)
    if videos_of(out):
        arrays += [out.pixel_values_videos, *out.video_tensors.values()]
    raw = [*out.raw_images, *(getattr(out, "raw_videos", None) or ())]
    return sum(int(a.nbytes) for a in arrays) + sum(len(b) for b in raw)


def _token_id(value: int) -> int:
    if not 0 <= int(value) <= _UINT32_MAX:
        raise PreprocessError(Code.INTERNAL, f"image token id {value} does not fit in uint32")
    return int(value)


def _sglang_dtype(name: str, arr: np.ndarray) -> np.ndarray:
    """float32 or int64: SGLang's older servicers read every other dtype string as float32."""
    if arr.dtype.kind == "f":
        return arr.astype(np.float32, copy=False)
    if arr.dtype.kind in "iub":
        return _as_int64(name, arr)
    raise PreprocessError(Code.INTERNAL, f"tensor {name!r} has dtype {arr.dtype}, which SGLang cannot take")


def _vllm_dtype(name: str, arr: np.ndarray) -> np.ndarray:
    """float32, int64 or uint32: what every vLLM and TokenSpeed servicer version reads."""
    if arr.dtype.kind == "f":
        return arr.astype(np.float32, copy=False)
    if arr.dtype == np.uint32:
        return arr
    if arr.dtype.kind in "iub":
        return _as_int64(name, arr)
    raise PreprocessError(Code.INTERNAL, f"tensor {name!r} has dtype {arr.dtype}, which vLLM cannot take")


def _as_int64(name: str, arr: np.ndarray) -> np.ndarray:
    if arr.dtype == np.uint64 and arr.size and int(arr.max()) > _INT64_MAX:
        raise PreprocessError(Code.INTERNAL, f"tensor {name!r} holds values beyond int64")
    return arr.astype(np.int64, copy=False)
