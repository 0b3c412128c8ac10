"""LLaVA-1.5 against the installed ``CLIPImageProcessorPil`` / ``LlavaImageProcessorPil``
and ``LlavaProcessor``.

Every case runs the real processor on the same bytes and compares with
``np.array_equal``: float32 pixel values bit for bit; the expanded ids come from the
real ``LlavaProcessor`` (word-level tokenizer, ``<image>`` = the config's id).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import harness
import imagegen
from references import llava as hf_llava
from references.common import run_reference
from sglang_mm_grpc import Code, Preprocessor
from sglang_mm_grpc.config import resolve

PRESET = "llava-hf/llava-1.5-7b-hf"
IMAGE = 32000

# (height, width): tiny, thin, odd, around the 336 crop, exact multiples, large.
SIZES = [
    (1, 1), (2, 2), (13, 7), (7, 13), (1, 300), (300, 1), (20, 3000), (3000, 20), (27, 29), (224, 224),
    (335, 335), (336, 336), (337, 336), (336, 337), (336, 672), (672, 336), (300, 500), (500, 300),
    (480, 640), (999, 777), (1024, 1023), (720, 1280), (1080, 1920), (1365, 2048), (2000, 900),
]


def reference(pre: dict, proc: dict, image_token_id: int = IMAGE):
    return harness.cached(hf_llava.reference, pre, proc, image_token_id)


pair = harness.Pairs(PRESET, lambda src: reference(src.preprocessor_config, src.processor_config)).fixture()


def assert_same(ours, ref):
    harness.assert_pixels(ours, ref["pixel_values"])
    assert ours.tensors == {}


def check(pp, ref, raws):
    """Ours against the HF image processor on the same bytes."""
    assert_same(pp.preprocess(raws), run_reference(ref.image_processor, raws))


def assert_full(pp, processor, raws):
    """Pixels and the expanded ids against the whole HF processor on one prompt."""
    return harness.assert_full_prompt(pp, processor, raws, assert_same, hf_llava.word_prompt)


test_sizes_png, test_modes_and_formats, test_large_photos = harness.image_tests(
    check, SIZES, large_sizes=[(3000, 4000), (6000, 8000)])


def test_many_images_one_request(pair):
    pp, ref = pair
    raws = [imagegen.png(40 + 37 * i, 300 - 23 * i, seed=i) for i in range(5)] + [imagegen.jpeg(480, 640)]
    ours = assert_full(pp, ref, raws)
    assert ours.pixel_values.shape == (6, 3, 336, 336) and ours.token_counts == [576] * 6


@pytest.mark.parametrize("n", [1, 2, 3])
def test_token_layout(pair, n):
    pp, ref = pair
    raws = [imagegen.jpeg(100 + 50 * i, 200, seed=i) for i in range(n)]
    assert_full(pp, ref, raws)


def test_token_counts_random_sizes(pair):
    """The plan's count (no pixel work) equals LlavaProcessor's own counting code."""
    pp, ref = pair
    sizes = harness.random_sizes(7, (1, 5000, 60))
    expected = ref._get_num_multimodal_tokens(image_sizes=sizes).num_image_tokens
    assert harness.plan_counts(pp, sizes) == expected
    assert set(expected) == {576}


@harness.examples(30)
@given(
    h=st.integers(1, 900),
    w=st.integers(1, 900),
    seed=st.integers(0, 2**16),
    kind=st.sampled_from(["noise", "smooth"]),
)
def test_random_sizes(pair, h, w, seed, kind):
    if max(h, w) / min(h, w) > 50:
        w = h  # keep the reference's full-size resize cheap; thin sizes are in SIZES
    assert_full(pair[0], pair[1], [imagegen.png(h, w, seed=seed, kind=kind)])


# -- presets and model directories -------------------------------------------------------


def test_preset_matches_transformers_defaults():
    """Values only checkable against class defaults: the checkpoint's config.json ids."""
    from transformers import LlavaConfig

    hf = LlavaConfig()
    src = resolve(PRESET)
    fam = Preprocessor.from_model(PRESET).family
    assert fam.image_token_id == hf.image_token_index == src.config["image_token_index"]
    assert src.config["vision_feature_select_strategy"] == hf.vision_feature_select_strategy
    assert src.config["vision_config"]["patch_size"] == hf.vision_config.patch_size
    assert src.config["vision_config"]["image_size"] == hf.vision_config.image_size
    assert fam.plan(480, 640, 0).token_count == hf.image_seq_length
    assert fam.field_layout.batched == ("pixel_values",) and not fam.field_layout.flat


DIR_CONFIGS = {
    # LlavaImageProcessor's do_pad: square padding with the mean colour before the resize.
    "llava_pad": ({"image_processor_type": "LlavaImageProcessor", "do_pad": True, "size": {"shortest_edge": 336},
                   "crop_size": {"height": 336, "width": 336}}, {}),
    "llava_pad_no_crop_bilinear": ({"image_processor_type": "LlavaImageProcessor", "do_pad": True,
                                    "do_center_crop": False, "size": 224, "resample": 2}, {}),
    "llava_pad_crop_smaller": ({"image_processor_type": "LlavaImageProcessor", "do_pad": True,
                                "size": {"shortest_edge": 300}, "crop_size": 280, "resample": 1}, {}),
    "clip_class_defaults": ({"image_processor_type": "CLIPImageProcessor"}, {}),
    "crop_larger_than_resize": ({"size": {"shortest_edge": 200}, "crop_size": {"height": 256, "width": 240}},
                                {"patch_size": 16}),
    "no_resize": ({"do_resize": False, "crop_size": 336}, {}),
    "size_height_width_no_crop": ({"size": {"height": 300, "width": 400}, "do_center_crop": False}, {}),
    "lanczos": ({"resample": 1, "size": 336, "crop_size": 336}, {}),
    "hamming": ({"resample": 5, "size": 336, "crop_size": 336}, {}),
    "box": ({"resample": 4, "size": 336, "crop_size": 336}, {}),
    "nearest": ({"resample": 0, "size": 336, "crop_size": 336}, {}),
    "no_normalize": ({"do_normalize": False, "size": 336, "crop_size": 336}, {}),
    "custom_mean_rescale": ({"image_mean": [0.5, 0.5, 0.5], "image_std": 0.25, "rescale_factor": 0.5,
                             "size": 336, "crop_size": 336}, {"vision_feature_select_strategy": "full"}),
}


@pytest.mark.parametrize("name", sorted(DIR_CONFIGS))
def test_model_directory(tmp_path, name):
    pre, extra = DIR_CONFIGS[name]
    proc = {"patch_size": 14, "vision_feature_select_strategy": "default", "num_additional_image_tokens": 1,
            "processor_class": "LlavaProcessor"} | extra
    pp = harness.load_dir(tmp_path, pre, {"model_type": "llava", "image_token_index": 32003}, proc)
    assert pp.family.name == "llava" and pp.info["image_token_id"] == 32003
    ref = reference(pre, proc, 32003)
    for size in [(300, 500), (37, 600), (500, 37), (1080, 1920), (13, 7), (336, 336)]:
        raws = [imagegen.png(*size, seed=size[0]), imagegen.jpeg(*size, seed=size[1])]
        assert_full(pp, ref, raws)


def test_directory_without_processor_config(tmp_path):
    """The HF processor cannot count without processor_config.json; the count then
    follows config.json the way the model consumes features (CLS dropped): 576."""
    pp = harness.load_dir(tmp_path, resolve(PRESET).preprocessor_config, resolve(PRESET).config)
    assert pp.family.plan(100, 200, 0).token_count == 576


@pytest.mark.parametrize("pre,proc,cause", [
    ({"do_convert_rgb": False}, {"patch_size": 14}, "do_convert_rgb"),
    ({"size": {"shortest_edge": 300, "longest_edge": 500}}, {"patch_size": 14}, "size"),
    ({"do_center_crop": False}, {"patch_size": 14}, "do_center_crop"),
    ({"resample": 7}, {"patch_size": 14}, "filter"),
    ({}, {"patch_size": 14, "num_additional_image_tokens": -1}, "num_additional_image_tokens"),
])
def test_bad_model_directory(tmp_path, pre, proc, cause):
    e = harness.dir_error(tmp_path, pre | {"image_processor_type": "CLIPImageProcessor"}, {"model_type": "llava"}, proc)
    assert e.code is Code.INVALID_ARGUMENT and cause in e.message


@pytest.mark.parametrize("pre,cfg,family", [
    ({"image_processor_type": "CLIPImageProcessor"}, {"model_type": "llava"}, "llava"),
    ({}, {"model_type": "llava"}, "llava"),
    ({"image_processor_type": "LlavaImageProcessor", "do_pad": True}, {}, "llava"),
    ({"image_processor_type": "LlavaNextImageProcessor"}, {"model_type": "llava_next"}, "llava_next"),
    ({}, {"model_type": "llava_next"}, "llava_next"),
    ({"image_processor_type": "PixtralImageProcessor"}, {"model_type": "llava"}, "pixtral"),
])
def test_family_selection(pre, cfg, family):
    from sglang_mm_grpc.families import FAMILIES

    assert next(e.family.name for e in FAMILIES if e.matches(pre, cfg)) == family


@pytest.mark.parametrize("pre,cfg", [
    ({"image_processor_type": "CLIPImageProcessor"}, {}),
    ({"image_processor_type": "LlavaNextImageProcessor"}, {"model_type": "granite4_vision"}),
])
def test_not_claimed(pre, cfg):
    from sglang_mm_grpc.families.llava import llava, next as llava_next

    assert not llava.matches(pre, cfg) and not llava_next.matches(pre, cfg)
