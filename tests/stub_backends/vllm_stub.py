"""vLLM engine stub: decodes Generate as vLLM's gRPC servicer does on its preprocessed path
(smg_grpc_servicer/vllm/servicer.py ``Generate`` and ``_build_preprocessed_mm_inputs``).

* every batch of ``mm_keys.mm_batches`` (``mm_inputs``, then ``extra_mm_inputs``: one per
  modality, no tensor key in two batches) that carries ``pixel_values`` or model-specific
  tensors (``mm_salt.has_preprocessed_mm_payload``), and then only with ``tokenized`` input;
* tensors: ``mm_shm.tensor_payload_bytes`` (inline or /dev/shm; an unset payload is
  refused) then the dtype table and length check (``_common``);
* the modality is ``mm_keys.modality_name`` (VIDEO -> "video", else "image"); the pixel
  tensor is registered under ``mm_keys.primary_encoder_key`` (``encoder_input_key``, or
  ``pixel_values``) and every key goes through ``mm_keys.modality_key``;
* per key: in ``batched_keys`` -> split on dim 0; in ``flat_keys`` -> split along dim 0
  by the named sizes tensor (which must be sent); else shared by every item;
  ``keep_on_cpu`` when the key is in ``keep_on_cpu_keys``;
* the number of items is the number of placeholders; every key must yield that many
  (``MultiModalKwargsItems.from_hf_inputs``: "Cannot merge different batch sizes");
* ``is_embed`` = (ids in range == im_token_id), kept only when some position is not it.
"""

from __future__ import annotations

import numpy as np
from smg_grpc_proto.generated import vllm_engine_pb2 as pb
from smg_grpc_proto.generated import vllm_engine_pb2_grpc as pb_grpc
from smg_grpc_servicer.vllm import mm_keys
from smg_grpc_servicer.vllm.mm_salt import has_preprocessed_mm_payload

try:
    from . import _common as c
except ImportError:  # run as a script
    import _common as c


def split_items(hf: dict, batched: set, flat: dict, num_items: int) -> dict[str, list[np.ndarray]]:
    out = {}
    for key, arr in hf.items():
        if key in batched:
            if arr.ndim == 0:
                raise c.Rejected(f"batched field {key!r} is a scalar")
            out[key] = [arr[i] for i in range(arr.shape[0])]
        elif key in flat:
            sizes_key = flat[key]
            if sizes_key not in hf:
                raise c.Rejected(f"flat field {key!r} is split by {sizes_key!r}, which was not sent")
            sizes = hf[sizes_key].reshape(-1).astype(np.int64)
            if arr.ndim == 0 or int(sizes.sum()) != arr.shape[0] or (sizes < 0).any():
                raise c.Rejected(f"sizes {sizes.tolist()} do not split {key!r} of shape {list(arr.shape)}")
            bounds = np.concatenate(([0], np.cumsum(sizes)))
            out[key] = [arr[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        else:
            out[key] = [arr] * num_items
    sizes = {key: len(items) for key, items in out.items()}
    if len(set(sizes.values()) | {num_items}) > 1:
        raise c.Rejected(f"Cannot merge different batch sizes: {sizes} for {num_items} placeholders")
    return out


def decode(req: pb.GenerateRequest) -> dict:
    """Every batch (``mm_keys.mm_batches``: ``mm_inputs``, then ``extra_mm_inputs``, one per
    modality) that carries a preprocessed payload. The first batch's report is the report's
    top level; the others are listed under ``extra``."""
    kind = req.WhichOneof("input")
    batches = [b for b in mm_keys.mm_batches(req) if has_preprocessed_mm_payload(b)]
    if batches and kind != "tokenized":
        raise c.Rejected("preprocessed multimodal inputs need tokenized input")
    ids = list(req.tokenized.input_ids) if kind == "tokenized" else []
    report = {"backend": "vllm", "request_id": req.request_id, "input_ids": c.ids_digest(ids), "items": []}
    seen: set[str] = set()
    reports = []
    for mm in batches:
        batch = decode_batch(mm, ids)
        shared = seen & set(batch["transport"])
        if shared:
            raise c.Rejected(f"multimodal batches carry the same tensor keys {sorted(shared)}; "
                             "one batch per modality is expected")
        seen |= set(batch["transport"])
        reports.append(batch)
    if reports:
        report.update(reports[0])
    if len(reports) > 1:
        report["extra"] = reports[1:]
    return report


def decode_batch(mm, ids: list[int]) -> dict:
    """One batch as ``_build_preprocessed_mm_inputs`` reads it."""
    modality = mm_keys.modality_name(mm)
    is_video = modality == "video"

    def key_of(k: str) -> str:
        return mm_keys.modality_key(k, is_video)

    hf, wire = {}, {}
    if mm.HasField("pixel_values"):
        primary = key_of(mm_keys.primary_encoder_key(mm))
        hf[primary], wire[primary] = c.tensor_from_proto(mm.pixel_values), mm.pixel_values
    for key, td in mm.model_specific_tensors.items():
        hf[key_of(key)], wire[key_of(key)] = c.tensor_from_proto(td), td
    cpu = {key_of(k) for k in mm.keep_on_cpu_keys}
    batched = {key_of(k) for k in mm.batched_keys}
    flat = {key_of(k): key_of(v) for k, v in mm.flat_keys.items()}
    num_items = len(mm.mm_placeholders)
    fields = split_items(hf, batched, flat, num_items)
    hashes = list(mm.mm_hashes)
    if hashes and len(hashes) != num_items:
        raise c.Rejected(f"{len(hashes)} mm_hashes for {num_items} items")
    im_token_id = mm.im_token_id if mm.HasField("im_token_id") else None
    items = [placeholder_item(p, i, ids, im_token_id, hashes, fields, wire) for i, p in enumerate(mm.mm_placeholders)]
    return {
        "items": items,
        "modality": modality,
        "im_token_id": im_token_id,
        "transport": {k: c.transport(td) for k, td in sorted(wire.items())},
        "layout": {
            "batched": sorted(k for k in hf if k in batched),
            "flat": {k: v for k, v in sorted(flat.items()) if k in hf},
            "shared": sorted(k for k in hf if k not in batched and k not in flat),
            "keep_on_cpu": sorted(k for k in hf if k in cpu),
        },
    }


def placeholder_item(p, i: int, ids: list[int], im_token_id, hashes, fields, wire) -> dict:
    if p.length == 0 or p.offset + p.length > len(ids):
        raise c.Rejected(f"placeholder ({p.offset}, {p.length}) is outside the {len(ids)} input ids")
    is_embed = None
    if im_token_id is not None:
        mask = np.asarray(ids[p.offset : p.offset + p.length], dtype=np.int64) == im_token_id
        if not mask.all():
            is_embed = mask
    return {
        "hash": hashes[i] if hashes else None,
        "placeholder": [p.offset, p.length],
        "embed_count": int(p.length if is_embed is None else is_embed.sum()),
        "is_embed": None if is_embed is None else c.describe(is_embed.astype(np.uint8)),
        "fields": {k: c.describe(v[i], wire[k].dtype) for k, v in sorted(fields.items())},
    }


class Servicer(pb_grpc.VllmEngineServicer):
    def Generate(self, request, context):
        yield c.complete(pb, decode, request, context)


if __name__ == "__main__":
    c.serve("vllm", pb_grpc.add_VllmEngineServicer_to_server, Servicer())
