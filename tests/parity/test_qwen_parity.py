"""Qwen2-VL / Qwen2.5-VL / Qwen3-VL / Qwen3-Omni / Qwen2.5-Omni images against ``Qwen2VLImageProcessorPil``.

Every case runs the real processor on the same bytes and compares with
``np.array_equal``: float32 pixel values bit for bit, integer outputs exactly.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import harness
import imagegen
from references import qwen as hf_qwen
from references.common import run_reference
from sglang_mm_grpc import Preprocessor
from sglang_mm_grpc.config import resolve

PRESETS = ["Qwen/Qwen2-VL-7B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen3-VL-8B-Instruct",
           "Qwen/Qwen3-Omni-30B-A3B-Instruct", "Qwen/Qwen2.5-Omni-7B"]

# (height, width): tiny, thin, odd, on the patch grid, around min/max pixels, large.
SIZES = [
    (1, 1), (2, 2), (13, 7), (7, 13), (27, 29), (28, 28), (32, 32), (55, 57), (56, 56), (57, 56),
    (101, 333), (255, 257), (256, 256), (300, 500), (336, 672), (448, 448), (480, 640), (512, 512),
    (999, 777), (720, 1280), (1080, 1920), (3000, 20), (20, 3000), (224, 4000), (1365, 2048),
]


PAIRS = harness.Pairs(PRESETS, hf_qwen.processor)
pair = PAIRS.fixture()


def assert_same(ours, ref, merge: int):
    harness.assert_pixels(ours, ref["pixel_values"])
    harness.assert_tensors(ours, ref, "image_grid_thw")
    grid = ours.tensors["image_grid_thw"]
    assert np.array_equal(ours.tensors["patches_per_image"], grid.prod(axis=1))
    assert ours.token_counts == [int(g.prod()) // merge**2 for g in grid]


def check(pp, ref, raws):
    """Ours against the HF image processor on the same bytes."""
    assert_same(pp.preprocess(raws), run_reference(ref, raws), pp.family.config.merge_size)


test_sizes_png, test_modes_and_formats, test_large_photos = harness.image_tests(
    check, SIZES, large_sizes=[(3000, 4000), (4000, 3000), (6000, 8000)],
    large=lambda h, w: imagegen.jpeg(h, w, seed=3, kind="smooth", quality=85),
)


def test_just_over_max_pixels():
    """12845056 = 3584*3584 is Qwen2's max: one pixel row over it takes the max branch."""
    pp = Preprocessor.from_model(PRESETS[0])
    ref = hf_qwen.reference(resolve(PRESETS[0]).preprocessor_config)
    raw = imagegen.jpeg(3585, 3584, seed=4, kind="smooth")
    assert_same(pp.preprocess([raw]), run_reference(ref, [raw]), 2)


def test_many_images_one_request(pair):
    raws = [imagegen.png(40 + 37 * i, 300 - 23 * i, seed=i) for i in range(5)] + [imagegen.jpeg(480, 640)]
    check(*pair, raws)


@harness.examples(40)
@given(
    h=st.integers(1, 900),
    w=st.integers(1, 900),
    seed=st.integers(0, 2**16),
    kind=st.sampled_from(["noise", "smooth"]),
    preset=st.sampled_from([PRESETS[0], PRESETS[2]]),
)
def test_random_sizes(h, w, seed, kind, preset):
    if max(h, w) / min(h, w) > 200:
        return  # rejected; covered by test_aspect_ratio_over_200
    check(*PAIRS(preset), [imagegen.png(h, w, seed=seed, kind=kind)])


def test_aspect_ratio_over_200(pair):
    pp, ref = pair
    harness.assert_both_refuse(pp, functools.partial(run_reference, ref), imagegen.png(2, 500), "aspect ratio")


# -- model directories with non-default settings ----------------------------------------

DIR_CONFIGS = {
    "min_max_pixels": {"min_pixels": 50000, "max_pixels": 200000, "patch_size": 14, "merge_size": 2,
                       "temporal_patch_size": 2, "image_processor_type": "Qwen2VLImageProcessor"},
    "size_dict_bilinear": {"size": {"shortest_edge": 4096, "longest_edge": 409600}, "resample": 2,
                           "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
                           "image_processor_type": "Qwen2VLImageProcessorFast"},
    "lanczos_patch16_merge2": {"min_pixels": 1024, "max_pixels": 1048576, "patch_size": 16, "resample": 1},
    "temporal1_hamming_box": {"temporal_patch_size": 1, "resample": 5, "max_pixels": 300000},
    "box_filter": {"resample": 4, "max_pixels": 250000},
    "nearest_filter": {"resample": 0, "max_pixels": 250000, "min_pixels": 100000},
    "no_normalize": {"do_normalize": False, "max_pixels": 250000},
    "custom_rescale": {"rescale_factor": 0.5, "do_normalize": True, "max_pixels": 250000},
}


@pytest.mark.parametrize("name", sorted(DIR_CONFIGS))
def test_model_directory(tmp_path, name):
    pre = DIR_CONFIGS[name]
    pp = harness.load_dir(tmp_path, pre, {"model_type": "qwen2_vl", "image_token_id": 151655})
    ref = hf_qwen.reference(pre)
    for size in harness.DIR_SIZES:
        check(pp, ref, harness.png_and_jpeg(size))
