"""Per-request Qwen-VL options against the real processor called with the same values.

``Qwen2VLImageProcessorPil`` takes the pixel bounds per call (``size={"shortest_edge":
min_pixels, "longest_edge": max_pixels}``, what its ``min_pixels`` / ``max_pixels``
kwargs become). For every option set (explicit bounds, ``max_tokens``, ``detail: low``,
their combinations), the effective bounds we echo are passed to the processor on the
same bytes, and pixel values and grids must be equal bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

import harness
import imagegen
from references import qwen as hf_qwen
from references.common import reference_input
from sglang_mm_grpc import Code, Preprocessor, PreprocessError
from sglang_mm_grpc.core.carriers import ImageOptions
from sglang_mm_grpc.config import resolve
from sglang_mm_grpc.families.qwen.image import LOW_DETAIL_TOKENS

PRESETS = ["Qwen/Qwen2-VL-7B-Instruct", "Qwen/Qwen3-VL-8B-Instruct"]
OPTIONS = [
    ImageOptions(detail="low"),
    ImageOptions(max_tokens=100),
    ImageOptions(max_tokens=16),
    ImageOptions(min_pixels=200 * 200, max_pixels=400 * 400),
    ImageOptions(min_pixels=1, max_pixels=1),
    ImageOptions(max_pixels=2_000_000),
    ImageOptions(min_pixels=1_000_000, max_pixels=1_500_000),  # upscales small images
    ImageOptions(max_pixels=300_000, max_tokens=200, detail="low"),
]
SIZES = [(28, 28), (61, 87), (300, 500), (480, 640), (1080, 1920), (2000, 150), (150, 2000)]


@pytest.fixture(scope="module", params=PRESETS)
def pair(request):
    pp = Preprocessor.from_model(request.param, cache_bytes=0)
    return pp, hf_qwen.reference(resolve(request.param).preprocessor_config)


def reference(processor, raws, min_pixels: int, max_pixels: int) -> dict[str, np.ndarray]:
    out = processor([reference_input(r) for r in raws], size={"shortest_edge": min_pixels, "longest_edge": max_pixels},
                    return_tensors="np")
    return {k: np.asarray(v) for k, v in out.items()}


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.as_dict().items()))
def test_options_equal_the_processor_called_with_them(pair, options):
    pp, processor = pair
    raws = [imagegen.jpeg(h, w, seed=h * 7 + w) for h, w in SIZES]
    ours = pp.preprocess(raws, options=options)
    effective = ours.images[0].options
    assert all(im.options == effective for im in ours.images)
    ref = reference(processor, raws, effective.min_pixels, effective.max_pixels)
    harness.assert_pixels(ours, ref["pixel_values"])
    harness.assert_tensors(ours, ref, "image_grid_thw")
    merge = pp.family.config.merge_size
    assert ours.token_counts == [int(g.prod()) // merge**2 for g in ref["image_grid_thw"]]
    unit = (pp.family.config.patch_size * merge) ** 2
    if options.detail == "low":
        assert effective.max_pixels <= LOW_DETAIL_TOKENS * unit and effective.detail == "low"
    if options.max_tokens is not None:
        assert effective.max_pixels <= options.max_tokens * unit and effective.max_tokens == options.max_tokens


def test_per_image_options_each_equal_their_own_processor_call(pair):
    """Two images of one request with different options: each is the processor's output
    for its own bounds, in one batch."""
    pp, processor = pair
    raws = [imagegen.jpeg(720, 1280, seed=1), imagegen.png(300, 200, seed=2)]
    ours = pp.preprocess(raws, options=ImageOptions(max_tokens=300),
                         image_options=[None, ImageOptions(detail="low", max_tokens=None)])
    rows = 0
    for i, raw in enumerate(raws):
        eff = ours.images[i].options
        ref = reference(processor, [raw], eff.min_pixels, eff.max_pixels)
        n = ref["pixel_values"].shape[0]
        assert np.array_equal(ours.pixel_values[rows:rows + n], ref["pixel_values"])
        assert np.array_equal(ours.tensors["image_grid_thw"][i:i + 1], ref["image_grid_thw"])
        rows += n
    assert rows == ours.pixel_values.shape[0]
    assert ours.images[0].options.max_tokens == 300 and ours.images[0].options.detail == "high"
    assert ours.images[1].options.max_tokens == 300 and ours.images[1].options.detail == "low"


def test_a_thin_image_still_over_max_tokens_is_refused(pair):
    """smart_resize keeps each side at least patch * merge, so a thin enough image stays
    over a small max_tokens whatever max_pixels says: refused, never cut short."""
    pp, processor = pair
    raw = imagegen.jpeg(37, 2000, seed=5)
    options = ImageOptions(max_tokens=20)
    with pytest.raises(PreprocessError) as e:
        pp.preprocess([raw], options=options)
    assert e.value.code is Code.RESOURCE_EXHAUSTED
    assert "over the budget of 20 tokens per image (the image's max_tokens option); not decoded" in e.value.message
    unit = (pp.family.config.patch_size * pp.family.config.merge_size) ** 2
    ref = reference(processor, [raw], min(pp.family.config.min_pixels, 20 * unit), 20 * unit)
    merge = pp.family.config.merge_size
    assert int(ref["image_grid_thw"][0].prod()) // merge**2 > 20  # the processor too gives more
