"""What the service tests share: the served models, a router's Generate call, and what
each stub should report.

The expected reports are computed here from an in-process ``Preprocessor`` output, with
their own hashing, so a stub report equal to them means the bytes that crossed the wire
(server -> router -> backend) decode to exactly the in-process result.
"""

from __future__ import annotations

import hashlib
import io
import json

import grpc
import numpy as np
from PIL import Image

from sglang_mm_grpc._proto.sglang.grpc.scheduler import sglang_scheduler_pb2 as sg
from sglang_mm_grpc._proto.sglang.grpc.scheduler import sglang_scheduler_pb2_grpc as sg_grpc
from sglang_mm_grpc._proto.trtllm import trtllm_service_pb2 as tr
from sglang_mm_grpc._proto.trtllm import trtllm_service_pb2_grpc as tr_grpc
from sglang_mm_grpc._proto.vllm.grpc.engine import vllm_engine_pb2 as vl
from sglang_mm_grpc._proto.vllm.grpc.engine import vllm_engine_pb2_grpc as vl_grpc

REPORT_KEY = "x-stub-decoded"

# The served models: two presets (patch 14 and 16) and one model directory under a NAME.
QWEN2 = "Qwen/Qwen2-VL-7B-Instruct"
QWEN3 = "Qwen/Qwen3-VL-8B-Instruct"
PIXTRAL = "mistral-community/pixtral-12b"
NAMED = "qwen25-local"
NAMED_PRESET = "Qwen/Qwen2.5-VL-7B-Instruct"
MAX_RECEIVE = 4 << 20  # small on purpose: the oversized-request test exceeds it


def prompt(pp, n_images: int) -> list[int]:
    """Text tokens with one image placeholder per image, wrapped the way the model's chat
    template wraps it (Qwen: ``<|vision_start|><|image_pad|><|vision_end|>``)."""
    tok = pp.info["token_ids"]
    ids = [1, 872, 198]
    for i in range(n_images):
        if "vision_start" in tok:
            ids += [tok["vision_start"], pp.info["image_token_id"], tok["vision_end"], 1000 + i]
        else:
            ids += [pp.info["placeholder_token_id"], 1000 + i]
    return ids + [3838, 374, 419, 30, 2]


def sha256(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def desc(arr: np.ndarray, dtype=None) -> dict:
    a = np.asarray(arr)
    if dtype is not None:
        a = a.astype(dtype)
    a = np.asarray(a, order="C")  # keeps 0-d items 0-d
    return {"shape": list(a.shape), "dtype": str(a.dtype), "sha256": sha256(a.astype(a.dtype.newbyteorder("<")).tobytes())}


def ids_digest(ids) -> dict:
    ids = list(np.asarray(ids).reshape(-1).tolist())
    return {"count": len(ids), "sha256": sha256(np.asarray(ids, dtype="<u4").tobytes())}


# -- the router side ----------------------------------------------------------------------


def generate(backend: str, target: str, payload, request_id: str = "r") -> tuple[list, dict]:
    """Build the backend's GenerateRequest from a payload as a router would, call the stub.

    Returns (responses, the stub's decoded report). RpcError propagates.
    """
    opts = [("grpc.max_receive_message_length", 512 << 20), ("grpc.max_send_message_length", 512 << 20),
            ("grpc.max_metadata_size", 1 << 20)]
    with grpc.insecure_channel(target, options=opts) as ch:
        if backend == "sglang":
            req = sg.GenerateRequest(
                request_id=request_id,
                tokenized=sg.TokenizedInput(original_text="", input_ids=payload.input_ids),
                mm_inputs=payload.sglang,
                sampling_params=sg.SamplingParams(temperature=0.0, max_new_tokens=8),
                stream=False,
            )
            call = sg_grpc.SglangSchedulerStub(ch).Generate(req, timeout=30)
        elif backend == "vllm":
            req = vl.GenerateRequest(
                request_id=request_id,
                tokenized=vl.TokenizedInput(input_ids=payload.input_ids),
                mm_inputs=payload.vllm,
                sampling_params=vl.SamplingParams(temperature=0.0, max_tokens=8),
                stream=False,
            )
            call = vl_grpc.VllmEngineStub(ch).Generate(req, timeout=30)
        else:
            req = tr.GenerateRequest(
                request_id=request_id,
                tokenized=tr.TokenizedInput(input_token_ids=payload.input_ids),
                max_tokens=8,
                multimodal_input=payload.trtllm,
            )
            call = tr_grpc.TrtllmServiceStub(ch).Generate(req, timeout=30)
        responses = list(call)
        report = json.loads(dict(call.trailing_metadata())[REPORT_KEY])
    return responses, report


# -- what each stub must have understood ----------------------------------------------------


def expected_sglang(out, raws: list[bytes], request_id: str) -> dict:
    offsets = [[o, o + n - 1] for im in out.images for o, n in im.patch_ranges]
    return {
        "backend": "sglang",
        "request_id": request_id,
        "input_ids": ids_digest(out.input_ids),
        "items": [
            {
                "modality": "image",
                "feature": desc(out.pixel_values, np.float32),
                "model_specific_data": {
                    k: desc(v, np.float32 if v.dtype.kind == "f" else np.int64) for k, v in sorted(out.tensors.items())
                },
                "offsets": offsets,
                "offset_tokens_not_im_token": 0,
            }
        ],
        "im_token_id": out.image_token_id,
        "image_data_sha256": [sha256(b) for b in raws],
        "modalities": ["image"],
        "urls": [0, 0, 0],
    }


def expected_vllm(out, field_layout, raw_blake3: list[str], request_id: str) -> dict:
    arrays = {"pixel_values": out.pixel_values, **out.tensors}
    n = len(out.images)
    per_item: dict[str, list[np.ndarray]] = {}
    for key, arr in arrays.items():
        if key in field_layout.batched:
            per_item[key] = [arr[i] for i in range(n)]
        elif key in field_layout.flat:
            sizes = np.asarray(out.tensors[field_layout.flat[key]]).reshape(-1)
            bounds = np.concatenate(([0], np.cumsum(sizes)))
            per_item[key] = [arr[bounds[i] : bounds[i + 1]] for i in range(n)]
        else:
            per_item[key] = [arr] * n
    items = []
    for i, im in enumerate(out.images):
        offset, length = im.structural_range
        patch_tokens = sum(n_ for _o, n_ in im.patch_ranges)
        is_embed = None
        if patch_tokens != length:
            mask = np.asarray(out.input_ids[offset : offset + length]) == out.image_token_id
            is_embed = desc(mask.astype(np.uint8))
        items.append(
            {
                "hash": raw_blake3[i],
                "placeholder": [offset, length],
                "embed_count": patch_tokens,
                "is_embed": is_embed,
                "fields": {
                    k: desc(v[i], np.float32 if v[i].dtype.kind == "f" else None) for k, v in sorted(per_item.items())
                },
            }
        )
    return {
        "backend": "vllm",
        "request_id": request_id,
        "input_ids": ids_digest(out.input_ids),
        "items": items,
        "im_token_id": out.image_token_id,
        "layout": {
            "batched": sorted(k for k in field_layout.batched if k in arrays),
            "flat": {k: v for k, v in sorted(field_layout.flat.items()) if k in arrays},
            "shared": sorted(k for k in arrays if k not in field_layout.batched and k not in field_layout.flat),
        },
    }


def expected_trtllm(original_ids, raws: list[bytes], request_id: str) -> dict:
    images = []
    for b in raws:
        im = Image.open(io.BytesIO(b))
        im.load()
        fmt = im.format
        if im.mode == "RGBA":
            im = im.convert("RGB")
        images.append({"sha256": sha256(b), "size": list(im.size), "mode": im.mode, "format": fmt})
    return {"backend": "trtllm", "request_id": request_id, "input_ids": ids_digest(original_ids), "images": images}
