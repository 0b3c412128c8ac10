"""vLLM's ``MultiModalKwargsItem`` bytes, built without torch or vLLM.

A sidecar result carries, per media item, the one buffer vLLM's
``MsgpackEncoder(size_threshold=2**62)`` makes of that item (vLLM 0.33.0,
``vllm/v1/serial_utils.py``: ``_encode_mm_item``, ``_encode_mm_field_elem``,
``_encode_tensor``, ``_encode_mm_field``), and the worker rebuilds the item with vLLM's
``MsgpackDecoder``. The encoding, per key of the item:

    {"data": (torch dtype name, shape, Ext(3, the tensor's bytes)),
     "field": (factory name, {the field dataclass's fields, in order})}

with the field as ``vllm/multimodal/inputs.py`` builds it for the whole batch (a flat
field's element keeps every item's slices; a slice is encoded as (start, stop, step)). Only
what the served families' items hold is here: tensors in batched and flat fields,
bfloat16 tensors (held here as their bit patterns, ``BFloat16``), lists of floats in
batched fields (Qwen3-VL's timestamps, kept as Python floats), and shared fields (the Omni
families' ``use_audio_in_video``, one tensor every video item holds). The same msgspec encoder
writes the same bytes. vLLM orders an item's keys as a Python ``set`` of them iterates
(``MultiModalKwargsItems.from_hf_inputs``), which changes with the process's hash seed; the
decoder reads any order, and here it is the field config's.

Before the items are built, vLLM casts every floating tensor the HF processor returns to
the engine's dtype (``cast_floats``: vllm/multimodal/processing/context.py
``InputProcessingContext._postprocess_output``, called by ``call_hf_processor``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, Union

import msgspec
import numpy as np

#: ``CUSTOM_TYPE_RAW_VIEW`` in vllm/v1/serial_utils.py: a tensor's bytes inline.
RAW_VIEW = 3


@dataclass(frozen=True)
class BFloat16:
    """A ``torch.bfloat16`` tensor, held as its bit patterns (uint16): ``of(a)`` is what
    ``torch.from_numpy(a).to(torch.bfloat16)`` makes of a float32 ``a`` on the CPU (round
    to nearest, ties to even, on the bits; NaN as 0xFFFF, as torch's vectorized
    conversion writes it). Slices along dim 0 (a flat field's split) stay bfloat16."""

    bits: np.ndarray

    @classmethod
    def of(cls, a: np.ndarray) -> "BFloat16":
        x = np.ascontiguousarray(a, dtype=np.float32)
        u = x.view(np.uint32)
        bits = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
        return cls(np.where(np.isnan(x), np.uint16(0xFFFF), bits))

    def __len__(self) -> int:
        return len(self.bits)

    def __getitem__(self, index: slice | int | tuple[slice, ...]) -> "BFloat16":
        return BFloat16(np.asarray(self.bits[index]))


@dataclass(frozen=True)
class Batched:
    """``MultiModalFieldConfig.batched``: item i is row i of the batch (a row of a 1-D
    tensor is a 0-d tensor, as torch indexes; of a list, its element)."""

    keep_on_cpu: bool = False

    def split(self, batch: np.ndarray | BFloat16 | list) -> list:
        if isinstance(batch, list):
            return list(batch)
        if isinstance(batch, BFloat16):
            return [batch[i] for i in range(len(batch))]
        return [np.asarray(batch[i]) for i in range(len(batch))]

    def encoded(self) -> tuple[str, dict[str, Any]]:
        return "batched", {"keep_on_cpu": self.keep_on_cpu}


@dataclass(frozen=True)
class Flat:
    """``MultiModalFieldConfig.flat`` along ``dim`` (0 or 1): item i is ``batch[start:stop]``
    (``batch[:, start:stop]``) of its (start, stop)."""

    bounds: tuple[tuple[int, int], ...]
    keep_on_cpu: bool = False
    dim: int = 0

    def split(self, batch: np.ndarray | BFloat16) -> list:
        lead = (slice(None),) * self.dim
        return [batch[lead + (slice(start, stop),)] for start, stop in self.bounds]

    def encoded(self) -> tuple[str, dict[str, Any]]:
        # BaseMultiModalField's keep_on_cpu first, then MultiModalFlatField's slices (one
        # per item: a slice per dimension, each (start, stop, step), the whole of each
        # dimension before ``dim``) and dim
        lead = [[None, None, None]] * self.dim
        return "flat", {"keep_on_cpu": self.keep_on_cpu,
                        "slices": [[*lead, [start, stop, None]] for start, stop in self.bounds], "dim": self.dim}


@dataclass(frozen=True)
class Shared:
    """``MultiModalFieldConfig.shared``: each of ``batch_size`` items holds the whole tensor
    (``MultiModalSharedField.build_elems``)."""

    batch_size: int
    keep_on_cpu: bool = False

    def split(self, batch: np.ndarray | BFloat16) -> list:
        return [batch] * self.batch_size

    def encoded(self) -> tuple[str, dict[str, Any]]:
        # BaseMultiModalField's keep_on_cpu first, then MultiModalSharedField's batch_size
        return "shared", {"keep_on_cpu": self.keep_on_cpu, "batch_size": self.batch_size}


Field = Union[Batched, Flat, Shared]


def flat_from_sizes(sizes: Sequence[int] | np.ndarray, keep_on_cpu: bool = False, dim: int = 0) -> Flat:
    """``MultiModalFieldConfig.flat_from_sizes``: consecutive runs of ``sizes`` along ``dim``."""
    ends = np.cumsum([0, *[int(s) for s in sizes]])
    return Flat(tuple((int(a), int(b)) for a, b in zip(ends[:-1], ends[1:])), keep_on_cpu, dim)


def split_items(batch: Mapping[str, Any], fields: Mapping[str, Field]) -> list[dict[str, tuple[Any, Field]]]:
    """One modality's batch -> its items, each ``{key: (tensor, field)}`` in ``fields``' order
    (``MultiModalKwargsItems.from_hf_inputs``); a key absent from ``batch`` is left out."""
    elems = {key: field.split(batch[key]) for key, field in fields.items() if batch.get(key) is not None}
    sizes = {key: len(v) for key, v in elems.items()}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"the fields split into different item counts: {sizes}")
    count = next(iter(sizes.values()), 0)
    return [{key: (elems[key][i], fields[key]) for key in elems} for i in range(count)]


#: The engine dtypes vLLM 0.33.0 runs a model in, as the fingerprint names them
#: (``str(model_config.dtype)``: smg_grpc_servicer's ``fingerprint_from_model_config``):
#: ``--dtype`` half/float16, bfloat16, float/float32 (vllm/config/model.py
#: ``_STR_DTYPE_TO_TORCH_DTYPE``, ``_get_and_verify_dtype``; "auto" resolves to one of the
#: platform's ``supported_dtypes``), each with what a float32 tensor cast to it becomes:
#: numpy's float16 rounds as torch's (to nearest, ties to even, subnormals and overflow
#: alike), bfloat16 is ``BFloat16.of``.
ENGINE_DTYPES: dict[str, Callable[[np.ndarray], np.ndarray | BFloat16]] = {
    "torch.float32": lambda a: a,
    "torch.float16": lambda a: a.astype(np.float16),
    "torch.bfloat16": BFloat16.of,
}


def check_engine_dtype(dtype: str) -> None:
    """ValueError unless ``dtype`` (a fingerprint's) is an engine dtype vLLM runs in."""
    if dtype not in ENGINE_DTYPES:
        raise ValueError(f"the fingerprint's dtype {dtype!r} is not one vLLM 0.33.0 runs a model in "
                         f"({', '.join(ENGINE_DTYPES)}, as str(model_config.dtype) names them)")


def cast_floats(batch: Mapping[str, Any], dtype: str) -> dict[str, Any]:
    """The processor output as vLLM holds it once ``call_hf_processor`` has cast it
    (vllm/multimodal/processing/context.py ``InputProcessingContext._postprocess_output``:
    ``tensor.to(dtype=self.model_config.dtype)`` where ``tensor.is_floating_point()``):
    every floating tensor in the engine's ``dtype``, whatever its field or ``keep_on_cpu``;
    integer and bool tensors and lists of Python floats (not tensors: Qwen3-VL's
    timestamps) as they are. The service's floating tensors are float32; any other
    floating dtype is refused rather than rounded twice."""
    check_engine_dtype(dtype)
    cast = ENGINE_DTYPES[dtype]
    out = dict(batch)
    for key, value in batch.items():
        if isinstance(value, BFloat16) and dtype != "torch.bfloat16":
            raise TypeError(f"{key}: a bfloat16 tensor cast again, to {dtype} (the service's floating tensors "
                            "are float32)")
        if isinstance(value, np.ndarray) and value.dtype.kind == "f":
            if value.dtype != np.float32:
                raise TypeError(f"{key}: a {value.dtype} tensor (the service's floating tensors are float32)")
            with np.errstate(over="ignore"):  # to inf, as torch casts
                out[key] = cast(value)
    return out


_encoder = msgspec.msgpack.Encoder()


def encode_item(item: Mapping[str, tuple[Any, Field]]) -> bytes:
    """The item's bytes as vLLM's ``MsgpackEncoder(size_threshold=2**62).encode`` gives
    them (its one buffer)."""
    return _encoder.encode({key: {"data": _data(data), "field": field.encoded()} for key, (data, field) in item.items()})


def _data(data: np.ndarray | BFloat16 | list) -> Any:
    """``_encode_nested_tensors``: a tensor, or a list of floats as they are."""
    if isinstance(data, list):
        return [float(x) for x in data]
    if isinstance(data, BFloat16):
        return "bfloat16", tuple(int(d) for d in data.bits.shape), msgspec.msgpack.Ext(
            RAW_VIEW, np.ascontiguousarray(data.bits).reshape(-1).view(np.uint8).data)
    return _tensor(data)


def _tensor(a: np.ndarray) -> tuple[str, tuple[int, ...], msgspec.msgpack.Ext]:
    """``_encode_tensor`` of the tensor ``torch.from_numpy(a)`` would be."""
    name = _TORCH_NAMES.get(a.dtype)
    if name is None:
        raise TypeError(f"no torch dtype for numpy {a.dtype}")
    data = np.ascontiguousarray(a).reshape(-1).view(np.uint8).data  # no copy: msgspec copies it once
    return name, tuple(int(d) for d in a.shape), msgspec.msgpack.Ext(RAW_VIEW, data)


#: numpy dtype -> ``str(torch dtype)`` without "torch." (the dtypes a payload carries)
_TORCH_NAMES = {np.dtype(n): n for n in ("uint8", "int8", "int16", "int32", "int64", "float16", "float32",
                                         "float64", "bool")}
