"""Inkling against the installed ``InklingImageProcessor`` / ``InklingProcessor``.

The reference is torchvision-only, so this suite needs torch (CI without torch checks
the committed fixtures instead: tests/parity/test_inkling_fixtures.py). pixel_values
(float32, [patches, 2, 40, 40, 3]) are compared with ``np.array_equal``; ``num_patches``
and the expanded ids exactly. The presets keep every image at its size (the class
default); model directories set ``rescale_image_frac`` (2.0 with the 2048 cap is what
SGLang serves), which resizes with torch's uint8 Lanczos.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import harness  # noqa: E402
import imagegen  # noqa: E402
from harness import each_size  # noqa: E402
from references import inkling as hf_inkling  # noqa: E402
from references.common import reference_input, run_torch_reference  # noqa: E402
from sglang_mm_grpc.config import resolve  # noqa: E402
from sglang_mm_grpc.families.inkling import inkling  # noqa: E402

INKLING = "thinkingmachines/Inkling"
BIG = {"max_image_tokens": 1 << 20}  # the 8000x6000 photos (30150 patches) are over the default budget
IMAGE, BOS = hf_inkling.TOKENS["<|unused_200054|>"], hf_inkling.TOKENS["<|content_image|>"]

PAIRS = harness.Pairs([INKLING, "thinkingmachines/Inkling-NVFP4"], hf_inkling.processor, **BIG)
pair = PAIRS.fixture()

# (height, width): tiny, thin, odd, on and around the 40 px grid (W a multiple of 40 gives
# an extra column of padding only), photo sizes
SIZES = [
    (1, 1), (2, 2), (13, 7), (7, 13), (39, 39), (40, 40), (41, 41), (40, 80), (80, 40), (79, 121), (120, 120),
    (119, 160), (300, 500), (500, 300), (1, 2000), (2000, 1), (3000, 20), (20, 3000), (1080, 1920),
]
LARGE = [(3024, 4032), (6000, 8000), (8000, 6000)]


def assert_same(ours, ref: dict):
    harness.assert_pixels(ours, ref["pixel_values"])
    harness.assert_tensors(ours, ref, "num_patches")
    assert ours.token_counts == ours.tensors["num_patches"].tolist()
    assert int(ours.tensors["num_patches"].sum()) == ours.pixel_values.shape[0]


def check(pp, ref, raws):
    assert_same(pp.preprocess(raws), run_torch_reference(ref.image_processor, raws))


test_sizes_png, test_modes_and_formats, test_large_photos = harness.image_tests(check, SIZES, LARGE)


# -- model directories: the rescale, other filters and statistics ---------------------------

BASE = resolve(INKLING).preprocessor_config
DIRS = {
    "sglang_serving_2x_cap_2048": {"rescale_image_frac": 2.0, "rescale_image_max_upscaled_long_edge": 2048},
    "frac_1.5_no_cap": {"rescale_image_frac": 1.5, "rescale_image_max_upscaled_long_edge": None},
    "frac_0.37_downscale": {"rescale_image_frac": 0.37},
    "cap_below_the_image": {"rescale_image_frac": 3.0, "rescale_image_max_upscaled_long_edge": 100},
    "bicubic_2x": {"rescale_image_frac": 2.0, "resample": 3},
    "bilinear_1.25x_other_stats": {"rescale_image_frac": 1.25, "resample": 2, "image_mean": [0.5, 0.25, 0.75],
                                   "image_std": [0.2, 0.3, 0.4]},
    "nearest_2x": {"rescale_image_frac": 2.0, "resample": 0},
    "patch_32_rescale_only": {"size": {"height": 32, "width": 32}, "do_normalize": False},
    "raw_values": {"do_rescale": False, "do_normalize": False, "rescale_image_frac": 1.1},
}


def _dir_pair(tmp_path, name):
    pre = {**BASE, **DIRS[name]}
    directory = harness.write_model_dir(tmp_path, pre, resolve(INKLING).config)
    return harness.preprocessor(directory, **BIG), hf_inkling.reference(pre)


@pytest.mark.parametrize("name", sorted(DIRS))
def test_model_directories(tmp_path, name):
    pp, ref = _dir_pair(tmp_path, name)
    for size in harness.DIR_SIZES:
        check(pp, ref, harness.png_and_jpeg(size))
    for sizes in harness.DIR_REQUESTS:
        check(pp, ref, harness.jpeg_and_png(sizes))


@pytest.mark.parametrize("name", ["sglang_serving_2x_cap_2048", "frac_0.37_downscale"])
def test_model_directory_modes(tmp_path, name):
    pp, ref = _dir_pair(tmp_path, name)
    for mode, raw in imagegen.modes_corpus().items():
        if mode != "tiny_1x1_png" or "downscale" not in name:  # 1x1 at 0.37: see test_an_image_rescaled_to_nothing
            check(pp, ref, [raw])


@pytest.fixture(scope="module")
def rescaling(tmp_path_factory):
    return _dir_pair(tmp_path_factory.mktemp("rescale"), "sglang_serving_2x_cap_2048")


@harness.examples(30)
@given(h=st.integers(1, 1300), w=st.integers(1, 1300), seed=st.integers(0, 2**16),
       kind=st.sampled_from(["noise", "smooth"]))
def test_random_sizes_rescaled(rescaling, h, w, seed, kind):
    """Upscaled by 2 (at most to a 2048 long edge) with torch's uint8 Lanczos."""
    check(*rescaling, [imagegen.png(h, w, seed=seed, kind=kind)])


def test_batch(pair):
    """Images of several sizes, two of the same (the processor treats each on its own):
    patches concatenated in image order; the vLLM split by num_patches gives each its own."""
    pp, ref = pair
    sizes = [(300, 500), (40, 40), (1200, 700), (300, 500), (2, 3000), (700, 1200)]
    raws = [imagegen.png(h, w, seed=i) for i, (h, w) in enumerate(sizes)] + [imagegen.modes_corpus()["png_rgba"]]
    out = pp.preprocess(raws)
    assert_same(out, run_torch_reference(ref.image_processor, raws))
    parts = np.split(out.pixel_values, np.cumsum(out.tensors["num_patches"])[:-1])
    for raw, part in zip(raws, parts):
        assert np.array_equal(part, run_torch_reference(ref.image_processor, [raw])["pixel_values"])
    assert pp.field_layout.flat == {"pixel_values": "num_patches"} and pp.field_layout.batched == ("num_patches",)


# -- geometry, the resize and the padding against the processor's own pieces ---------------


class _Resized(Exception):
    pass


def _hf_size(h: int, w: int, frac, cap) -> tuple[int, int]:
    """The size ``InklingImageProcessor._preprocess`` asks ``resize`` for (its own
    arithmetic, run on an image of that size), or the image's when it does not resize."""
    from transformers import InklingImageProcessor

    ip = InklingImageProcessor(rescale_image_frac=frac, rescale_image_max_upscaled_long_edge=cap)

    def spy(image, size, **kwargs):
        raise _Resized((size.height, size.width))

    ip.resize = spy
    try:
        ip(torch.zeros(3, h, w, dtype=torch.uint8), return_tensors="pt")
    except _Resized as e:
        return e.args[0]
    return h, w


def test_rescaled_sizes_match_the_processor():
    """Half-up rounding, the cap that only limits growth, ratio exactly 1: on 400 sizes
    and four settings."""
    rng = np.random.default_rng(11)
    sizes = [tuple(int(v) for v in np.exp(rng.uniform(0, 8.3, 2))) for _ in range(100)]
    sizes += [(1, 1), (1023, 1024), (1024, 1024), (1025, 1024), (2048, 7), (4096, 9), (2047, 2049), (333, 1)]
    for frac, cap in ((2.0, 2048), (1.5, None), (0.37, 2048), (3.0, 100), (None, 2048)):
        for h, w in sizes:
            assert inkling.rescaled_size(h, w, frac, cap) == _hf_size(h, w, frac, cap), (h, w, frac, cap)


def test_an_image_rescaled_to_nothing_is_refused(tmp_path):
    """HF asks torch for a 0-pixel side (and fails); we refuse the image by name."""
    pp, _ = _dir_pair(tmp_path, "frac_0.37_downscale")
    assert min(inkling.rescaled_size(1, 100, 0.37, 2048)) == 0
    with pytest.raises(harness.PreprocessError) as e:
        pp.preprocess([imagegen.png(40, 40, seed=1), imagegen.png(1, 100, seed=2)])
    assert e.value.code is harness.Code.INVALID_ARGUMENT and e.value.item == 1 and "no pixels left" in e.value.message


def test_lanczos_is_torchs_and_not_pillows(rescaling):
    """The default processor's resize is torch's uint8 Lanczos (int16 weights at a
    per-axis precision, horizontal pass first), which differs from Pillow's 22-bit one:
    the torchvision variant matches HF, the PIL variant does not (it is checked against
    Pillow in test_inkling_pil_parity.py)."""
    pp, ref = rescaling
    raw = imagegen.png(300, 500, seed=12)
    hf = run_torch_reference(ref.image_processor, [raw])
    assert np.array_equal(pp.preprocess([raw]).pixel_values, hf["pixel_values"])
    pil = harness.preprocessor(pp.source + "@pil", **BIG).preprocess([raw]).pixel_values
    assert pil.shape == hf["pixel_values"].shape and not np.array_equal(pil, hf["pixel_values"])


def test_padding_is_minus_one_normalized_like_the_pixels(pair):
    """A 1x1 image is one patch of 1599 padding pixels: HF's value for them, per channel."""
    pp, ref = pair
    hf = run_torch_reference(ref.image_processor, [imagegen.png(1, 1, seed=13)])["pixel_values"]
    assert np.array_equal(hf[0, :, 1:, :].reshape(-1, 3), np.broadcast_to(inkling.pad_values(pp.family.config),
                                                                           (2 * 39 * 40, 3)))


# -- token layout against the processor ---------------------------------------------------


def _random_sizes(n: int, seed: int) -> list[tuple[int, int]]:
    rng = np.random.default_rng(seed)
    return [tuple(int(v) for v in np.exp(rng.uniform(0, 7.6, 2))) for _ in range(n)]


TOKEN_SIZES = _random_sizes(60, seed=99) + [(1, 1), (40, 40), (40, 41), (41, 40), (3000, 2000), (1, 3000)]


@pytest.mark.parametrize("settings", [None, "sglang_serving_2x_cap_2048"])
def test_token_layout_matches_processor(tmp_path, settings):
    """66 sizes, two images per prompt with text and ``<|content_image|>`` markers around
    them: the processor's ids equal ours; each image's range is its run of image tokens
    only (the marker before it stays an ordinary token); counts equal HF's num_patches."""
    if settings is None:
        pp, ref = PAIRS()
    else:
        pp, ref = _dir_pair(tmp_path, settings)
    checked = 0
    for a, b in zip(TOKEN_SIZES[0::2], TOKEN_SIZES[1::2]):
        raws = [harness.flat_png(*s) for s in (a, b)]
        text, ids = hf_inkling.prompt(2)
        hf = ref(images=[reference_input(r) for r in raws], text=[text], return_tensors="pt")
        counts = run_torch_reference(ref.image_processor, raws)["num_patches"].tolist()
        assert harness.plan_counts(pp, (a, b)) == counts
        ours = pp.preprocess(raws, input_ids=ids)
        harness.assert_image_runs(ours, hf["input_ids"][0].numpy(), IMAGE)
        assert ours.token_counts == counts
        for offset, _ in ours.structural_ranges:
            assert ours.input_ids[offset - 1] == BOS
        checked += 2
    assert checked == len(TOKEN_SIZES) >= 50


# -- presets against transformers' classes -------------------------------------------------


def test_preset_equals_class_defaults():
    """The presets' values are the defaults of transformers' Inkling classes."""
    from transformers import InklingConfig, InklingImageProcessor

    ip, cfg = InklingImageProcessor(), InklingConfig()
    for preset in PAIRS.presets:
        pp, ref = PAIRS(preset)
        c = pp.family.config
        assert c.patch_size == ip.size["height"] == ip.size["width"] == cfg.vision_config.patch_size
        assert inkling.TEMPORAL_REPEAT == cfg.vision_config.temporal_patch_size
        assert c.resample == int(ip.resample) == 1 and c.rescale_factor == ip.rescale_factor
        assert (c.rescale_image_frac, c.rescale_image_max_upscaled_long_edge) == (
            ip.rescale_image_frac, ip.rescale_image_max_upscaled_long_edge) == (None, 2048)
        assert c.image_mean == tuple(ip.image_mean) and c.image_std == tuple(ip.image_std)
        assert (c.image_token_id, c.image_bos_token_id) == (cfg.image_token_id, cfg.image_bos_token_id)
        assert (ref.image_token_id, ref.image_bos_token_id) == (c.image_token_id, c.image_bos_token_id)
        assert resolve(preset).config["model_type"] == cfg.model_type
        assert pp.info["family"] == "inkling" and not pp.info["mrope"] and pp.family.positions(None, []) is None


def test_an_hf_directory_loads_as_inkling(tmp_path):
    """``model_type: inkling_mm_model`` with ``InklingImageProcessor`` is Inkling, with
    config.json's token ids; another image processor under that model_type is refused."""
    config = {"model_type": "inkling_mm_model", "image_token_id": 200054, "image_bos_token_id": 200005}
    pp = harness.load_dir(tmp_path, {"image_processor_type": "InklingImageProcessor"}, config)
    assert pp.family.name == "inkling" and pp.family.image_token_id == 200054
    other = tmp_path / "other"
    other.mkdir()
    pp = harness.load_dir(other, {"image_processor_type": "InklingImageProcessor"}, {**config, "image_token_id": 7})
    assert pp.family.placeholder_token_id == 7
    bad = tmp_path / "bad"
    bad.mkdir()
    e = harness.dir_error(bad, {"image_processor_type": "CLIPImageProcessor"}, config)
    assert "no supported family" in e.message
