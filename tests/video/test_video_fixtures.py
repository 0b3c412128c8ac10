"""Video processing, expansion and positions against committed outputs of the real HF code
(tests/fixtures/qwen_video.json, written by tests/video/make_fixtures.py in the torch
venv), so machines without torch check them too."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("av")

from device_norm import device_normalize  # noqa: E402
from sglang_mm_grpc import Preprocessor  # noqa: E402
from sglang_mm_grpc.core.carriers import VideoOptions  # noqa: E402

FIXTURE = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "qwen_video.json").read_text())
CLIPS = {n: base64.b64decode(c["base64"]) for n, c in FIXTURE["clips"].items()}


@pytest.fixture(scope="module")
def models():
    return {}


def _sha(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


@pytest.mark.parametrize("case", FIXTURE["cases"], ids=[c["id"] for c in FIXTURE["cases"]])
def test_video_equals_the_hf_fixture(models, case):
    if case["model"] not in models:
        models[case["model"]] = Preprocessor.from_model(case["model"] + "@torchvision")
    pp = models[case["model"]]
    want = case["outputs"]
    out = pp.preprocess([], case["prompt"], videos=[CLIPS[case["clip"]]], video_options=VideoOptions(**case["options"]),
                        use_cache=False)
    assert list(out.pixel_values_videos.shape) == want["pixel_values_videos"]["shape"]
    assert _sha(out.pixel_values_videos) == want["pixel_values_videos"]["sha256"]
    assert out.video_tensors["video_grid_thw"].tolist() == want["video_grid_thw"]
    assert list(out.videos[0].frame_indices) == want["frame_indices"]
    assert out.input_ids.tolist() == want["input_ids"]
    if want["second_per_grid_ts"] is not None:
        assert out.video_tensors["second_per_grid_ts"].tolist() == want["second_per_grid_ts"]
    assert _sha(out.positions.astype(np.int64)) == want["positions"]["sha256"] and out.rope_delta == want["rope_delta"]


@pytest.mark.parametrize("case", FIXTURE["cases"], ids=[c["id"] for c in FIXTURE["cases"]])
def test_raw_video_equals_the_hf_fixture(models, case):
    """Raw pixels (uint8, as the HF video processor gives them with do_rescale=False,
    do_normalize=False), and vLLM's device formula on them against the normalized ones
    (which the test above holds equal to HF's)."""
    if case["model"] not in models:
        models[case["model"]] = Preprocessor.from_model(case["model"] + "@torchvision")
    pp = models[case["model"]]
    want = case["outputs"]["pixel_values_videos_raw"]
    args = dict(videos=[CLIPS[case["clip"]]], video_options=VideoOptions(**case["options"]), use_cache=False)
    raw = pp.preprocess([], case["prompt"], raw=True, **args)
    assert raw.pixel_values_videos.dtype == np.uint8 and list(raw.pixel_values_videos.shape) == want["shape"]
    assert _sha(raw.pixel_values_videos) == want["sha256"]
    normalized = pp.preprocess([], case["prompt"], **args).pixel_values_videos
    c = pp.family.config.video
    got = device_normalize(raw.pixel_values_videos, c.image_mean, c.image_std, c.rescale_factor)
    assert float(np.max(np.abs(got - normalized))) <= 1e-6
