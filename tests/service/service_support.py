"""What the service tests share: the served models, a router's Generate call, and what
each stub should report.

The expected reports are computed here from an in-process ``Preprocessor`` output, with
their own hashing and their own dtype references (numpy's float16 conversion; the bf16
module checked against torch), so a stub report equal to them means the bytes that
crossed the wire (server -> router -> backend, inline or through /dev/shm) decode to
exactly the in-process result, or its round-to-nearest-even.
"""

from __future__ import annotations

import hashlib
import io
import json

import blake3
import grpc
import numpy as np
from PIL import Image
from smg_grpc_proto.generated import sglang_scheduler_pb2 as sg
from smg_grpc_proto.generated import sglang_scheduler_pb2_grpc as sg_grpc
from smg_grpc_proto.generated import tokenspeed_scheduler_pb2 as ts
from smg_grpc_proto.generated import tokenspeed_scheduler_pb2_grpc as ts_grpc
from smg_grpc_proto.generated import trtllm_service_pb2 as tr
from smg_grpc_proto.generated import trtllm_service_pb2_grpc as tr_grpc
from smg_grpc_proto.generated import vllm_engine_pb2 as vl
from smg_grpc_proto.generated import vllm_engine_pb2_grpc as vl_grpc

from sglang_mm_grpc.kernels import bf16

REPORT_KEY = "x-stub-decoded"

# The served models: two presets (patch 14 and 16) and one model directory under a NAME.
QWEN2 = "Qwen/Qwen2-VL-7B-Instruct"
QWEN3 = "Qwen/Qwen3-VL-8B-Instruct"
PIXTRAL = "mistral-community/pixtral-12b"
NAMED = "qwen25-local"
NAMED_PRESET = "Qwen/Qwen2.5-VL-7B-Instruct"
MAX_RECEIVE = 4 << 20  # small on purpose: the oversized-request test exceeds it
BACKENDS = ("sglang", "vllm", "trtllm", "tokenspeed")


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


#: The Qwen-VL presets' token ids: video pad, image pad, vision start and end.
QWEN_VIDEO, QWEN_IMAGE, QWEN_START, QWEN_END = 151656, 151655, 151652, 151653


def qwen_prompt(images: int, videos: int) -> list[int]:
    """Text tokens with the images' placeholders, then the videos', each wrapped in
    vision_start / vision_end as Qwen's chat template wraps them."""
    out = [1, 872, 198]
    for _ in range(images):
        out += [QWEN_START, QWEN_IMAGE, QWEN_END]
    for _ in range(videos):
        out += [QWEN_START, QWEN_VIDEO, QWEN_END]
    return out + [3838, 2]


def sha256(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def wire_array(arr: np.ndarray, dtype: str) -> np.ndarray:
    """A float tensor as the wire carries it in ``dtype``: float32, float16 (numpy's
    nearest-even conversion) or bfloat16 (its uint16 bit patterns, nearest-even)."""
    a = np.asarray(arr, dtype=np.float32)
    if dtype == "float32":
        return a
    if dtype == "float16":
        return a.astype(np.float16)
    if dtype == "bfloat16":
        return bf16.to_bf16_bits(a).reshape(a.shape)
    raise ValueError(dtype)


def desc(arr: np.ndarray, dtype: str | None = None) -> dict:
    """shape, wire dtype name and sha256 of the little-endian C-order element bytes. A
    float array with ``dtype`` given is converted to it as the wire does."""
    a = np.asarray(arr)
    if dtype in ("float32", "float16", "bfloat16") and a.dtype.kind == "f":
        a = wire_array(a, dtype)
    elif dtype is not None:
        a = a.astype({"int64": np.int64, "uint32": np.uint32, "uint8": np.uint8}[dtype])
    a = np.asarray(a, order="C")  # keeps 0-d items 0-d
    name = dtype or str(a.dtype)
    return {"shape": list(a.shape), "dtype": name, "sha256": sha256(a.astype(a.dtype.newbyteorder("<")).tobytes())}


def ids_digest(ids) -> dict:
    ids = list(np.asarray(ids).reshape(-1).tolist())
    return {"count": len(ids), "sha256": sha256(np.asarray(ids, dtype="<u4").tobytes())}


def side_dtype(arr: np.ndarray, backend: str) -> str:
    """The wire dtype of a model-specific tensor: float32 / int64 (SGLang), + uint32 (the others)."""
    if arr.dtype.kind == "f":
        return "float32"
    if arr.dtype == np.uint32 and backend != "sglang":
        return "uint32"
    return "int64"


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
                extra_mm_inputs=payload.vllm_extra,
                sampling_params=vl.SamplingParams(temperature=0.0, max_tokens=8),
                stream=False,
            )
            call = vl_grpc.VllmEngineStub(ch).Generate(req, timeout=30)
        elif backend == "tokenspeed":
            req = ts.GenerateRequest(
                request_id=request_id,
                tokenized=ts.TokenizedInput(input_ids=payload.input_ids),
                sampling_params=ts.SamplingParams(temperature=0.0, max_new_tokens=8),
                mm_inputs=payload.tokenspeed,
            )
            call = ts_grpc.TokenSpeedSchedulerStub(ch).Generate(req, timeout=30)
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
    offsets = [[o, o + n - 1] for im in out.images for o, n in (im.patch_ranges or (im.structural_range,))]
    return {
        "backend": "sglang",
        "request_id": request_id,
        "input_ids": ids_digest(out.input_ids),
        "items": [
            {
                "modality": "image",
                "feature": desc(out.pixel_values, "float32"),
                "model_specific_data": {k: desc(v, side_dtype(v, "sglang")) for k, v in sorted(out.tensors.items())},
                "offsets": offsets,
                "offset_tokens_not_im_token": 0,
            }
        ],
        "older_servicer_misreads": [],
        "im_token_id": out.image_token_id,
        "image_data_sha256": [sha256(b) for b in raws],
        "modalities": ["image"],
        "urls": [0, 0, 0],
    }


def expected_vllm(out, field_layout, raw_blake3: list[str], request_id: str, dtype: str = "float32") -> dict:
    """The vLLM stub's report, minus ``transport`` (inline or shm: the tests say which)."""
    key = field_layout.encoder_input_key

    def name(k: str) -> str:
        return key if k == "pixel_values" else k

    arrays = {"pixel_values": out.pixel_values, **out.tensors}
    dtypes = {"pixel_values": dtype, **{k: side_dtype(v, "vllm") for k, v in out.tensors.items()}}
    n = len(out.images)
    per_item: dict[str, list[np.ndarray]] = {}
    for k, arr in arrays.items():
        if k in field_layout.batched:
            per_item[k] = [arr[i] for i in range(n)]
        elif k in field_layout.flat:
            sizes = np.asarray(out.tensors[field_layout.flat[k]]).reshape(-1)
            bounds = np.concatenate(([0], np.cumsum(sizes)))
            per_item[k] = [arr[bounds[i] : bounds[i + 1]] for i in range(n)]
        else:
            per_item[k] = [arr] * n
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
                "fields": {name(k): desc(v[i], dtypes[k]) for k, v in sorted(per_item.items(), key=lambda kv: name(kv[0]))},
            }
        )
    present = set(arrays)
    return {
        "backend": "vllm",
        "request_id": request_id,
        "input_ids": ids_digest(out.input_ids),
        "items": items,
        "modality": "image",
        "im_token_id": out.image_token_id,
        "layout": {
            "batched": sorted(name(k) for k in field_layout.batched if k in present),
            "flat": {name(k): name(v) for k, v in sorted(field_layout.flat.items()) if k in present},
            "shared": sorted(name(k) for k in present if k not in field_layout.batched and k not in field_layout.flat),
            "keep_on_cpu": sorted(name(k) for k in field_layout.keep_on_cpu if k in present),
        },
    }


def item_rows(out, field_layout, k: str, arr: np.ndarray, i: int) -> np.ndarray:
    """Item ``i``'s part of a tensor as TokenSpeed gets it (batched: arr[i:i+1])."""
    if k in field_layout.batched:
        return arr[i : i + 1]
    if k in field_layout.flat:
        sizes = np.asarray(out.tensors[field_layout.flat[k]]).reshape(-1)
        start = int(sizes[:i].sum())
        return arr[start : start + int(sizes[i])]
    return arr


def expected_tokenspeed(out, field_layout, raw_blake3: list[str], request_id: str, dtype: str = "bfloat16",
                        via: str = "decoded") -> dict:
    """The TokenSpeed stub's report, minus each item's ``transport``. ``via``: how the
    encoder input reached the model ("shm handle" for a bf16 SHM tensor)."""
    items = []
    for i, im in enumerate(out.images):
        ranges = im.patch_ranges or (im.structural_range,)
        h = blake3.blake3(raw_blake3[i].encode()).digest()  # blake3 of the image's hex blake3
        items.append({
            "modality": "image",
            "content_hash": h.hex(),
            "hash": int.from_bytes(h[:8], "little"),
            "encoder_input": desc(item_rows(out, field_layout, "pixel_values", out.pixel_values, i), dtype),
            "encoder_input_via": via,
            "model_specific": {k: desc(item_rows(out, field_layout, k, v, i), side_dtype(v, "tokenspeed"))
                               for k, v in sorted(out.tensors.items())},
            "offsets": [[o, o + n - 1] for o, n in ranges],
            "placeholder_token_id": out.image_token_id,
            "offset_tokens_not_placeholder": 0,
        })
    return {"backend": "tokenspeed", "request_id": request_id, "input_ids": ids_digest(out.input_ids), "items": items}


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


def without(report: dict, *keys: str) -> dict:
    """``report`` without top-level ``keys`` and without each item's ``transport`` (and the
    same for each of a vLLM report's ``extra`` batches)."""
    r = {k: v for k, v in report.items() if k not in keys}
    if "items" in r:
        r["items"] = [{k: v for k, v in it.items() if k != "transport"} for it in r["items"]]
    if "extra" in r:
        r["extra"] = [without(b, *keys) for b in r["extra"]]
    return r


# -- videos -----------------------------------------------------------------------------------


def video_item_hash(v) -> str:
    """A video's item id (vLLM mm_hashes, the hex TokenSpeed hashes again), computed here
    on its own: blake3 of "video:<hash>:frames=<i,j,...>:size=<h>x<w>"."""
    frames = ",".join(str(int(i)) for i in v.frame_indices)
    return blake3.blake3(f"video:{v.hash}:frames={frames}:size={v.resized_height}x{v.resized_width}".encode()).hexdigest()


def audio_item_hash(a) -> str:
    """A clip's item id, computed here on its own: its bytes' blake3 with the model's
    options, else blake3 of "audio:<hash>:max_seconds=<s>"."""
    if a.options is None or a.options.max_seconds is None:
        return a.hash
    return blake3.blake3(f"audio:{a.hash}:max_seconds={a.options.max_seconds}".encode()).hexdigest()


def _split(arrays: dict, layout, sizes_from: dict, n: int) -> dict[str, list[np.ndarray]]:
    """Each tensor's per-item parts as vLLM splits them (batched / flat / shared)."""
    per_item = {}
    for k, arr in arrays.items():
        if k in layout.batched:
            per_item[k] = [arr[i] for i in range(n)]
        elif k in layout.flat:
            sizes = np.asarray(sizes_from[layout.flat[k]]).reshape(-1)
            bounds = np.concatenate(([0], np.cumsum(sizes)))
            per_item[k] = [arr[bounds[i] : bounds[i + 1]] for i in range(n)]
        else:
            per_item[k] = [arr] * n
    return per_item


def expected_vllm_video_batch(out, layout, dtype: str = "float32") -> dict:
    """The vLLM stub's report of the video batch (modality video), minus ``transport``."""
    arrays = {"pixel_values_videos": out.pixel_values_videos, **out.video_tensors}
    dtypes = {"pixel_values_videos": dtype, **{k: side_dtype(v, "vllm") for k, v in out.video_tensors.items()}}
    per_item = _split(arrays, layout, out.video_tensors, len(out.videos))
    items = []
    for i, v in enumerate(out.videos):
        offset, length = v.structural_range
        patch_tokens = sum(n_ for _o, n_ in v.patch_ranges)
        mask = np.asarray(out.input_ids[offset : offset + length]) == out.video_token_id
        items.append({
            "hash": video_item_hash(v),
            "placeholder": [offset, length],
            "embed_count": patch_tokens,
            "is_embed": None if patch_tokens == length else desc(mask.astype(np.uint8)),
            "fields": {k: desc(per_item[k][i], dtypes[k]) for k in sorted(per_item)},
        })
    present = set(arrays)
    return {
        "items": items,
        "modality": "video",
        "im_token_id": out.video_token_id,
        "layout": {
            "batched": sorted(k for k in layout.batched if k in present),
            "flat": {k: v for k, v in sorted(layout.flat.items()) if k in present},
            "shared": sorted(k for k in present if k not in layout.batched and k not in layout.flat),
            "keep_on_cpu": sorted(k for k in layout.keep_on_cpu if k in present),
        },
    }


def expected_vllm_with_videos(out, field_layout, video_layout, raw_blake3, request_id, dtype="float32") -> dict:
    """The vLLM stub's report for an output with videos: videos alone are the one batch;
    with images, the image batch first and the video batch under ``extra``."""
    video = expected_vllm_video_batch(out, video_layout, dtype)
    if not out.images:
        return {"backend": "vllm", "request_id": request_id, "input_ids": ids_digest(out.input_ids), **video}
    report = expected_vllm(out, field_layout, raw_blake3, request_id, dtype)
    report["extra"] = [video]
    return report


def expected_tokenspeed_with_videos(out, field_layout, video_layout, raw_blake3, request_id, dtype="bfloat16",
                                    via: str = "decoded") -> dict:
    """The TokenSpeed stub's report: image items (as ``expected_tokenspeed``) and one item
    per video, in prompt order."""
    return _tokenspeed_report(out, field_layout, raw_blake3, request_id, dtype, via,
                              _video_items(out, video_layout, dtype, via))


def expected_tokenspeed_with_audio(out, field_layout, audio_layout, raw_blake3, request_id, dtype="bfloat16",
                                   via: str = "decoded") -> dict:
    """The TokenSpeed stub's report: image items (as ``expected_tokenspeed``) and one item
    per audio clip, in prompt order; a clip's encoder input is its features as floats
    (integer bins exactly), in ``dtype``."""
    return _tokenspeed_report(out, field_layout, raw_blake3, request_id, dtype, via,
                              _audio_items(out, audio_layout, dtype, via))


def expected_tokenspeed_mixed(out, field_layout, video_layout, audio_layout, raw_blake3, request_id,
                              dtype="bfloat16", via: str = "decoded") -> dict:
    """The TokenSpeed stub's report for images, videos and audio clips, in prompt order."""
    return _tokenspeed_report(out, field_layout, raw_blake3, request_id, dtype, via,
                              _video_items(out, video_layout, dtype, via) + _audio_items(out, audio_layout, dtype, via))


def _tokenspeed_report(out, field_layout, raw_blake3, request_id, dtype, via, others: list) -> dict:
    """The image items and ``others`` ((offset, item) pairs), sorted by offset."""
    report = expected_tokenspeed(out, field_layout, raw_blake3, request_id, dtype, via) if out.images else {
        "backend": "tokenspeed", "request_id": request_id, "input_ids": ids_digest(out.input_ids), "items": []}
    items = [(im.structural_range[0], it) for im, it in zip(out.images, report["items"])] + others
    report["items"] = [it for _o, it in sorted(items, key=lambda p: p[0])]
    return report


def _video_items(out, video_layout, dtype, via) -> list:
    items = []
    for i, v in enumerate(out.videos):
        h = blake3.blake3(video_item_hash(v).encode()).digest()
        items.append((v.structural_range[0], {
            "modality": "video",
            "content_hash": h.hex(),
            "hash": int.from_bytes(h[:8], "little"),
            "encoder_input": desc(item_rows_of(out.video_tensors, video_layout, "pixel_values_videos",
                                               out.pixel_values_videos, i), dtype),
            "encoder_input_via": via,
            "model_specific": {k: desc(item_rows_of(out.video_tensors, video_layout, k, a, i), side_dtype(a, "tokenspeed"))
                               for k, a in sorted(out.video_tensors.items())},
            "offsets": [[o, o + n - 1] for o, n in (v.patch_ranges or (v.structural_range,))],
            "placeholder_token_id": out.video_token_id,
            "offset_tokens_not_placeholder": 0,
        }))
    return items


def _audio_items(out, audio_layout, dtype, via) -> list:
    items = []
    key = audio_layout.encoder_input_key
    features = out.audio_tensors[key].astype(np.float32)
    for i, a in enumerate(out.audios):
        h = blake3.blake3(audio_item_hash(a).encode()).digest()
        items.append((a.structural_range[0], {
            "modality": "audio",
            "content_hash": h.hex(),
            "hash": int.from_bytes(h[:8], "little"),
            "encoder_input": desc(item_rows_of(out.audio_tensors, audio_layout, key, features, i), dtype),
            "encoder_input_via": via,
            "model_specific": {k: desc(item_rows_of(out.audio_tensors, audio_layout, k, v, i),
                                       side_dtype(v, "tokenspeed"))
                               for k, v in sorted(out.audio_tensors.items()) if k != key},
            "offsets": [[o, o + n - 1] for o, n in (a.patch_ranges or (a.structural_range,))],
            "placeholder_token_id": out.audio_token_id,
            "offset_tokens_not_placeholder": 0,
        }))
    return items


def item_rows_of(tensors: dict, layout, k: str, arr: np.ndarray, i: int) -> np.ndarray:
    if k in layout.batched:
        return arr[i : i + 1]
    if k in layout.flat:
        sizes = np.asarray(tensors[layout.flat[k]]).reshape(-1)
        start = int(sizes[:i].sum())
        return arr[start : start + int(sizes[i])]
    return arr
