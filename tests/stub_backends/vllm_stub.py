"""vLLM engine stub: decodes Generate as vLLM's gRPC servicer does (preprocessed path).

* taken only with ``tokenized`` input and ``mm_inputs.pixel_values`` set;
* tensors: "float32", "int64", "uint32", anything else is an error; size must match shape;
* items per key: in ``batched_keys`` -> split on dim 0; in ``flat_keys`` -> split along
  dim 0 by the named sizes tensor (which must be sent); else shared by every item;
* the number of items is the number of placeholders; every key must yield that many;
* ``is_embed`` = (ids in range == im_token_id), kept only when some position is not it.
"""

from __future__ import annotations

import numpy as np

try:
    from . import _common as c
except ImportError:  # run as a script
    import _common as c

from sglang_mm_grpc._proto.vllm.grpc.engine import vllm_engine_pb2 as pb
from sglang_mm_grpc._proto.vllm.grpc.engine import vllm_engine_pb2_grpc as pb_grpc

_DTYPES = {"float32": np.dtype("<f4"), "int64": np.dtype("<i8"), "uint32": np.dtype("<u4")}


def decode_tensor(td) -> np.ndarray:
    dt = _DTYPES.get(td.dtype)
    if dt is None:
        raise c.Rejected(f"Unsupported proto tensor dtype: {td.dtype!r}")
    return np.frombuffer(td.data, dtype=dt).reshape(list(td.shape))


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
    for key, items in out.items():
        if len(items) != num_items:
            raise c.Rejected(f"field {key!r} has {len(items)} items but there are {num_items} placeholders")
    return out


def decode(req: pb.GenerateRequest) -> dict:
    kind = req.WhichOneof("input")
    mm = req.mm_inputs
    preprocessed = req.HasField("mm_inputs") and mm.HasField("pixel_values")
    if preprocessed and kind != "tokenized":
        raise c.Rejected("preprocessed multimodal inputs need tokenized input")
    ids = list(req.tokenized.input_ids) if kind == "tokenized" else []
    report = {"backend": "vllm", "request_id": req.request_id, "input_ids": c.ids_digest(ids), "items": []}
    if not preprocessed:
        return report
    hf = {"pixel_values": decode_tensor(mm.pixel_values)}
    for key, td in mm.model_specific_tensors.items():
        hf[key] = decode_tensor(td)
    num_items = len(mm.mm_placeholders)
    fields = split_items(hf, set(mm.batched_keys), dict(mm.flat_keys), num_items)
    hashes = list(mm.mm_hashes)
    if hashes and len(hashes) != num_items:
        raise c.Rejected(f"{len(hashes)} mm_hashes for {num_items} items")
    im_token_id = mm.im_token_id if mm.HasField("im_token_id") else None
    prompt = np.asarray(ids, dtype=np.int64)
    for i, p in enumerate(mm.mm_placeholders):
        if p.length == 0 or p.offset + p.length > len(ids):
            raise c.Rejected(f"placeholder ({p.offset}, {p.length}) is outside the {len(ids)} input ids")
        is_embed = None
        if im_token_id is not None:
            mask = prompt[p.offset : p.offset + p.length] == im_token_id
            if not mask.all():
                is_embed = mask
        report["items"].append(
            {
                "hash": hashes[i] if hashes else None,
                "placeholder": [p.offset, p.length],
                "embed_count": int(p.length if is_embed is None else is_embed.sum()),
                "is_embed": None if is_embed is None else c.describe(is_embed.astype(np.uint8)),
                "fields": {k: c.describe(v[i]) for k, v in sorted(fields.items())},
            }
        )
    report["im_token_id"] = im_token_id
    report["layout"] = {
        "batched": sorted(mm.batched_keys),
        "flat": dict(sorted(mm.flat_keys.items())),
        "shared": sorted(k for k in hf if k not in mm.batched_keys and k not in mm.flat_keys),
    }
    return report


class Servicer(pb_grpc.VllmEngineServicer):
    def Generate(self, request, context):
        yield c.complete(pb, decode, request, context)


if __name__ == "__main__":
    c.serve("vllm", pb_grpc.add_VllmEngineServicer_to_server, Servicer())
