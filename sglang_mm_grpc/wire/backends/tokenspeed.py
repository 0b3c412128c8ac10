"""TokenSpeed (``tokenspeed.grpc.scheduler``): one item per image and per video, in prompt
order, each with its own encoder input (bfloat16 by default, as the gateway sends it),
its rows of the model-specific tensors, its patch runs, ``placeholder_token_id`` (the
image or video token) and ``content_hash`` = blake3 of the item's hex hash (the
gateway's ``hash_hex_strings``). Tensors as vLLM takes them (its servicer reads the same
dtypes); no raw pixels."""

from __future__ import annotations

import numpy as np
from smg_grpc_proto.generated import tokenspeed_scheduler_pb2 as tokenspeed_pb

from .. import serialize as wire
from ..._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from ...core.hashing import hash_of_hashes
from ..payload import Backend, Job, Placer, Source, patch_runs, sources, token_id, vllm_tensor

_FIELD = pb.BackendPayload.DESCRIPTOR.fields_by_name["tokenspeed"].number
_ITEMS = tokenspeed_pb.MultimodalInputs.DESCRIPTOR.fields_by_name["items"].number
_ENCODER_INLINE = wire.field_path(tokenspeed_pb.MultimodalItem, ("encoder_input", "inline"))


def build(job: Job, payload: pb.BackendPayload, place: Placer) -> None:
    """The items go into the tail (each item's serialized bytes with its encoder input
    appended inside it), so the head holds an empty MultimodalInputs."""
    payload.tokenspeed.SetInParent()
    items = []
    # listed first: the videos' layout is checked before any item is built
    for src in list(sources(job, "this model declares no layout for its video tensors")):
        for i, res in enumerate(src.results):
            items.append((res.structural_range[0], _item(src, res, i, place, job.dtype)))
    items.sort(key=lambda pair: pair[0])
    # BackendPayload.tokenspeed { items {...} items {...} }: merged into the head's empty one
    place.res.tail.append(wire.field(_FIELD, [item for _offset, item in items]))


def _item(src: Source, res, i: int, place: Placer, dtype: str) -> list:
    """Item ``i`` of ``src``: its serialized bytes with its encoder input inside."""
    item = tokenspeed_pb.MultimodalItem()
    item.modality = src.modality
    item.content_hash = content_hash(src.item_hash(res))
    item.placeholder_token_id = token_id(src.token_id)
    for offset, length in patch_runs(res):
        item.placeholders.add(offset=offset, length=length)
    for name, arr in src.tensors.items():
        rows = _item_rows(src, name, arr, i)
        place.small(item.model_specific_tensors[name], vllm_tensor(name, rows))
    pixels = _item_rows(src, src.pixels_key, src.pixels, i)
    return place.whole(_ITEMS, item, lambda: place.large(item.encoder_input, _ENCODER_INLINE, pixels, dtype))


def _item_rows(src: Source, name: str, arr: np.ndarray, i: int) -> np.ndarray:
    """Item ``i``'s part of a tensor, as the gateway splits it for TokenSpeed: batched ->
    ``arr[i:i+1]`` (the item dim kept), flat -> its rows by the sizes tensor (in
    ``src.tensors``), else all."""
    if name in src.layout.batched:
        return arr[i : i + 1]
    sizes_key = src.layout.flat.get(name)
    if sizes_key is not None:
        sizes = np.asarray(src.tensors[sizes_key]).reshape(-1).astype(np.int64)
        start = int(sizes[:i].sum())
        return arr[start : start + int(sizes[i])]
    return arr


def content_hash(hex_hash: str) -> bytes:
    """TokenSpeed's ``MultimodalItem.content_hash``: blake3 over the bytes of the item's hex
    blake3 string (the gateway's ``hash_hex_strings`` of one hash)."""
    return hash_of_hashes(hex_hash)


BACKEND = Backend(
    name="tokenspeed", enum=pb.BACKEND_TOKENSPEED, label="TokenSpeed", build=build, default_dtype="bfloat16",
    no_raw="its servicer casts the encoder input to the model dtype and TokenSpeed normalizes no pixels "
           "on the device",
)
