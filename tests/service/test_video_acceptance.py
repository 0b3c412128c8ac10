"""Acceptance: Qwen2-VL, Qwen2.5-VL and Qwen3-VL x {one video, an image and a video} x
every backend x {inline, shared memory where the backend has it} x {float32, bfloat16},
through a real server and the real stub backends (separate processes on 127.0.0.1).

Each payload parses with the upstream classes with no unknown field, and what the stub
read (inline, or from a /dev/shm segment it removed) equals the in-process
``PreprocessOutput`` bit for bit (float32) or its round-to-nearest-even (bfloat16).
SGLang and TensorRT-LLM, whose servicers take images only, refuse with FAILED_PRECONDITION.
"""

from __future__ import annotations

import blake3
import grpc
import pytest

pytest.importorskip("av")

import imagegen  # noqa: E402
import videogen  # noqa: E402
from servers import Server  # noqa: E402
from service_support import (expected_tokenspeed_with_videos, expected_vllm_with_videos, generate,  # noqa: E402
                             without)
from test_wire_current import UPSTREAM, no_unknown_fields, transports  # noqa: E402
from sglang_mm_grpc import Preprocessor  # noqa: E402
from sglang_mm_grpc.core.carriers import VideoOptions  # noqa: E402
from sglang_mm_grpc.client import Client, payload_options, video_options  # noqa: E402

MODELS = ["Qwen/Qwen2-VL-7B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen3-VL-8B-Instruct"]
VARIANTS = [("inline", "float32"), ("inline", "bfloat16"), ("shm", "float32"), ("shm", "bfloat16")]
CLIP = videogen.clip(frames=20, fps=10, size=(72, 100), noise=8, seed=3)
IMAGE = imagegen.jpeg(90, 140, seed=31)
CASES = {"video": ([], [CLIP]), "image+video": ([IMAGE], [CLIP])}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    proc = Server(tmp_path_factory.mktemp("video-acceptance"), "--shm-lease", "60", "--log-level", "WARNING",
                  models=MODELS)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def local():
    return {m: Preprocessor.from_model(m, cache_bytes=0) for m in MODELS}


def prompt(pp, images: int, videos: int) -> list[int]:
    tok = pp.info["token_ids"]
    ids = [1, 872, 198]
    for _ in range(images):
        ids += [tok["vision_start"], pp.info["image_token_id"], tok["vision_end"], 13]
    for _ in range(videos):
        ids += [tok["vision_start"], pp.info["video_token_id"], tok["vision_end"], 13]
    return ids + [3838, 374, 2]


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("model", MODELS)
def test_video_payload_reaches_the_consumer(served, stubs, local, model, case):
    images, videos = CASES[case]
    pp = local[model]
    ids = prompt(pp, len(images), len(videos))
    out = pp.preprocess(images, ids, videos=videos, video_options=VideoOptions(fps=4))
    assert out.videos and out.pixel_values_videos.shape[0] == sum(v.grid[0] * v.grid[1] * v.grid[2]
                                                                   for v in out.videos)
    hashes = [blake3.blake3(r).hexdigest() for r in images]
    layouts = (pp.field_layout, pp.family.video_field_layout)
    with Client(served.target, timeout=120) as c:
        resp = c.preprocess(model, images, ids, videos=videos, video_options=video_options(fps=4))
        assert list(resp.input_ids) == out.input_ids.tolist() and resp.video_token_id == out.video_token_id
        assert list(resp.videos[0].frame_indices) == list(out.videos[0].frame_indices)
        for backend in ("vllm", "tokenspeed"):
            for transport, dtype in VARIANTS:
                shm = transport == "shm"
                payload = c.assemble(resp.handle, backend, options=payload_options(dtype, transport, shm_min_bytes=0))
                no_unknown_fields(UPSTREAM[backend].FromString(getattr(payload, backend).SerializeToString()))
                for extra in payload.vllm_extra:
                    no_unknown_fields(UPSTREAM["vllm"].FromString(extra.SerializeToString()))
                _, report = generate(backend, stubs[backend], payload, request_id="acc")
                if backend == "vllm":
                    want = expected_vllm_with_videos(out, *layouts, hashes, "acc", dtype)
                else:
                    via = "shm handle" if shm and dtype == "bfloat16" else "decoded"
                    want = expected_tokenspeed_with_videos(out, *layouts, hashes, "acc", dtype, via)
                assert without(report, "transport") == want, (backend, transport, dtype)
                seen = transports(report) | {t for b in report.get("extra", []) for t in b["transport"].values()}
                assert seen == ({"shm"} if shm else {"inline"}), (backend, transport, dtype)
        for backend in ("sglang", "trtllm"):
            with pytest.raises(grpc.RpcError) as e:
                c.assemble(resp.handle, backend)
            details = e.value.details()
            assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "takes images only" in details
            assert "Use the vLLM or TokenSpeed backend" in details and len(details) < 250, details
        c.release(resp.handle)


def test_one_shot_video_payload(served, stubs, local):
    """Preprocess with the backend set returns the same payload as Assemble."""
    model = MODELS[1]
    pp = local[model]
    ids = prompt(pp, 0, 1)
    out = pp.preprocess([], ids, videos=[CLIP])
    with Client(served.target, timeout=120) as c:
        payload = c.preprocess(model, [], ids, backend="vllm", videos=[CLIP]).payload
    _, report = generate("vllm", stubs["vllm"], payload, request_id="one")
    want = expected_vllm_with_videos(out, pp.field_layout, pp.family.video_field_layout, [], "one")
    assert without(report, "transport") == want
    assert "second_per_grid_ts" in report["layout"]["batched"]
