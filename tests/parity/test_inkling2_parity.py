"""Inkling 2 against the installed ``Inkling2ImageProcessor`` / ``Inkling2Processor``.

Torchvision-only reference, so this suite needs torch (CI checks the committed fixtures:
tests/parity/test_inkling_fixtures.py). pixel_values (float32, [patches, 40, 40, 3]) are
compared with ``np.array_equal``, ``image_grid_thw`` and the expanded ids exactly.

Transparency is this family's own: the processor converts a PIL image with transparency
data (an alpha band, a palette with alpha, a ``transparency`` key) to RGBA and
composites it onto an 8-pixel checkerboard, where every other family composites onto
white. The reference input is, as for every family, the EXIF-transposed image
(``reference_input``; the processor itself reads no EXIF, ``load_image`` transposes).
"""

from __future__ import annotations

import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from PIL import Image  # noqa: E402

import harness  # noqa: E402
import imagegen  # noqa: E402
from references import inkling as hf_inkling  # noqa: E402
from references import inkling2 as hf_inkling2  # noqa: E402
from references.common import reference_input, run_torch_reference  # noqa: E402
from sglang_mm_grpc import Preprocessor  # noqa: E402
from sglang_mm_grpc.config import resolve  # noqa: E402
from sglang_mm_grpc.families.inkling import inkling2  # noqa: E402
from sglang_mm_grpc.media.decode import decode_image  # noqa: E402

SMALL, MINI = "thinkingmachines/Inkling-2-Small-MXFP8", "thinkingmachines/Inkling-2-Mini"
BIG = {"max_image_tokens": 1 << 20}
IMAGE = hf_inkling.TOKENS["<|unused_200054|>"]

PAIRS = harness.Pairs([SMALL, MINI], hf_inkling2.processor, **BIG)
pair = PAIRS.fixture()

SIZES = [
    (1, 1), (2, 2), (13, 7), (7, 13), (39, 39), (40, 40), (41, 41), (40, 80), (80, 40), (79, 121), (120, 120),
    (300, 500), (500, 300), (1, 2000), (2000, 1), (3000, 20), (20, 3000), (1080, 1920),
]
LARGE = [(3024, 4032), (6000, 8000), (8000, 6000)]


def assert_same(ours, ref: dict):
    harness.assert_pixels(ours, ref["pixel_values"])
    harness.assert_tensors(ours, ref, "image_grid_thw")
    grids = ours.tensors["image_grid_thw"]
    assert ours.tensors["patches_per_image"].tolist() == grids.prod(axis=1).tolist() == ours.token_counts
    assert int(ours.tensors["patches_per_image"].sum()) == ours.pixel_values.shape[0]


def check(pp, ref, raws):
    assert_same(pp.preprocess(raws), run_torch_reference(ref.image_processor, raws))


test_sizes_png, test_modes_and_formats, test_large_photos = harness.image_tests(check, SIZES, LARGE)


# -- transparency -------------------------------------------------------------------------


def _rgba(h: int, w: int, seed: int) -> Image.Image:
    """Noise colours; alpha 0 and 255 in bands, noise elsewhere."""
    a = imagegen.pixels(h, w, seed=seed, channels=4)
    a[: h // 4, :, 3] = 0
    a[h // 4: h // 2, :, 3] = 255
    return Image.fromarray(a, "RGBA")


def _with_exif(im: Image.Image, orientation: int, fmt: str = "PNG") -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return imagegen.encode(im, fmt, exif=exif.tobytes())


def _alpha_cases() -> dict[str, bytes]:
    rgba = _rgba(83, 121, 1)
    opaque = Image.fromarray(np.dstack([imagegen.pixels(50, 70, 2), np.full((50, 70), 255, np.uint8)]), "RGBA")
    palette = Image.fromarray(imagegen.pixels(60, 90, 3, "smooth")).convert("P", palette=Image.Palette.ADAPTIVE)
    rgb_key = Image.fromarray(np.tile(np.array([[[10, 20, 30]], [[200, 100, 50]]], np.uint8), (20, 33, 1)))
    gray = Image.fromarray(imagegen.pixels(45, 91, 4)[..., 0])
    return {
        "rgba_png": imagegen.encode(rgba, "PNG"),
        "rgba_fully_opaque": imagegen.encode(opaque, "PNG"),  # still RGBA: composited, same colours
        "la_png": imagegen.encode(rgba.convert("LA"), "PNG"),
        "palette_with_transparent_index": imagegen.encode(palette, "PNG", transparency=5),
        "palette_rgba": imagegen.encode(rgba.convert("P"), "PNG"),
        "rgb_with_transparent_colour": imagegen.encode(rgb_key, "PNG", transparency=(10, 20, 30)),
        "gray_with_transparent_level": imagegen.encode(gray, "PNG", transparency=77),
        "gif_transparent": imagegen.modes_corpus()["gif_transparent"],
        "webp_lossless_rgba": imagegen.encode(rgba, "WEBP", lossless=True),
        "webp_lossy_rgba": imagegen.encode(rgba, "WEBP", quality=70),
        "rgba_exif_5": _with_exif(rgba, 5),
        "rgba_exif_6": _with_exif(rgba, 6),
        "rgba_exif_8": _with_exif(rgba, 8),
        "la_exif_3": _with_exif(rgba.convert("LA"), 3),
        "rgba_large": imagegen.encode(_rgba(1000, 1500, 5), "PNG", compress_level=1),
        "rgba_1x1": imagegen.encode(_rgba(1, 1, 6), "PNG"),
        "jpeg_exif_6_no_alpha": imagegen.with_exif_orientation(83, 121, 6, seed=7),
    }


ALPHA = _alpha_cases()


@pytest.mark.parametrize("name", sorted(ALPHA))
def test_transparency(pair, name):
    check(*pair, [ALPHA[name]])


def test_transparency_is_kept_only_for_this_family(pair):
    """The decoder hands this family RGBA (the checkerboard is its business) and every
    other family the white composite, as before."""
    pp, _ = pair
    raw = ALPHA["rgba_png"]
    keep = decode_image(raw, item=0, transparency=pp.family.transparency)
    white = decode_image(raw, item=0)
    im = reference_input(raw)
    assert pp.family.transparency == "keep" and keep.alpha and not white.alpha
    assert np.array_equal(keep.pixels, np.asarray(im.convert("RGBA")))
    assert np.array_equal(white.rgb, np.asarray(Image.alpha_composite(Image.new("RGBA", im.size, "white"), im)
                                                .convert("RGB")))
    assert not decode_image(imagegen.png(5, 5), item=0, transparency="keep").alpha
    assert Preprocessor.from_model("thinkingmachines/Inkling").family.transparency == "white"


def test_batch(pair):
    pp, ref = pair
    raws = [imagegen.png(300, 500, seed=1), ALPHA["rgba_png"], imagegen.jpeg(40, 40, seed=2), ALPHA["la_png"],
            imagegen.png(300, 500, seed=3), imagegen.png(1, 2000, seed=4)]
    out = pp.preprocess(raws)
    assert_same(out, run_torch_reference(ref.image_processor, raws))
    parts = np.split(out.pixel_values, np.cumsum(out.tensors["patches_per_image"])[:-1])
    for raw, part in zip(raws, parts):
        assert np.array_equal(part, run_torch_reference(ref.image_processor, [raw])["pixel_values"])
    assert pp.field_layout.flat == {"pixel_values": "patches_per_image"}


@harness.examples(30)
@given(h=st.integers(1, 900), w=st.integers(1, 900), seed=st.integers(0, 2**16), alpha=st.booleans())
def test_random_sizes(pair, h, w, seed, alpha):
    im = _rgba(h, w, seed) if alpha else Image.fromarray(imagegen.pixels(h, w, seed))
    check(*pair, [imagegen.encode(im, "PNG", compress_level=1)])


# -- model directories --------------------------------------------------------------------

BASE = resolve(SMALL).preprocessor_config
DIRS = {
    "patch_20x30": {"size": {"height": 20, "width": 30}},
    "clip_stats": {"image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711]},
    "rescale_only": {"do_normalize": False},
    "raw_values": {"do_rescale": False, "do_normalize": False},
    "resize_keys_are_ignored": {"do_resize": True, "resample": 1},
}


@pytest.mark.parametrize("name", sorted(DIRS))
def test_model_directories(tmp_path, name):
    pre = {**BASE, **DIRS[name]}
    pp = Preprocessor.from_model(harness.write_model_dir(tmp_path, pre, resolve(SMALL).config), **BIG)
    ref = hf_inkling2.reference(pre)
    for size in harness.DIR_SIZES:
        check(pp, ref, harness.png_and_jpeg(size))
    check(pp, ref, [ALPHA["rgba_png"], ALPHA["palette_with_transparent_index"]])


# -- token layout against the processor ---------------------------------------------------


def test_token_layout_matches_processor(pair):
    """66 sizes, two images per prompt: the processor's ids (grid rows x cols copies of
    the placeholder) equal ours, and each image's range is exactly its run of them."""
    pp, ref = pair
    rng = np.random.default_rng(98)
    sizes = [tuple(int(v) for v in np.exp(rng.uniform(0, 7.6, 2))) for _ in range(60)]
    sizes += [(1, 1), (40, 40), (40, 41), (41, 40), (3000, 2000), (1, 3000)]
    for a, b in zip(sizes[0::2], sizes[1::2]):
        raws = [harness.flat_png(*s) for s in (a, b)]
        text, ids = hf_inkling2.prompt(2)
        hf = ref(images=[reference_input(r) for r in raws], text=[text], return_tensors="pt")
        grids = hf["image_grid_thw"].numpy()
        assert harness.plan_counts(pp, (a, b)) == grids.prod(axis=1).tolist()
        ours = pp.preprocess(raws, input_ids=ids)
        harness.assert_image_runs(ours, hf["input_ids"][0].numpy(), IMAGE)
        assert np.array_equal(ours.tensors["image_grid_thw"], grids)
    assert len(sizes) >= 50


# -- presets against transformers' classes -------------------------------------------------


def test_preset_equals_class_defaults():
    from transformers import Inkling2Config, Inkling2ImageProcessor, Inkling2LoopConfig

    ip = Inkling2ImageProcessor()
    for preset, cfg in ((SMALL, Inkling2Config()), (MINI, Inkling2LoopConfig())):
        pp, ref = PAIRS(preset)
        c = pp.family.config
        assert (c.patch_height, c.patch_width) == (ip.size["height"], ip.size["width"])
        vision = cfg.vision_config
        assert c.patch_height == vision.patch_size * vision.spatial_merge_size  # one token per patch
        assert c.image_mean == tuple(ip.image_mean) and c.image_std == tuple(ip.image_std)
        assert c.rescale_factor == ip.rescale_factor
        assert c.image_token_id == cfg.image_token_id == ref.image_token_id
        assert resolve(preset).config["model_type"] == cfg.model_type
        assert pp.info["family"] == "inkling2" and not pp.info["mrope"]
    assert inkling2.CHECKERBOARD == (8, 204, 153)


def test_an_hf_directory_loads_as_inkling2(tmp_path):
    for i, model_type in enumerate(("inkling2", "inkling2_loop")):
        d = tmp_path / str(i)
        d.mkdir()
        pp = harness.load_dir(d, {"image_processor_type": "Inkling2ImageProcessor"}, {"model_type": model_type})
        assert pp.family.name == "inkling2"


def test_rgba_decoded_in_place(pair):
    """An RGBA image is read from Pillow's own buffer, not copied."""
    raw = io.BytesIO(ALPHA["rgba_png"]).getvalue()
    img = decode_image(raw, item=0, transparency="keep")
    assert img.alpha and img.pixels.shape[2] == 4 and img.pixels.base is not None
