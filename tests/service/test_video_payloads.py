"""Video payloads, built in process from outputs that carry videos, read back by the real
stub backends (separate processes that read them the way smg-grpc-servicer does).

The outputs here are a real Qwen image output with videos added as the video
processor's tensors look (random float32 patches, their grid, ``patches_per_video``,
Qwen2.5-VL's ``second_per_grid_ts``) in a prompt holding their expansions, so the
assembler's video rules are pinned independently of the decoder; the acceptance test
through a server (``test_video_acceptance.py``) runs real videos.
"""

from __future__ import annotations

import dataclasses

import blake3
import grpc
import numpy as np
import pytest
from google.protobuf import unknown_fields
from smg_grpc_proto.generated import vllm_engine_pb2

import imagegen
from service_support import (QWEN2, expected_tokenspeed_with_videos, expected_vllm_with_videos, generate, prompt,
                             without)
from sglang_mm_grpc.wire import assemble as asm
from sglang_mm_grpc.core.carriers import VideoResult
from sglang_mm_grpc.core.errors import PreprocessError
from sglang_mm_grpc.families.base import FieldLayout

VIDEO_TOKEN = 151656
LAYOUT = FieldLayout(batched=("video_grid_thw", "patches_per_video", "second_per_grid_ts"),
                     flat={"pixel_values_videos": "patches_per_video"}, keep_on_cpu=("video_grid_thw",))


def with_videos(out, grids, *, seconds: bool = False):
    """``out`` with one video per grid (t, h, w) appended to its prompt: vision_start,
    t*h*w/4 video tokens, vision_end; random float32 patches of 1176 features."""
    rng = np.random.default_rng(len(grids))
    ids = list(np.asarray(out.input_ids).tolist())
    videos, patches = [], []
    for n, (t, h, w) in enumerate(grids):
        tokens = t * h * w // 4
        offset = len(ids)
        ids += [151652, *([VIDEO_TOKEN] * tokens), 151653, 13]
        patches.append(rng.standard_normal((t * h * w, 1176), dtype=np.float32))
        videos.append(VideoResult(hash=blake3.blake3(b"video%d" % n).hexdigest(), height=h * 14, width=w * 14,
                                  resized_height=h * 14, resized_width=w * 14, encoded_bytes=1000 + n,
                                  token_count=tokens + 2, structural_range=(offset, tokens + 2),
                                  patch_ranges=((offset + 1, tokens),), grid=(t, h, w), fps=30.0,
                                  total_frames=60, duration_s=2.0, frame_indices=tuple(range(0, 2 * t * 15, 15)),
                                  second_per_grid=1.0 if seconds else None))
    tensors = {"video_grid_thw": np.asarray(grids, dtype=np.int64),
               "patches_per_video": np.asarray([t * h * w for t, h, w in grids], dtype=np.int64)}
    if seconds:
        tensors["second_per_grid_ts"] = np.ones(len(grids), dtype=np.float32)
    return dataclasses.replace(out, input_ids=np.asarray(ids, dtype=np.int64), videos=videos,
                               pixel_values_videos=np.concatenate(patches), video_tensors=tensors,
                               video_token_id=VIDEO_TOKEN, raw_videos=[b"video%d" % i for i in range(len(grids))])


@pytest.fixture(scope="module")
def outputs(pps):
    pp = pps[QWEN2]
    raw = imagegen.jpeg(90, 140, seed=5)
    image = pp.preprocess([raw], input_ids=prompt(pp, 1))
    video_only = dataclasses.replace(image, images=[], pixel_values=np.zeros((0, 1176), np.float32), tensors={},
                                     raw_images=[], input_ids=np.asarray([1, 872], np.int64))
    return {
        "video": with_videos(video_only, [(2, 4, 6)], seconds=True),
        "two-videos": with_videos(video_only, [(2, 4, 6), (1, 6, 4)]),
        "image+video": with_videos(image, [(3, 4, 4)], seconds=True),
    }, pp, [raw]


def message(out, backend, pp, dtype=""):
    return asm.assemble(out, backend, pp.field_layout, video_field_layout=LAYOUT,
                        options=asm.WireOptions(pixel_dtype=dtype)).message()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", ["video", "two-videos", "image+video"])
def test_vllm_reads_the_video_batch(stubs, outputs, case, dtype):
    outs, pp, raws = outputs
    out = outs[case]
    payload = message(out, "vllm", pp, dtype)
    assert len(payload.vllm_extra) == (1 if out.images else 0)
    for batch in [payload.vllm, *payload.vllm_extra]:
        # the upstream class reads every field (nothing unknown)
        again = vllm_engine_pb2.MultimodalInputs.FromString(batch.SerializeToString())
        assert again == batch and not unknown_fields.UnknownFieldSet(again)
    _, report = generate("vllm", stubs["vllm"], payload, request_id="v")
    hashes = [blake3.blake3(r).hexdigest() for r in raws]
    assert without(report, "transport") == expected_vllm_with_videos(out, pp.field_layout, LAYOUT, hashes, "v", dtype)
    video = report["extra"][0] if out.images else report
    assert video["modality"] == "video" and set(video["transport"].values()) == {"inline"}
    assert "pixel_values_videos" in video["transport"]


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("case", ["video", "two-videos", "image+video"])
def test_tokenspeed_reads_one_item_per_video(stubs, outputs, case, dtype):
    outs, pp, raws = outputs
    out = outs[case]
    _, report = generate("tokenspeed", stubs["tokenspeed"], message(out, "tokenspeed", pp, dtype), request_id="t")
    hashes = [blake3.blake3(r).hexdigest() for r in raws]
    assert without(report) == expected_tokenspeed_with_videos(out, pp.field_layout, LAYOUT, hashes, "t", dtype)
    assert [it["modality"] for it in report["items"]] == ["image"] * len(out.images) + ["video"] * len(out.videos)


@pytest.mark.parametrize("backend", ["sglang", "trtllm"])
def test_backends_without_video_refuse_it(outputs, backend):
    outs, pp, _ = outputs
    with pytest.raises(PreprocessError) as e:
        message(outs["image+video"], backend, pp)
    assert e.value.code.value == "FAILED_PRECONDITION"
    assert "takes images only" in e.value.message and "vLLM or TokenSpeed" in e.value.message


def test_vllm_refuses_two_batches_with_one_key(stubs, outputs):
    """What the one-batch-per-modality rule guards: the stub (as the servicer) refuses a
    video batch that repeats an image key."""
    outs, pp, _ = outputs
    payload = message(outs["image+video"], "vllm", pp)
    payload.vllm_extra[0].model_specific_tensors["image_grid_thw"].CopyFrom(
        payload.vllm.model_specific_tensors["image_grid_thw"])
    with pytest.raises(grpc.RpcError) as e:
        generate("vllm", stubs["vllm"], payload)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "same tensor keys" in e.value.details()


def test_a_video_sampled_otherwise_is_another_item(outputs):
    outs, pp, _ = outputs
    out = outs["video"]
    v = out.videos[0]
    other = dataclasses.replace(out, videos=[dataclasses.replace(v, frame_indices=(0, 10, 20, 30))])
    a, b = message(out, "vllm", pp).vllm.mm_hashes, message(other, "vllm", pp).vllm.mm_hashes
    assert a != b and len(a[0]) == 64
