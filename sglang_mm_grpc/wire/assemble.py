"""Backend payloads, built from a PreprocessOutput in each backend's own wire format.

The messages are the gateway's own definitions (``smg-grpc-proto``); what each backend
needs is what its servicer in ``smg-grpc-servicer`` reads (docs/WIRE_CURRENT.md has the
evidence). One module per backend builds its payload and says what it refuses
(``wire.backends``: SGLang, vLLM, TensorRT-LLM, TokenSpeed); what they share is in
``wire.payload``. Here: the Backend and WireDtype enums as requests spell them, the
option checks the servicer runs before any work and again when assembling, and the
dispatch that builds one payload.

Videos (``out.videos``, docs/VIDEO.md) go to vLLM (a batch of their own) and TokenSpeed
(one item per video); SGLang and TensorRT-LLM refuse them (FAILED_PRECONDITION): their
servicers take images only.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from . import backends
from .._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from ..core.carriers import ImageOptions, PreprocessOutput
from ..core.errors import Code, PreprocessError
from .payload import (KERNEL_DTYPES, UINT32_MAX, Assembled, Backend, Job, Placer, WireOptions, audios_of,
                      image_item_hash, video_item_hash, videos_of)
from .shm import Segment, ShmArena

__all__ = ["BACKENDS", "BACKEND_NAMES", "DEFAULT_PIXEL_DTYPE", "KERNEL_DTYPES", "SHM_BACKENDS", "WIRE_DTYPES",
           "Assembled", "WireOptions", "assemble", "check_audios", "check_options", "check_videos", "image_item_hash",
           "is_raw",
           "output_nbytes", "parse_backend", "parse_pixel_dtype", "pixel_wire_array", "token_ids",
           "video_item_hash", "videos_of"]

_BY_ENUM: dict[int, Backend] = {b.enum: b for b in backends.ALL}
BACKENDS: dict[str, int] = {b.name: b.enum for b in backends.ALL}
BACKEND_NAMES = {v: k for k, v in BACKENDS.items()}
#: Wire dtypes by enum value, and the names the servicers' dtype table uses.
WIRE_DTYPES: dict[int, str] = {
    pb.WIRE_DTYPE_FLOAT32: "float32",
    pb.WIRE_DTYPE_BFLOAT16: "bfloat16",
    pb.WIRE_DTYPE_FLOAT16: "float16",
    pb.WIRE_DTYPE_UINT8: "uint8",
}
#: The pixel dtype each backend gets when the request names none (the gateway's own).
DEFAULT_PIXEL_DTYPE = {b.name: b.default_dtype for b in backends.ALL}
#: Backends whose TensorData can carry a shared-memory handle.
SHM_BACKENDS = tuple(b.name for b in backends.ALL if not b.no_shm)


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


def _backend(value) -> Backend:
    return _BY_ENUM[parse_backend(value)]


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
    audio_field_layout=None,
    expanded_ids=None,
) -> Assembled:
    """The payload a router puts into the chosen backend's GenerateRequest.

    ``into``: fill this (empty) message instead of a new one (a response's ``payload``).
    ``field_layout``: the model's vLLM layout (``families.FieldLayout`` values).
    ``arena``: where SHM segments come from (``options.shm``); ``staged``: segments that
    already hold pixel tensors of ``out`` (written there by Preprocess, float32 or raw
    uint8; by tensor name), each handed out instead of a copy when an SHM tensor of the
    payload in that dtype is exactly its memory (vLLM's batch, TokenSpeed's lone item of a modality).
    ``video_field_layout``: the model's vLLM layout of the video tensors (with videos).
    ``audio_field_layout``: the model's layout of the audio tensors (with audio clips).
    ``expanded_ids``: ``out.input_ids`` already on the wire (a one-shot response's): copied
    as they are where the payload carries the expanded ids, not converted again.
    ``image_defaults``: the effective options of an image preprocessed with none (the
    model's ``family.effective_options(None)``): an image whose options differ gets an
    item hash over them (``image_item_hash``); None: every image's is its bytes' hash.
    Refusals: FAILED_PRECONDITION for an option, model or modality the backend's consumer
    cannot take (the message says why and what works)."""
    b = _backend(backend)
    options = options or WireOptions()
    dtype = check_options(b.enum, options, raw=is_raw(out))
    check_videos(b.enum, len(videos_of(out)))
    check_audios(b.enum, len(audios_of(out)))
    msg = pb.BackendPayload() if into is None else into
    msg.backend = b.enum
    res = Assembled(msg)
    place = Placer(res, WireOptions() if b.no_shm else options, arena, staged)
    try:
        if expanded_ids is not None and not b.own_processor:
            msg.input_ids.extend(expanded_ids)  # a copy inside protobuf, ~50x faster than converting
        else:
            msg.input_ids.extend(token_ids(out.original_input_ids if b.own_processor else out.input_ids))
        b.build(Job(out, field_layout, video_field_layout, dtype, image_defaults, audio_field_layout), msg, place)
    except BaseException:
        place.abandon()
        raise
    return res


def check_options(backend, options: WireOptions, raw: bool | None = None) -> str:
    """The pixel wire dtype ``backend`` gets under ``options`` for an output whose pixels
    are ``raw`` uint8 or not (None: not made yet, they will be raw when uint8 is asked),
    or FAILED_PRECONDITION for an option its consumer cannot take (checked before any
    work by the servicer, and again when assembling)."""
    b = _backend(backend)
    dtype = _pixel_dtype(b, options, raw)
    if options.shm_required and b.no_shm:
        raise PreprocessError(
            Code.FAILED_PRECONDITION,
            f"{b.label} payloads cannot use shared memory: {b.no_shm}; "
            f"ask for TENSOR_TRANSPORT_INLINE or AUTO, or use vLLM or TokenSpeed",
        )
    return dtype


def check_videos(backend, videos: int) -> None:
    """FAILED_PRECONDITION when the request has videos and ``backend``'s consumer takes
    none (checked before any work by the servicer, and again when assembling)."""
    b = _backend(backend)
    _refuse_items(b.label, videos, "video(s)", b.no_video,
                  "Use the vLLM or TokenSpeed backend for videos, or send the images without the videos")


def check_audios(backend, audios: int) -> None:
    """FAILED_PRECONDITION when the request has audio clips and ``backend``'s consumer takes
    none (checked before any work by the servicer, and again when assembling)."""
    b = _backend(backend)
    _refuse_items(b.label, audios, "audio clip(s)", b.no_audio,
                  "Use the TokenSpeed backend for audio, or send the request without the clips")


def _refuse_items(label: str, count: int, what: str, why: str, instead: str) -> None:
    if count and why:
        raise PreprocessError(Code.FAILED_PRECONDITION,
                              f"{label} cannot take this request's {count} {what}: {why}. {instead}")


def is_raw(out) -> bool:
    """Whether ``out``'s pixel tensors are raw uint8 (preprocessed for an engine that
    normalizes on the device) rather than normalized floats."""
    return out.pixel_values.dtype == np.uint8 or (bool(videos_of(out)) and out.pixel_values_videos.dtype == np.uint8)


def _pixel_dtype(b: Backend, options: WireOptions, raw: bool | None = None) -> str:
    """The pixel tensor's wire dtype for this backend, or FAILED_PRECONDITION. Raw uint8
    pixels go as uint8 and normalized ones never do: an engine that normalizes on the
    device must get the one, every other engine the other."""
    if raw is None:
        raw = options.pixel_dtype == "uint8"
    tensors = not b.own_processor
    dtype = options.pixel_dtype or ("uint8" if raw and tensors else b.default_dtype)
    if dtype == "uint8" and b.no_raw:
        who = f"{options.pixel_dtype_source} asks for them" if options.pixel_dtype else "this result was preprocessed raw"
        raise PreprocessError(
            Code.FAILED_PRECONDITION,
            f"{b.label} cannot take raw uint8 pixels ({who}): "
            f"{b.no_raw}; use vLLM for raw pixels, or ask for float pixels")
    if tensors and raw and dtype != "uint8":
        raise PreprocessError(
            Code.FAILED_PRECONDITION,
            f"this result's pixels were kept raw (uint8, neither rescaled nor normalized: its Preprocess asked for "
            f"WIRE_DTYPE_UINT8 or named a worker that normalizes on the device), and {options.pixel_dtype_source} "
            f"asks for {dtype}, which {b.label} would read as normalized values; assemble it for a worker "
            "that normalizes on the device (uint8), or Preprocess again without asking for raw pixels")
    if tensors and not raw and dtype == "uint8":
        raise PreprocessError(
            Code.FAILED_PRECONDITION,
            f"{options.pixel_dtype_source} asks for raw uint8 pixels, but this result's pixels were rescaled and "
            "normalized at Preprocess, and an engine that normalizes on the device would normalize them twice; "
            "Preprocess with payload_options.pixel_dtype WIRE_DTYPE_UINT8 (or the worker's server info) to keep "
            "raw pixels")
    if b.pixel_dtypes and dtype not in b.pixel_dtypes:
        raise PreprocessError(Code.FAILED_PRECONDITION, b.dtype_refusal.format(dtype=dtype))
    return dtype


# -- values -------------------------------------------------------------------------------------


def pixel_wire_array(out: PreprocessOutput) -> np.ndarray:
    """``pixel_values`` as float32, C order (what the wire carries as float32)."""
    return np.ascontiguousarray(out.pixel_values, dtype="<f4")


def token_ids(ids) -> list[int]:
    """Token ids for the wire's ``repeated uint32`` (checked, not wrapped)."""
    arr = np.asarray(ids).reshape(-1)
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) > UINT32_MAX):
        raise PreprocessError(Code.INVALID_ARGUMENT, "token ids must fit in uint32")
    return arr.tolist()


def output_nbytes(out: PreprocessOutput) -> int:
    """What keeping ``out`` costs in memory (for the handle store's byte bound)."""
    arrays = [out.input_ids, out.original_input_ids, out.pixel_values, *out.tensors.values()]
    if out.positions is not None:
        arrays.append(out.positions)
    if videos_of(out):
        assert out.pixel_values_videos is not None  # made with the videos
        arrays += [out.pixel_values_videos, *out.video_tensors.values()]
    arrays += list(out.audio_tensors.values())
    raw = [*out.raw_images, *(getattr(out, "raw_videos", None) or ()), *out.raw_audios]
    return sum(int(a.nbytes) for a in arrays) + sum(len(b) for b in raw)
