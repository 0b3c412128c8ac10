"""Phi-3-vision / Phi-3.5-vision against an independent transcription of the published
remote-code processor (``references.phi3v.reference``: PIL, torchvision transforms
and torch ``F.interpolate``, as that code runs them; no code shared with the family).

Pixel values are compared bit for bit (``np.array_equal``, zero crops included),
``image_sizes`` and ``num_img_tokens`` exactly, and the expanded ids against the
published processor's layout (``<|image_k|>`` -> num_img_tokens ids, negative ids
replaced by ``<|image|>``). Needs torch; the committed fixtures cover CI without it.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import harness
import imagegen
from harness import each_large_size, each_mode, each_size
from sglang_mm_grpc import Code, Preprocessor, PreprocessError
from sglang_mm_grpc.config import resolve
from sglang_mm_grpc.families import phi3v

pytest.importorskip("torch")
pytest.importorskip("torchvision")

from references import phi3v as hf_phi3v  # noqa: E402

PRESETS = {"microsoft/Phi-3-vision-128k-instruct": 16, "microsoft/Phi-3.5-vision-instruct": 4}
IMAGE = 32044


def grid_sizes(num_crops: int) -> list[tuple[int, int]]:
    """One (h, w) per distinct HD grid reachable with ``num_crops``, both orientations."""
    seen = {}
    for long in (400, 1000, 2400):
        for short in range(1, long + 1, 7):
            for h, w in ((short, long), (long, short)):
                g = phi3v.hd_geometry(h, w, num_crops)
                if g.resized_h > 0:
                    seen.setdefault((g.hd_h // 336, g.hd_w // 336), (h, w))
    return sorted(seen.values())


SIZES = [(1, 1), (2, 2), (13, 7), (7, 13), (1, 2000), (2000, 1), (20, 3000), (3000, 20), (27, 29), (335, 335),
         (336, 336), (337, 336), (336, 672), (672, 336), (300, 500), (500, 300), (480, 640), (999, 777),
         (1008, 1680), (1344, 1344), (720, 1280), (1080, 1920)]

@functools.lru_cache(maxsize=None)
def family_pp(preset: str) -> Preprocessor:
    return harness.preprocessor(preset)


def reference(raws, num_crops: int, pre: dict | None = None):
    pre = pre or {}
    mean, std = pre.get("image_mean", phi3v.CLIP_MEAN), pre.get("image_std", phi3v.CLIP_STD)
    return hf_phi3v.reference(raws, num_crops, mean, std)


def assert_same(ours, ref):
    harness.assert_pixels(ours, ref["pixel_values"])
    assert set(ours.tensors) == {"image_sizes", "num_img_tokens"}
    harness.assert_tensors(ours, ref, "image_sizes", "num_img_tokens")
    assert ours.token_counts == ref["num_img_tokens"].tolist()


def assert_full(pp, raws, num_crops, pre=None):
    ref = reference(raws, num_crops, pre)
    source, expected = hf_phi3v.expected_ids(len(raws), ref["num_img_tokens"].tolist(), pp.family.image_token_id)
    ours = pp.preprocess(raws, input_ids=source)
    assert_same(ours, ref)
    assert ours.input_ids.dtype == np.int64 and ours.input_ids.tolist() == expected
    assert [im.patch_ranges for im in ours.images] == [(r,) for r in ours.structural_ranges]
    return ours


@pytest.mark.parametrize("preset", sorted(PRESETS))
@each_size(SIZES)
def test_sizes(preset, size):
    raw = imagegen.png(*size, seed=size[0] * 3 + size[1], kind="noise" if size[0] * size[1] < 4e5 else "smooth")
    if phi3v.hd_geometry(*size, PRESETS[preset]).resized_h == 0:  # e.g. 1x2000 with 4 crops
        assert_refused(raw, PRESETS[preset], family_pp(preset))
    else:
        assert_same(family_pp(preset).preprocess([raw]), reference([raw], PRESETS[preset]))


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_grid_shape(preset):
    """Every crop grid the HD transform reaches, portrait and landscape."""
    n = PRESETS[preset]
    sizes = grid_sizes(n)
    assert len(sizes) >= (20 if n == 16 else 6)
    pp = family_pp(preset)
    for i, size in enumerate(sizes):
        raw = imagegen.png(*size, seed=i, kind="smooth")
        assert_same(pp.preprocess([raw]), reference([raw], n))


@each_mode
def test_modes_and_formats(name):
    raw = imagegen.modes_corpus()[name]
    assert_same(family_pp("microsoft/Phi-3.5-vision-instruct").preprocess([raw]), reference([raw], 4))


@each_large_size([(3000, 4000), (6000, 8000)])
def test_large_photos(size):
    raw = harness.large_jpeg(*size)
    assert_same(family_pp("microsoft/Phi-3-vision-128k-instruct").preprocess([raw]), reference([raw], 16))


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_batch_and_layout(preset):
    """Different grids in one request: each padded with zero crops to num_crops + 1."""
    raws = [imagegen.png(336, 672, seed=1), imagegen.jpeg(640, 480, seed=2), imagegen.png(30, 3000, seed=3),
            imagegen.png(13, 7, seed=4)]
    ours = assert_full(family_pp(preset), raws, PRESETS[preset])
    n = PRESETS[preset]
    assert ours.pixel_values.shape == (4, n + 1, 3, 336, 336)
    for i, (h, w) in enumerate(ours.tensors["image_sizes"].tolist()):
        used = 1 + (h // 336) * (w // 336)
        assert not ours.pixel_values[i, used:].any() and ours.pixel_values[i, used - 1].any()


def assert_refused(raw, num_crops, pp):
    """A side that resizes to 0 pixels: the reference fails too (Pillow refuses it)."""
    with pytest.raises(ValueError):
        reference([raw], num_crops)
    with pytest.raises(PreprocessError) as e:
        pp.preprocess([raw])
    assert e.value.code is Code.INVALID_ARGUMENT and "aspect ratio" in e.value.message


def test_extreme_aspect_is_refused():
    assert_refused(imagegen.png(1, 6000, seed=5), 16, family_pp("microsoft/Phi-3-vision-128k-instruct"))
    assert_refused(imagegen.png(6000, 1, seed=6), 16, family_pp("microsoft/Phi-3-vision-128k-instruct"))


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_token_counts_random_sizes(preset):
    """The plan's count (no pixels) equals the published ``calc_num_image_tokens_from_image_size``."""
    sizes = harness.random_sizes(17, (1, 4000, 60), (1, 80, 20)) + [(1, 3000), (3000, 2), (300, 500)]
    sizes = [s for s in sizes if phi3v.hd_geometry(*s, PRESETS[preset]).resized_h > 0]  # the rest are refused
    assert len(sizes) >= 80
    pp = family_pp(preset)
    ours = harness.plan_counts(pp, sizes)
    assert ours == [hf_phi3v.count_from_size(w, h, PRESETS[preset]) for h, w in sizes]
    assert len(set(ours)) > (15 if PRESETS[preset] == 16 else 5)
    if PRESETS[preset] == 16:
        assert ours[-1] == 2353  # 500 wide, 300 tall


@harness.examples(25)
@given(
    sizes=st.lists(st.tuples(st.integers(1, 1200), st.integers(1, 1200)), min_size=1, max_size=3),
    seed=st.integers(0, 2**16),
    preset=st.sampled_from(sorted(PRESETS)),
)
def test_random_sizes(sizes, seed, preset):
    raws = [imagegen.png(h, w, seed=seed + i, kind="smooth") for i, (h, w) in enumerate(sizes)]
    assert_full(family_pp(preset), raws, PRESETS[preset])


# -- presets and model directories -------------------------------------------------------


def test_presets():
    for preset, n in PRESETS.items():
        src = resolve(preset)
        fam = family_pp(preset).family
        assert fam.name == "phi3_v" and fam.config.num_crops == n and fam.image_token_id == IMAGE
        assert src.config["model_type"] == "phi3_v"
        assert src.preprocessor_config["image_processor_type"] == "Phi3VImageProcessor"
        assert fam.field_layout.batched == ("pixel_values", "image_sizes", "num_img_tokens")


DIR_CONFIGS = {
    "one_crop_class_default": {},
    "nine_crops": {"num_crops": 9},
    "custom_mean_std": {"num_crops": 4, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.25, 0.5, 0.125]},
}


@pytest.mark.parametrize("name", sorted(DIR_CONFIGS))
def test_model_directory(tmp_path, name):
    pre = DIR_CONFIGS[name] | {"image_processor_type": "Phi3VImageProcessor"}
    pp = harness.load_dir(tmp_path, pre, {"model_type": "phi3_v"})
    n = pre.get("num_crops", 1)
    assert pp.family.name == "phi3_v" and pp.family.config.num_crops == n
    for sizes in harness.DIR_REQUESTS:
        assert_full(pp, harness.jpeg_and_png(sizes), n, pre)


def test_directory_without_model_type(tmp_path):
    pp = harness.load_dir(tmp_path, {"image_processor_type": "Phi3VImageProcessor", "num_crops": 4})
    assert pp.family.name == "phi3_v"


@pytest.mark.parametrize("pre,cause", [({"num_crops": 0}, "num_crops"), ({"do_convert_rgb": False}, "do_convert_rgb")])
def test_bad_model_directory(tmp_path, pre, cause):
    e = harness.dir_error(tmp_path, pre, {"model_type": "phi3_v"})
    assert e.code is Code.INVALID_ARGUMENT and cause in e.message
