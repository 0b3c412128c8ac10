"""Phi-4-multimodal against the installed ``Phi4MultimodalProcessor`` /
``Phi4MultimodalImageProcessor`` (torchvision backend; needs torch).

Every case runs the real processor on the same bytes: ``image_pixel_values`` bit for
bit (global image and zero crops of batch padding included), ``image_attention_mask``
(ones for padding crops), ``image_sizes`` and ``num_img_tokens`` exactly, and the
expanded ids from the real processor (word-level tokenizer whose image token is
``<|endoftext10|>`` = the config's id). The committed fixtures cover CI without torch.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import harness
import imagegen
from harness import each_mode, each_size
from references.common import reference_input, run_reference
from sglang_mm_grpc import Code, Preprocessor, PreprocessError
from sglang_mm_grpc.config import resolve
from sglang_mm_grpc.families import phi4mm

pytest.importorskip("torch")
pytest.importorskip("torchvision")

from references import phi4mm as hf_phi4mm  # noqa: E402

PRESET = "microsoft/Phi-4-multimodal-instruct"
IMAGE = 200010
S = 448


OVER = [(S + 1, 19 * S), (19 * S, S + 1), (7 * S, 7 * S), (4000, 3000), (20, 16000), (9 * S, 5 * S + 7)]
SIZES = [(1, 1), (2, 2), (13, 7), (7, 13), (10, 3000), (3000, 10), (20, 3000), (3000, 20), (27, 29), (447, 447),
         (448, 448), (449, 448), (300, 500), (500, 300), (480, 640), (999, 777), (1000, 700), (720, 1280)]

def reference(pre: dict, image_token_id: int = IMAGE):
    return harness.cached(hf_phi4mm.reference, pre, image_token_id)


pair = harness.Pairs(PRESET, lambda src: reference(src.preprocessor_config)).fixture()


def assert_same(ours, ref):
    harness.assert_pixels(ours, ref["image_pixel_values"],
                          lambda differs: f"{int(np.count_nonzero(differs[:, 0]))} global")
    assert set(ours.tensors) == {"image_sizes", "image_attention_mask", "num_img_tokens"}
    harness.assert_tensors(ours, ref, "image_attention_mask", dtype=np.float32)
    harness.assert_tensors(ours, ref, "image_sizes")
    counts = ours.tensors["num_img_tokens"]
    assert counts.dtype == np.int64 and counts.tolist() == list(ref["num_img_tokens"]) == ours.token_counts


def check(pp, ref, raws):
    """Ours against the HF image processor on the same bytes."""
    ours = pp.preprocess(raws)
    assert_same(ours, run_reference(ref.image_processor, raws))
    return ours


def assert_full(pp, processor, raws):
    """Pixels, tensors and the expanded ids against the whole HF processor."""
    text, ids = hf_phi4mm.prompt(len(raws), pp.family.image_token_id)
    images = [reference_input(r) for r in raws]
    ref = {k: np.asarray(v) for k, v in processor(text=text, images=images, return_tensors="np").items()}
    ref["num_img_tokens"] = processor.image_processor(images)["num_img_tokens"]
    ours = pp.preprocess(raws, input_ids=ids)
    assert_same(ours, ref)
    harness.assert_image_runs(ours, ref["input_ids"][0], pp.family.image_token_id)
    return ours


@each_size(SIZES)
def test_sizes(pair, size):
    check(*pair, [harness.sized_png(size, "noise" if size[0] * size[1] < 4e5 else "smooth")])


def test_every_grid_geometry(pair):
    """Every grid of 1..36 crops, padded right or at the bottom: the resized size and the
    attention mask against HF's own ``dynamic_preprocess`` (on a blank image: it only
    needs the size)."""
    import torch

    pp, ref = pair
    seen = set()
    for rows in range(1, 37):
        for cols in range(1, 36 // rows + 1):
            for h, w in ((S * rows - 37 * (rows > 1), S * cols), (S * rows, S * cols - 51 * (cols > 1))):
                resized, mask = ref.image_processor.dynamic_preprocess(
                    torch.zeros((3, h, w), dtype=torch.uint8), S, 14, 32, max_num=36)
                crops = pp.family.plan(h, w, 0).geometry
                g = crops.grid
                r, c = g.rows, g.cols
                ours = phi4mm.attention_mask(g, 32, 14)
                assert np.array_equal(crops.masks[1:], ours) and not (crops.masks[0] - 1).any()
                assert (r, c) == (rows, cols) and tuple(resized.shape[1:]) == (S * r, S * c)
                theirs = mask.numpy().reshape(r, 32, c, 32).transpose(0, 2, 1, 3).reshape(-1, 32, 32)
                assert np.array_equal(ours, theirs), (h, w)
                seen.add((rows, cols))
    assert len(seen) == sum(36 // r for r in range(1, 37))


@each_size([(S, S * 4 - 9), (S * 3 - 100, S * 2), (S * 6, S * 6), (S * 36 - 5, 300), (200, S * 36), (S * 4, S * 9 - 1),
            (S * 2 + 1, S * 5 + 1)])
def test_grid_pixels(pair, size):
    """Pixels of grids from 1x4 to 36x1 and 6x6 (one padded side each)."""
    check(*pair, [imagegen.jpeg(*size, seed=size[0])])


@each_size(OVER)
def test_over_dynamic_hd(pair, size):
    """More than 36 crops by ceil: the closest-aspect grid search (ties included)."""
    ours = check(*pair, [imagegen.jpeg(*size, seed=size[1])])
    assert ours.pixel_values.shape[1] <= 37


@each_mode
def test_modes_and_formats(pair, name):
    check(*pair, [imagegen.modes_corpus()[name]])


def test_large_photo(pair):
    check(*pair, [imagegen.jpeg(3000, 4000, seed=9)])


def test_extreme_aspect_is_refused(pair):
    """Under 10 pixels after the resize: HF raises "the aspect ratio is very extreme"."""
    pp, ref = pair
    raw = imagegen.png(1, 2000, seed=3)
    with pytest.raises(ValueError, match="extreme"):
        run_reference(ref.image_processor, [raw])
    with pytest.raises(PreprocessError) as e:
        pp.preprocess([raw])
    assert e.value.code is Code.INVALID_ARGUMENT and "aspect ratio" in e.value.message


def test_batch_padding(pair):
    """Crop counts 3, 7, 2 and 8: zero crops up to 8 with all-ones masks."""
    pp, ref = pair
    raws = [imagegen.png(300, 500, seed=1), imagegen.jpeg(1000, 700, seed=2), imagegen.png(13, 7, seed=3),
            imagegen.png(20, 3000, seed=4)]
    ours = assert_full(pp, ref, raws)
    assert ours.pixel_values.shape == (4, 8, 3, S, S)
    assert not ours.pixel_values[0, 3:].any() and not ours.pixel_values[2, 2:].any()
    assert (ours.tensors["image_attention_mask"][2, 2:] == 1).all()


@pytest.mark.parametrize("n", [1, 2, 3])
def test_token_layout(pair, n):
    pp, ref = pair
    raws = [imagegen.jpeg(100 + 350 * i, 900 - 250 * i, seed=i) for i in range(n)]
    assert_full(pp, ref, raws)


def test_token_counts_random_sizes(pair):
    """The plan's count (no pixel work) equals the image processor's ``num_img_tokens``
    (computed from the attention mask) on random sizes, small images for speed: the
    count depends only on the size, so a 1-row image of the same (h, w) is not needed.
    """
    pp, ref = pair
    sizes = harness.random_sizes(23, (10, 2000, 50), (10, 120, 10)) + [(300, 500), (1000, 700)]
    import torch

    counts = []
    for h, w in sizes:
        img = torch.zeros((3, h, w), dtype=torch.uint8)
        try:
            counts.append(ref.image_processor([img], return_tensors="np")["num_img_tokens"][0])
        except ValueError:  # too extreme: ours refuses it as well
            counts.append(None)
    ours = []
    for h, w in sizes:
        try:
            ours.append(pp.family.plan(h, w, 0).token_count)
        except PreprocessError:
            ours.append(None)
    assert ours == counts
    assert counts[-2:] == [721, 1791] and sum(c is not None for c in counts) >= 50
    assert len(set(counts)) > 30


@harness.examples(15)
@given(
    sizes=st.lists(st.tuples(st.integers(10, 1200), st.integers(10, 1200)), min_size=1, max_size=3),
    seed=st.integers(0, 2**16),
)
def test_random_sizes(pair, sizes, seed):
    raws = [imagegen.png(h, w, seed=seed + i, kind="smooth") for i, (h, w) in enumerate(sizes)]
    assert_full(pair[0], pair[1], raws)


# -- presets and model directories -------------------------------------------------------


def test_preset_matches_transformers_defaults():
    from transformers import Phi4MultimodalConfig, Phi4MultimodalImageProcessor

    src = resolve(PRESET)
    fam = Preprocessor.from_model(PRESET).family
    hf = Phi4MultimodalImageProcessor()
    c = fam.config
    assert (c.size, c.size) == (hf.size["height"], hf.size["width"]) and c.patch_size == hf.patch_size
    assert c.dynamic_hd == hf.dynamic_hd and c.image_mean == tuple(hf.image_mean) and c.image_std == tuple(hf.image_std)
    assert fam.image_token_id == Phi4MultimodalConfig().vision_config.image_token_id == IMAGE
    assert src.config["model_type"] == Phi4MultimodalConfig.model_type
    assert fam.field_layout.batched == ("pixel_values", "image_sizes", "image_attention_mask", "num_img_tokens")
    assert phi4mm.target_ratios(36) == tuple(sorted({(i, j) for n in range(1, 37) for i in range(1, n + 1)
                                                     for j in range(1, n + 1) if 1 <= i * j <= 36},
                                                    key=lambda x: x[0] * x[1]))


DIR_CONFIGS = {
    "class_defaults": {},
    "dynamic_hd_4": {"dynamic_hd": 4},
    "size_224_patch_16": {"size": {"height": 224, "width": 224}, "patch_size": 16, "dynamic_hd": 12},
    "clip_stats_no_rescale": {"do_rescale": False, "image_mean": [120.0, 110.0, 100.0], "image_std": [60.0, 61.0, 62.0]},
}


@pytest.mark.parametrize("name", sorted(DIR_CONFIGS))
def test_model_directory(tmp_path, name):
    pre = DIR_CONFIGS[name] | {"image_processor_type": "Phi4MultimodalImageProcessor"}
    pp = harness.load_dir(tmp_path, pre, {"model_type": "phi4_multimodal", "vision_config": {"image_token_id": 123456}})
    assert pp.family.name == "phi4_multimodal" and pp.info["image_token_id"] == 123456
    ref = reference(pre, 123456)
    for sizes in harness.DIR_REQUESTS:
        assert_full(pp, ref, harness.jpeg_and_png(sizes))


@pytest.mark.parametrize("pre,cause", [
    ({"size": {"height": 448, "width": 336}}, "square"),
    ({"resample": 2}, "bicubic"),
    ({"do_convert_rgb": False}, "do_convert_rgb"),
    ({"dynamic_hd": 0}, "dynamic_hd"),
])
def test_bad_model_directory(tmp_path, pre, cause):
    e = harness.dir_error(tmp_path, pre, {"model_type": "phi4_multimodal"})
    assert e.code is Code.INVALID_ARGUMENT and cause in e.message


def test_remote_code_checkpoint_not_claimed(tmp_path):
    """model_type "phi4mm" (remote code, PIL resize) is not this family."""
    e = harness.dir_error(tmp_path, {"image_processor_type": "Phi4MMImageProcessor"}, {"model_type": "phi4mm"})
    assert "no supported family" in e.message


def test_hub_style_directory(tmp_path):
    """The 4.x class name (``...Fast``) and the audio extractor's keys in the same file."""
    pre = {"image_processor_type": "Phi4MultimodalImageProcessorFast", "processor_class": "Phi4MultimodalProcessor",
           "feature_extractor_type": "Phi4MultimodalFeatureExtractor", "audio_compression_rate": 8,
           "audio_downsample_rate": 1, "audio_feat_stride": 1, "dynamic_hd": 36, "sampling_rate": 16000}
    pp = harness.load_dir(tmp_path, pre, {"model_type": "phi4_multimodal", "vision_config": {}})
    assert pp.family.name == "phi4_multimodal" and pp.family.config == Preprocessor.from_model(PRESET).family.config
