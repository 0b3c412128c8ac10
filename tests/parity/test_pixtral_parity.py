"""Pixtral-12B and Mistral-Small-3.1 against the installed ``PixtralProcessor``.

The reference is the real processor class over ``PixtralImageProcessorPil``, so the
image processor runs with the processor's patch size (patch * spatial_merge_size), as
in production. Every case runs it on the same bytes and compares with
``np.array_equal``: float32 pixel values (batch padding included) bit for bit,
``image_sizes`` and the expanded token ids exactly.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import harness
import imagegen
from references import pixtral as hf_pixtral
from references.common import reference_input, run_reference
from sglang_mm_grpc import Code, PreprocessError
from sglang_mm_grpc.config import resolve
from sglang_mm_grpc.families.pixtral import TEKKEN_IDS

PIXTRAL = "mistral-community/pixtral-12b"
MISTRAL3 = "mistralai/Mistral-Small-3.1-24B-Instruct-2503"
PRESETS = [PIXTRAL, MISTRAL3]

# (height, width): tiny, thin, odd, on and around the 16 / 28 grids, at and just over the
# longest edge (1024 / 1540), large.
SIZES = [
    (1, 1), (2, 2), (13, 7), (7, 13), (15, 16), (16, 16), (17, 16), (27, 29), (28, 28), (29, 28),
    (55, 57), (56, 56), (101, 333), (255, 257), (300, 500), (480, 640), (512, 512), (999, 777),
    (1024, 1024), (1025, 1024), (1024, 1025), (1540, 1540), (1541, 1540), (1540, 1541),
    (720, 1280), (1080, 1920), (3000, 20), (20, 3000), (1, 1024), (1024, 1),
]

PAIRS = harness.Pairs(PRESETS, hf_pixtral.processor)
pair = PAIRS.fixture()


def assert_same(ours, ref):
    harness.assert_pixels(ours, ref["pixel_values"])
    harness.assert_tensors(ours, ref, "image_sizes")
    sizes = ours.tensors["image_sizes"]
    assert [(im.resized_height, im.resized_width) for im in ours.images] == [tuple(s) for s in sizes.tolist()]


def check(pp, ref, raws):
    """Ours against the HF processor on the same bytes."""
    assert_same(pp.preprocess(raws), run_reference(ref, raws))


test_sizes_png, test_modes_and_formats, test_large_photos = harness.image_tests(
    check, SIZES, large_sizes=[(6000, 8000), (8000, 6000)])


def test_batch_padding(pair):
    """Different sizes in one request: zero padding after normalization, to max H and max W
    taken from different images."""
    pp, ref = pair
    raws = [imagegen.png(40 + 97 * i, 700 - 131 * i, seed=i) for i in range(5)]
    raws += [imagegen.jpeg(1300, 90, seed=7), imagegen.modes_corpus()["png_rgba"]]
    ours = pp.preprocess(raws)
    assert_same(ours, run_reference(ref, raws))
    pv, sizes = ours.pixel_values, ours.tensors["image_sizes"]
    assert len({tuple(s) for s in sizes.tolist()}) == len(raws)
    for i, (h, w) in enumerate(sizes.tolist()):
        assert not pv[i, :, h:, :].any() and not pv[i, :, :, w:].any()


@harness.each_size([(1, 2000), (2, 4000), (1, 1541)])
def test_side_shrinks_to_zero(pair, size):
    """A side that floors to 0 inside the longest edge: HF raises, we reject that image."""
    pp, ref = pair
    raw = imagegen.png(*size)
    limit = pp.family.config.max_height
    if max(size) <= limit:
        pytest.skip("fits without shrinking for this preset")
    harness.assert_both_refuse(pp, functools.partial(run_reference, ref), raw, "0 pixels")


@harness.examples(40)
@given(
    h=st.integers(1, 1700),
    w=st.integers(1, 1700),
    seed=st.integers(0, 2**16),
    kind=st.sampled_from(["noise", "smooth"]),
    preset=st.sampled_from(PRESETS),
)
def test_random_sizes(h, w, seed, kind, preset):
    pp, ref = PAIRS(preset)
    raw = imagegen.png(h, w, seed=seed, kind=kind)
    try:
        expected = run_reference(ref, [raw])
    except ValueError:  # a side floors to 0: covered by test_side_shrinks_to_zero
        with pytest.raises(PreprocessError):
            pp.preprocess([raw])
        return
    assert_same(pp.preprocess([raw]), expected)


# -- token expansion against the processor ----------------------------------------------


def _random_sizes(n: int, seed: int) -> list[tuple[int, int]]:
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        h, w = (int(v) for v in rng.integers(1, 3000, 2))
        if min(h, w) * 1024 >= max(h, w):  # no side shrinks to 0 for either preset
            out.append((h, w))
    return out


TOKEN_SIZES = _random_sizes(60, seed=1234) + [(1, 1), (16, 16), (28, 28), (1024, 1024), (1540, 1540), (300, 500)]


def _expected_expansion(rows: int, cols: int) -> np.ndarray:
    row = [TEKKEN_IDS["[IMG]"]] * cols + [TEKKEN_IDS["[IMG_BREAK]"]]
    seq = np.array(row * rows, dtype=np.int64)
    seq[-1] = TEKKEN_IDS["[IMG_END]"]
    return seq


@pytest.mark.parametrize("preset", PRESETS)
def test_token_sequences_match_processor(preset):
    """Per image: the processor's expanded ids for a prompt with text around two [IMG]
    placeholders equal ours (count, [IMG_BREAK] rows, [IMG_END] last), for 66 sizes."""
    pp, ref = PAIRS(preset)
    unit = pp.family.config.unit
    prompt = "hello [IMG] describe these [IMG] world"
    prompt_ids = np.asarray(ref.tokenizer(prompt)["input_ids"], dtype=np.int64)
    assert np.count_nonzero(prompt_ids == TEKKEN_IDS["[IMG]"]) == 2
    checked = 0
    for a, b in zip(TOKEN_SIZES[0::2], TOKEN_SIZES[1::2]):
        raws = [harness.flat_png(*s) for s in (a, b)]
        hf = ref(images=[reference_input(r) for r in raws], text=[prompt], return_tensors="np")
        ours = pp.preprocess(raws, input_ids=prompt_ids)
        assert np.array_equal(ours.input_ids, hf["input_ids"][0])
        assert np.array_equal(ours.tensors["image_sizes"], hf["image_sizes"])
        # the counting API (what routers use before any pixels) on the original sizes
        counts = ref._get_num_multimodal_tokens(image_sizes=[a, b])["num_image_tokens"]
        assert ours.token_counts == counts
        for im, (off, n), (h, w) in zip(ours.images, ours.structural_ranges, hf["image_sizes"].tolist()):
            rows, cols = h // unit, w // unit
            exp = _expected_expansion(rows, cols)
            assert n == len(exp) == (cols + 1) * rows == im.token_count
            assert np.array_equal(ours.input_ids[off:off + n], exp)
            # patch-only ranges: one run of [IMG] per row, between the row ends
            assert im.patch_ranges == tuple((off + r * (cols + 1), cols) for r in range(rows))
            checked += 1
    assert checked == len(TOKEN_SIZES)


# -- presets against transformers' class defaults ---------------------------------------


def test_pixtral_preset_equals_class_defaults():
    """Pixtral-12B's values are the defaults of the classes HF wrote for it."""
    from transformers import LlavaConfig, PixtralVisionConfig
    from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil

    ip, vision = PixtralImageProcessorPil(), PixtralVisionConfig()
    pp, ref = PAIRS(PIXTRAL)
    c = pp.family.config
    assert (c.max_height, c.max_width) == (ip.size.longest_edge,) * 2 == (vision.image_size,) * 2
    assert c.patch_size == ip.patch_size["height"] == vision.patch_size == ref.patch_size
    assert c.spatial_merge_size == ref.spatial_merge_size == 1
    assert c.resample == int(ip.resample) and c.rescale_factor == ip.rescale_factor
    assert c.image_mean == tuple(ip.image_mean) and c.image_std == tuple(ip.image_std)
    assert resolve(PIXTRAL).config["model_type"] == LlavaConfig.model_type
    assert (ref.image_token, ref.image_break_token, ref.image_end_token) == ("[IMG]", "[IMG_BREAK]", "[IMG_END]")


def test_mistral3_preset_equals_config_class():
    """Mistral-Small-3.1's geometry and [IMG] id are Mistral3Config's defaults (its docstring
    checkpoint); the image processor keeps the CLIP statistics and bicubic filter."""
    from transformers import Mistral3Config

    hf = Mistral3Config()
    pp, ref = PAIRS(MISTRAL3)
    c = pp.family.config
    assert pp.info["image_token_id"] == hf.image_token_index == hf.image_token_id
    assert c.patch_size == hf.vision_config.patch_size == ref.patch_size
    assert c.spatial_merge_size == hf.spatial_merge_size == ref.spatial_merge_size
    assert (c.max_height, c.max_width) == (hf.vision_config.image_size,) * 2 == (ref.image_processor.size.longest_edge,) * 2
    assert c.unit == 28


# -- model directories ------------------------------------------------------------------


MISTRAL3_CFG = {"model_type": "mistral3", "image_token_index": 10, "spatial_merge_size": 2,
                "vision_config": {"model_type": "pixtral", "patch_size": 14, "image_size": 1540}}
PIXTRAL_CFG = {"model_type": "llava", "image_token_index": 10,
               "vision_config": {"model_type": "pixtral", "patch_size": 16, "image_size": 1024}}

# name: (preprocessor_config, config, processor_config written, processor kwargs HF gets)
DIRS = {
    "pixtral_real_files": (resolve(PIXTRAL).preprocessor_config, PIXTRAL_CFG, resolve(PIXTRAL).processor_config, None),
    "mistral3_real_files": (resolve(MISTRAL3).preprocessor_config, MISTRAL3_CFG, resolve(MISTRAL3).processor_config,
                            None),
    # no processor_config.json: PixtralProcessor's defaults (patch 16, merge 1) are the model's
    "pixtral_no_processor_file": ({"image_processor_type": "PixtralImageProcessorFast"}, PIXTRAL_CFG, None, {}),
    "height_width_box_bilinear": ({"size": {"height": 700, "width": 400}, "resample": 2,
                                   "image_processor_type": "PixtralImageProcessor"}, MISTRAL3_CFG,
                                  {"patch_size": 14, "spatial_merge_size": 2}, None),
    "custom_stats_lanczos": ({"image_mean": [0.5, 0.4, 0.3], "image_std": [0.2, 0.25, 0.3], "resample": 1,
                              "size": {"longest_edge": 512}}, PIXTRAL_CFG, {"patch_size": 16}, None),
    "no_normalize": ({"do_normalize": False, "size": {"longest_edge": 640}}, MISTRAL3_CFG,
                     {"patch_size": 14, "spatial_merge_size": 2}, None),
    "custom_rescale_box": ({"rescale_factor": 0.5, "resample": 4, "size": {"longest_edge": 600}}, MISTRAL3_CFG,
                           {"patch_size": 14, "spatial_merge_size": 2}, None),
    "no_model_type_processor_only": ({"image_processor_type": "PixtralImageProcessor", "size": {"longest_edge": 800}},
                                     {"image_token_index": 10}, {"patch_size": 16}, None),
}


@pytest.mark.parametrize("name", sorted(DIRS))
def test_model_directory(tmp_path, name):
    pre, cfg, proc, hf_proc = DIRS[name]
    pp = harness.load_dir(tmp_path, pre, cfg, proc)
    assert pp.family.name == "pixtral"
    ref = hf_pixtral.reference(pre, proc if hf_proc is None else hf_proc)
    for size in harness.DIR_SIZES:
        check(pp, ref, harness.png_and_jpeg(size))


def test_mistral3_processor_file_without_merge_size(tmp_path):
    """Some converted Mistral-Small-3.1 copies ship a processor_config.json without
    spatial_merge_size: PixtralProcessor then uses 1 and emits 4x the [IMG] tokens the
    model has features for. We take config.json's spatial_merge_size (the model's), i.e.
    the output of the processor configured as the model needs it."""
    proc = {k: v for k, v in resolve(MISTRAL3).processor_config.items() if k != "spatial_merge_size"}
    pp = harness.load_dir(tmp_path, resolve(MISTRAL3).preprocessor_config, MISTRAL3_CFG, proc)
    assert pp.family.config.unit == 28
    ref = hf_pixtral.reference(resolve(MISTRAL3).preprocessor_config, {**proc, "spatial_merge_size": 2})
    check(pp, ref, [imagegen.png(300, 500), imagegen.png(61, 87, seed=2)])


def test_llava_without_pixtral_is_not_ours(tmp_path):
    from sglang_mm_grpc.families import pixtral

    clip = {"image_processor_type": "CLIPImageProcessor", "crop_size": 336}
    assert not pixtral.matches(clip, {"model_type": "llava", "vision_config": {"model_type": "clip_vision_model"}})
    assert not pixtral.matches({"image_processor_type": "PixtralImageProcessor"}, {"model_type": "lighton_ocr"})
    assert pixtral.matches({}, MISTRAL3_CFG) and pixtral.matches({}, PIXTRAL_CFG)


@pytest.mark.parametrize(
    "cfg, proc, message",
    [
        ({"model_type": "llava", "vision_config": {"model_type": "pixtral"}}, {}, "image_token_index 32000"),
        ({**MISTRAL3_CFG, "image_token_index": 11}, {}, "image_token_index 11"),
        (MISTRAL3_CFG, {"image_break_token": "<row>"}, "'<row>'"),
    ],
)
def test_unknown_token_ids_rejected(tmp_path, cfg, proc, message):
    """Only the Tekken ids are known here: anything else is refused, not guessed."""
    e = harness.dir_error(tmp_path, {}, cfg, proc)
    assert e.code is Code.INVALID_ARGUMENT and message in str(e)


@pytest.mark.parametrize("key", ["do_resize", "do_convert_rgb"])
def test_unsupported_switches_rejected(tmp_path, key):
    e = harness.dir_error(tmp_path, {key: False}, MISTRAL3_CFG, {})
    assert e.code is Code.INVALID_ARGUMENT and key in str(e)
