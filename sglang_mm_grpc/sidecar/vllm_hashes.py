"""vLLM's multimodal cache key of a fetched image, without vLLM or torch.

A sidecar result's ``mm_hashes`` are the keys vLLM's engine caches the item under, so
they must be vLLM's own (vLLM 0.33.0, ``vllm/multimodal/hasher.py``
``MultiModalHasher.hash_kwargs``, called from ``vllm/multimodal/processing/inputs.py``
``get_mm_hashes`` with ``model_id``, the item, and the modality's non-empty hash factors).
A fetched image is a ``MediaWithBytes`` (``vllm/multimodal/media/image.py``
``ImageMediaIO.load_bytes``): its key is built on the encoded bytes as sent, plus the
conversion settings when loading changed the image's mode (``io_config``). Every chunk
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
    kwargs = {"model_id": model_id, "image": _Media(image), **(factors or {})}
    digest = blake3.blake3()
    for key in sorted(kwargs):
        for chunk in _item(key, kwargs[key]):
            digest.update(chunk)
    return digest.hexdigest()


class _Media:
    """A MediaWithBytes image: serialized as the item ``("image", its bytes or config)``."""

    def __init__(self, value: Any):
        self.value = value


def _framed(chunk: bytes) -> list[bytes]:
    return [len(chunk).to_bytes(8, "little"), chunk]


def _item(key: str, value: Any) -> list[bytes]:
    """``iter_item_to_bytes``."""
    return [*_framed(key.encode()), *_value(value)]


def _value(obj: Any) -> list[bytes]:
    """``iter_value_to_bytes``: containers tagged and counted, leaves framed."""
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


def _leaf(obj: Any) -> list[bytes]:
    """``serialize_item`` of the leaves a hash here meets."""
    if isinstance(obj, _Media):
        return _item("image", obj.value)
    if isinstance(obj, bytes):
        return _framed(obj)
    if isinstance(obj, str):
        return _framed(obj.encode())
    if isinstance(obj, (int, float)):  # bool included: numpy's bool is one byte
        return _framed(np.array(obj).tobytes())
    raise TypeError(f"no vLLM hash serialization here for {type(obj).__name__}")
