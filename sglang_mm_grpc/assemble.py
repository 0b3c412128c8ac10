"""Backend payloads, built from a PreprocessOutput in each backend's own wire format.

Pure functions (output + backend -> proto message), no server code, so a router can
also call them in-process. What each backend needs (see docs WIRE.md):

* SGLang: float32 ``pixel_values`` of all images, model-specific tensors as float32 or
  int64 only (its servicer reads any other dtype string as float32), patch-only ranges,
  ``im_token_id``, the encoded images in ``image_data``, ``modalities=["image"]``,
  expanded ids.
* vLLM: structural ranges (one per image), blake3 ``mm_hashes``, the family's field
  layout as ``batched_keys``/``flat_keys`` (every sizes tensor sent), dtypes limited to
  float32/int64/uint32, ``im_token_id``, expanded ids.
* TensorRT-LLM: the encoded images and the unexpanded ids; it runs its own processor.
"""

from __future__ import annotations

import numpy as np

from . import tensors
from ._proto.sglang.grpc.scheduler import sglang_scheduler_pb2 as sglang_pb
from ._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from ._proto.trtllm import trtllm_service_pb2 as trtllm_pb
from ._proto.vllm.grpc.engine import vllm_engine_pb2 as vllm_pb
from .carriers import PreprocessOutput
from .errors import Code, PreprocessError

BACKENDS: dict[str, int] = {
    "sglang": pb.BACKEND_SGLANG,
    "vllm": pb.BACKEND_VLLM,
    "trtllm": pb.BACKEND_TRTLLM,
}
BACKEND_NAMES = {v: k for k, v in BACKENDS.items()}
_UINT32_MAX = 2**32 - 1
_INT64_MAX = 2**63 - 1


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


def assemble(
    out: PreprocessOutput, backend, field_layout, into: pb.BackendPayload | None = None, *, pixel_bytes: bool = True
) -> pb.BackendPayload:
    """The payload a router puts into the chosen backend's GenerateRequest.

    ``into``: fill this (empty) message instead of a new one, e.g. a response's
    ``payload`` field, so the tensor bytes are not copied once more.
    ``pixel_bytes=False``: leave ``pixel_values.data`` empty (shape and dtype set), for
    a serializer that appends :func:`pixel_wire_array` itself (``wire.with_payload``).
    """
    b = parse_backend(backend)
    msg = pb.BackendPayload() if into is None else into
    msg.backend = b
    if b == pb.BACKEND_SGLANG:
        msg.input_ids.extend(token_ids(out.input_ids))
        sglang_inputs(out, msg.sglang, pixel_bytes=pixel_bytes)
    elif b == pb.BACKEND_VLLM:
        msg.input_ids.extend(token_ids(out.input_ids))
        vllm_inputs(out, field_layout, msg.vllm, pixel_bytes=pixel_bytes)
    else:
        msg.input_ids.extend(token_ids(out.original_input_ids))
        trtllm_input(out, msg.trtllm)
    return msg


def sglang_inputs(
    out: PreprocessOutput, into: sglang_pb.MultimodalInputs | None = None, *, pixel_bytes: bool = True
) -> sglang_pb.MultimodalInputs:
    msg = sglang_pb.MultimodalInputs() if into is None else into
    msg.modalities.append("image")
    msg.image_data.extend(out.raw_images)
    tensors.fill(msg.pixel_values, pixel_wire_array(out), data=pixel_bytes)
    for name, arr in out.tensors.items():
        tensors.fill(msg.model_specific_tensors[name], _sglang_dtype(name, arr))
    msg.im_token_id = _token_id(out.image_token_id)
    for im in out.images:
        # Patch-only runs; an expansion without any (no family makes one) falls back to
        # its whole range, as the gateway does.
        for offset, length in im.patch_ranges or (im.structural_range,):
            msg.mm_placeholders.add(offset=offset, length=length)
    return msg


def vllm_inputs(
    out: PreprocessOutput, field_layout, into: vllm_pb.MultimodalInputs | None = None, *, pixel_bytes: bool = True
) -> vllm_pb.MultimodalInputs:
    msg = vllm_pb.MultimodalInputs() if into is None else into
    msg.mm_hashes.extend(im.hash for im in out.images)
    tensors.fill(msg.pixel_values, pixel_wire_array(out), data=pixel_bytes)
    for name, arr in out.tensors.items():
        tensors.fill(msg.model_specific_tensors[name], _vllm_dtype(name, arr))
    present = {"pixel_values", *out.tensors}
    msg.batched_keys.extend(k for k in field_layout.batched if k in present)
    for key, sizes_key in field_layout.flat.items():
        if key not in present:
            continue
        if sizes_key not in out.tensors:
            raise PreprocessError(
                Code.INTERNAL, f"vLLM layout splits {key!r} by {sizes_key!r}, but no such tensor was produced"
            )
        msg.flat_keys[key] = sizes_key
    msg.im_token_id = _token_id(out.image_token_id)
    for im in out.images:
        offset, length = im.structural_range
        msg.mm_placeholders.add(offset=offset, length=length)
    return msg


def trtllm_input(out: PreprocessOutput, into: trtllm_pb.MultimodalInput | None = None) -> trtllm_pb.MultimodalInput:
    msg = trtllm_pb.MultimodalInput() if into is None else into
    msg.SetInParent()  # present even when empty, so the payload's oneof is set
    msg.image_data.extend(out.raw_images)
    return msg


def pixel_wire_array(out: PreprocessOutput) -> np.ndarray:
    """``pixel_values`` as the wire carries it for SGLang and vLLM: float32, little-endian, C order."""
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
    return sum(int(a.nbytes) for a in arrays) + sum(len(b) for b in out.raw_images)


def _token_id(value: int) -> int:
    if not 0 <= int(value) <= _UINT32_MAX:
        raise PreprocessError(Code.INTERNAL, f"image token id {value} does not fit in uint32")
    return int(value)


def _sglang_dtype(name: str, arr: np.ndarray) -> np.ndarray:
    """float32 or int64: SGLang reads every other dtype string as float32 bytes."""
    if arr.dtype.kind == "f":
        return arr.astype(np.float32, copy=False)
    if arr.dtype.kind in "iub":
        return _as_int64(name, arr)
    raise PreprocessError(Code.INTERNAL, f"tensor {name!r} has dtype {arr.dtype}, which SGLang cannot take")


def _vllm_dtype(name: str, arr: np.ndarray) -> np.ndarray:
    """float32, int64 or uint32: vLLM rejects every other dtype string."""
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
