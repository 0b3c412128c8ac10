"""vLLM's multimodal cache key of a fetched image or video, without vLLM or torch.

A sidecar result's ``mm_hashes`` are the keys vLLM's engine caches the item under, so
they must be vLLM's own (vLLM 0.33.0, ``vllm/multimodal/hasher.py``
``MultiModalHasher.hash_kwargs``, called from ``vllm/multimodal/processing/inputs.py``
``get_mm_hashes`` with ``model_id``, the item, and the modality's non-empty hash factors).
A fetched image is a ``MediaWithBytes`` (``vllm/multimodal/media/image.py``
``ImageMediaIO.load_bytes``): its key is built on the encoded bytes as sent, plus the
conversion settings when loading changed the image's mode (``io_config``). A fetched video
is a ``MediaWithBytes`` of its sampled frames with the loader's metadata beside it
(``VideoProcessorItems.get_item_for_hash``): the key is built on the encoded bytes, or on
the frames when they are smaller, and on the metadata. A clip's key is built on its
waveform as vLLM's data parser leaves it (float32 mono at the extractor's rate). Every chunk
goes into the digest framed: a length before each leaf, a tag and a count before each
container, so no two inputs share a key.
"""

from __future__ import annotations

from typing import Any, Mapping

import blake3
import numpy as np

_NONE, _SEQUENCE, _MAPPING, _LEAF = b"\x00", b"\x01", b"\x02", b"\x03"


def image_hash(encoded: bytes, model_id: str, *, io_config: Mapping[str, Any] | None = None,
               factors: Mapping[str, Any] | None = None) -> str:
    """``hash_kwargs("blake3", model_id=..., image=MediaWithBytes(...), **factors)``;
    ``factors``: the non-empty ones of ``media_io_kwargs`` and ``mm_processor_kwargs``."""
    image: Any = {"io_config": dict(io_config), "data": encoded} if io_config else encoded
    return _hash(model_id, "image", _Media("image", image), factors)


def video_hash(encoded: bytes, model_id: str, metadata: Mapping[str, Any], *, frames: np.ndarray | None = None,
               factors: Mapping[str, Any] | None = None) -> str:
    """``hash_kwargs("blake3", model_id=..., video=(MediaWithBytes(frames, encoded),
    metadata), **factors)``; ``frames``: the sampled frames, given when they are smaller
    than ``encoded`` (the key is then built on them)."""
    return _hash(model_id, "video", [_Media("video", frames if frames is not None else encoded), dict(metadata)],
                 factors)


def audio_hash(wave: np.ndarray, model_id: str, *, factors: Mapping[str, Any] | None = None) -> str:
    """``hash_kwargs("blake3", model_id=..., audio=wave, **factors)``: ``wave`` the parsed
    clip (``AudioProcessorItems``' item, an ndarray)."""
    return _hash(model_id, "audio", wave, factors)


def _hash(model_id: str, modality: str, item: Any, factors: Mapping[str, Any] | None) -> str:
    kwargs = {"model_id": model_id, modality: item, **(factors or {})}
    digest = blake3.blake3()
    for key in sorted(kwargs):
        for chunk in _item(key, kwargs[key]):
            digest.update(chunk)
    return digest.hexdigest()


class _Media:
    """A MediaWithBytes: serialized as the item ``(modality, its bytes, config or frames)``."""

    def __init__(self, modality: str, value: Any):
        self.modality = modality
        self.value = value


def _framed(chunk: bytes | memoryview) -> list[bytes | memoryview]:
    size = chunk.nbytes if isinstance(chunk, memoryview) else len(chunk)
    return [size.to_bytes(8, "little"), chunk]


def _item(key: str, value: Any) -> list[bytes | memoryview]:
    """``iter_item_to_bytes``."""
    return [*_framed(key.encode()), *_value(value)]


def _value(obj: Any) -> list[bytes | memoryview]:
    """``iter_value_to_bytes``: containers tagged and counted, leaves framed."""
    out: list[bytes | memoryview]
    if obj is None:
        return [_NONE]
    if isinstance(obj, (list, tuple)):
        out = [_SEQUENCE, len(obj).to_bytes(8, "little")]
        for x in obj:
            out += _value(x)
        return out
    if isinstance(obj, dict):
        out = [_MAPPING, len(obj).to_bytes(8, "little")]
        for k, v in obj.items():
            out += [*_framed(str(k).encode()), *_value(v)]
        return out
    return [_LEAF, *_leaf(obj)]


def _leaf(obj: Any) -> list[bytes | memoryview]:
    """``serialize_item`` of the leaves a hash here meets."""
    if isinstance(obj, _Media):
        return _item(obj.modality, obj.value)
    if isinstance(obj, np.ndarray):
        return _item("ndarray", {"dtype": obj.dtype.str, "shape": obj.shape,
                                 "data": np.ascontiguousarray(obj).view(np.uint8).data})
    if isinstance(obj, (bytes, memoryview)):
        return _framed(obj)
    if isinstance(obj, str):
        return _framed(obj.encode())
    if isinstance(obj, (int, float)):  # bool included: numpy's bool is one byte
        return _framed(np.array(obj).tobytes())
    raise TypeError(f"no vLLM hash serialization here for {type(obj).__name__}")
