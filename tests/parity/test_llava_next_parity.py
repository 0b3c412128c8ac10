"""LLaVA-NeXT (v1.6) against the installed ``LlavaNextImageProcessorPil`` and
``LlavaNextProcessor``.

Every case runs the real processor on the same bytes and compares with
``np.array_equal``: float32 pixel values bit for bit (zero tiles of batch padding
included), ``image_sizes`` exactly; the expanded ids come from the real
``LlavaNextProcessor`` (word-level tokenizer, ``<image>`` = the config's id).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import harness
import imagegen
from references import llava_next as hf_llava_next
from references.common import run_reference
from sglang_mm_grpc import Code, Preprocessor
from sglang_mm_grpc.config import resolve
from sglang_mm_grpc.families.llava.next import DEFAULT_PINPOINTS

PRESET = "llava-hf/llava-v1.6-mistral-7b-hf"
IMAGE = 32000

# Each pinpoint exactly, its aspect at other scales, one pixel off it, plus tiny, thin,
# odd and large sizes.
PINPOINT_SIZES = sorted(
    {p for ph, pw in DEFAULT_PINPOINTS for p in ((ph, pw), (ph // 2, pw // 2), (ph * 3 // 4, pw * 3 // 4),
                                                 (ph + 1, pw), (ph, pw - 1), (ph * 2, pw * 2))}
)
SIZES = PINPOINT_SIZES + [
    (1, 1), (2, 2), (13, 7), (7, 13), (1, 1008), (1008, 1), (1, 5000), (4000, 1), (20, 3000), (3000, 20), (2, 1500), (27, 29),
    (335, 335), (336, 336), (337, 336), (300, 500), (500, 300), (480, 640), (640, 480), (999, 777),
    (720, 1280), (1080, 1920), (1365, 2048), (2000, 900),
]

def reference(pre: dict, proc: dict, image_token_id: int = IMAGE):
    return harness.cached(hf_llava_next.reference, pre, proc, image_token_id)


pair = harness.Pairs(PRESET, lambda src: reference(src.preprocessor_config, src.processor_config)).fixture()


def assert_same(ours, ref):
    harness.assert_pixels(ours, ref["pixel_values"])
    assert set(ours.tensors) == {"image_sizes"}
    harness.assert_tensors(ours, ref, "image_sizes")


def check(pp, ref, raws):
    """Ours against the HF image processor on the same bytes."""
    assert_same(pp.preprocess(raws), run_reference(ref.image_processor, raws))


def assert_full(pp, processor, raws):
    """Pixels, image_sizes and the expanded ids against the whole HF processor."""
    return harness.assert_full_prompt(pp, processor, raws, assert_same, hf_llava_next.word_prompt)


test_sizes_png, test_modes_and_formats, test_large_photos = harness.image_tests(
    check, SIZES, large_sizes=[(3000, 4000), (8000, 6000)])


def test_batch_padding(pair):
    """Tile counts 3, 5, 4 and 3 in one request: zero tiles up to 5, in the normalized domain."""
    pp, ref = pair
    raws = [imagegen.png(336, 672, seed=1), imagegen.jpeg(640, 480, seed=2), imagegen.png(30, 3000, seed=3),
            imagegen.png(13, 7, seed=4)]
    ours = assert_full(pp, ref, raws)
    assert ours.pixel_values.shape == (4, 5, 3, 336, 336)
    assert not ours.pixel_values[0, 3:].any() and not ours.pixel_values[3, 3:].any()
    assert ours.pixel_values[2, 3].any() and not ours.pixel_values[2, 4:].any()


@pytest.mark.parametrize("n", [1, 2, 3])
def test_token_layout(pair, n):
    pp, ref = pair
    raws = [imagegen.jpeg(100 + 250 * i, 700 - 150 * i, seed=i) for i in range(n)]
    assert_full(pp, ref, raws)


def test_token_counts_random_sizes(pair):
    """The plan's count (no pixel work) equals LlavaNextProcessor's own counting code
    (``_get_num_multimodal_tokens`` -> ``_get_number_of_features``, minus the CLS)."""
    pp, ref = pair
    sizes = harness.random_sizes(11, (1, 3000, 80), (1, 60, 20)) + [(1, 5000), (3000, 2)]
    sizes += [(1, 1), (336, 336), (300, 500)]
    expected = ref._get_num_multimodal_tokens(image_sizes=sizes).num_image_tokens
    assert harness.plan_counts(pp, sizes) == expected
    assert expected[-3:] == [1176, 1176, 1560]
    assert len(set(expected)) > 20


@harness.examples(30)
@given(
    sizes=st.lists(st.tuples(st.integers(1, 900), st.integers(1, 900)), min_size=1, max_size=3),
    seed=st.integers(0, 2**16),
    kind=st.sampled_from(["noise", "smooth"]),
)
def test_random_sizes(pair, sizes, seed, kind):
    raws = [imagegen.png(h, w, seed=seed + i, kind=kind) for i, (h, w) in enumerate(sizes)]
    assert_full(pair[0], pair[1], raws)


# -- presets and model directories -------------------------------------------------------


def test_preset_matches_transformers_defaults():
    """Values only checkable against class defaults: config.json ids and pinpoints."""
    from transformers import LlavaNextConfig, LlavaNextImageProcessorPil

    hf = LlavaNextConfig()
    src = resolve(PRESET)
    fam = Preprocessor.from_model(PRESET).family
    assert fam.image_token_id == hf.image_token_index == src.config["image_token_index"]
    assert [list(p) for p in fam.config.image_grid_pinpoints] == hf.image_grid_pinpoints
    assert fam.config.image_grid_pinpoints == tuple(map(tuple, LlavaNextImageProcessorPil.image_grid_pinpoints))
    assert src.config["image_grid_pinpoints"] == src.preprocessor_config["image_grid_pinpoints"]
    assert src.config["vision_feature_select_strategy"] == hf.vision_feature_select_strategy
    assert src.config["vision_config"]["patch_size"] == hf.vision_config.patch_size
    assert fam.field_layout.batched == ("pixel_values", "image_sizes") and not fam.field_layout.flat


DIR_CONFIGS = {
    "class_defaults_224": ({"image_grid_pinpoints": [[224, 448], [448, 224], [448, 448], [672, 224], [224, 672]]},
                           {}),
    "wide_grid_bilinear": ({"size": {"shortest_edge": 336}, "crop_size": 336, "resample": 2,
                            "image_grid_pinpoints": [[336, 336], [336, 1344], [1344, 336], [672, 1008], [1008, 672],
                                                     [1008, 1008]]}, {"vision_feature_select_strategy": "full"}),
    "size_height_width_lanczos": ({"size": {"height": 336, "width": 336}, "crop_size": 336, "resample": 1},
                                  {"num_additional_image_tokens": 0}),
    "custom_mean_no_normalize": ({"size": 336, "crop_size": 336, "do_normalize": False,
                                  "image_mean": [0.5, 0.5, 0.5]}, {}),
}


@pytest.mark.parametrize("name", sorted(DIR_CONFIGS))
def test_model_directory(tmp_path, name):
    pre, extra = DIR_CONFIGS[name]
    pre = pre | {"image_processor_type": "LlavaNextImageProcessor"}
    proc = {"patch_size": 14, "vision_feature_select_strategy": "default", "num_additional_image_tokens": 1,
            "processor_class": "LlavaNextProcessor"} | extra
    pp = harness.load_dir(tmp_path, pre, {"model_type": "llava_next", "image_token_index": 64000}, proc)
    assert pp.family.name == "llava_next" and pp.info["image_token_id"] == 64000
    ref = reference(pre, proc, 64000)
    for sizes in harness.DIR_REQUESTS + [[(336, 336)]]:
        assert_full(pp, ref, harness.jpeg_and_png(sizes))


@pytest.mark.parametrize("pre,cause", [
    ({"size": {"shortest_edge": 336}, "crop_size": 224}, "size and crop_size"),
    ({"size": 336, "crop_size": 336, "image_grid_pinpoints": [[336, 500]]}, "multiples"),
    ({"image_grid_pinpoints": []}, "image_grid_pinpoints"),
    ({"do_convert_rgb": False}, "do_convert_rgb"),
])
def test_bad_model_directory(tmp_path, pre, cause):
    e = harness.dir_error(tmp_path, pre, {"model_type": "llava_next"})
    assert e.code is Code.INVALID_ARGUMENT and cause in e.message
