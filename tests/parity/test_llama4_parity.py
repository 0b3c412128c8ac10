"""Llama 4 Scout against the installed ``Llama4ImageProcessor`` / ``Llama4Processor``.

The reference is torchvision-only, so this suite needs torch (CI without torch checks
the committed fixtures instead: tests/parity/test_llama4_fixtures.py). HF's pixel_values
are bfloat16; ours are float32 holding the same values, compared with ``np.array_equal``
against HF's ``.float()``. ``aspect_ratios`` and the expanded token ids are compared
exactly; ``patches_per_image`` is the tile count HF's tensor implies per image.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import harness  # noqa: E402
import imagegen  # noqa: E402
from harness import each_large_size, each_mode, each_size  # noqa: E402
from references import llama4 as hf_llama4  # noqa: E402
from references.common import reference_input, run_torch_reference  # noqa: E402
from sglang_mm_grpc import Code  # noqa: E402
from sglang_mm_grpc.config import resolve  # noqa: E402
from sglang_mm_grpc.families import llama4  # noqa: E402
from sglang_mm_grpc.families.llama4 import LLAMA4_IDS  # noqa: E402

SCOUT = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
PATCH, IMAGE = LLAMA4_IDS["<|patch|>"], LLAMA4_IDS["<|image|>"]

# (height, width): tiny, thin, odd, around and on tile multiples, sizes whose resize
# size needs HF's float32 arithmetic, photo sizes.
SIZES = [
    (1, 1), (2, 2), (13, 7), (7, 13), (55, 57), (100, 100), (255, 257), (300, 500), (500, 300),
    (335, 336), (336, 336), (337, 336), (336, 337), (335, 671), (336, 672), (672, 336), (673, 672),
    (672, 672), (999, 777), (1008, 1008), (1344, 1344), (336, 5376), (5376, 336), (1, 2000), (2000, 1),
    (3000, 20), (20, 3000), (1, 9000), (1342, 2464), (2464, 1386), (720, 1280), (1080, 1920),
]


PAIRS = harness.Pairs(SCOUT, hf_llama4.processor)


def assert_same(ours, ref: dict, raws_count: int | None = None):
    harness.assert_pixels(ours, ref["pixel_values"])
    harness.assert_tensors(ours, ref, "aspect_ratios")
    ratios = ours.tensors["aspect_ratios"]
    tiles = ours.tensors["patches_per_image"]
    assert tiles.dtype == np.int64
    assert tiles.tolist() == [r * c + (r * c > 1) for r, c in ratios.tolist()]
    assert int(tiles.sum()) == ours.pixel_values.shape[0]


def _run(pp, ref, raws):
    return pp.preprocess(raws), run_torch_reference(ref.image_processor, raws)


@each_size(SIZES)
def test_sizes_png(size):
    pp, ref = PAIRS()
    kind = "noise" if size[0] * size[1] <= 1_500_000 else "smooth"
    assert_same(*_run(pp, ref, [harness.sized_png(size, kind)]))


def _size_for_canvas(canvas: tuple[int, int]) -> tuple[int, int]:
    """An image size whose best fit is ``canvas`` and that needs a resize (when one exists)."""
    ch, cw = canvas
    canvases = llama4.supported_canvases(16, 336)
    for f in (1.3, 1.15, 0.9, 0.8, 1.05, 0.97):
        h, w = round(ch * f) + 3, round(cw * f) - 5
        if llama4.best_canvas(h, w, canvases) == canvas and llama4.resized_size(h, w, canvas, 336) != (h, w):
            return h, w
    return ch, cw


CANVASES = llama4.supported_canvases(16, 336)


@pytest.mark.parametrize("canvas", CANVASES, ids=lambda c: f"{c[0] // 336}x{c[1] // 336}")
def test_every_canvas(canvas):
    """One image per canvas (rows x cols <= 16), resized into it where possible."""
    pp, ref = PAIRS()
    size = _size_for_canvas(canvas)
    raw = imagegen.jpeg(*size, seed=size[0] + size[1], quality=92)
    ours, hf = _run(pp, ref, [raw])
    assert_same(ours, hf)
    assert tuple(hf["aspect_ratios"][0]) == (canvas[0] // 336, canvas[1] // 336)


@each_mode
def test_modes_and_formats(name):
    pp, ref = PAIRS()
    raw = imagegen.modes_corpus()[name]
    assert_same(*_run(pp, ref, [raw]))


@functools.lru_cache(maxsize=None)
def _large_jpeg(h: int, w: int) -> bytes:
    """A photo-sized JPEG made quickly (in Pillow's C code): an upscaled smooth image plus
    tiled noise detail."""
    from PIL import Image, ImageChops

    smooth = Image.fromarray(imagegen.pixels(h // 16, w // 16, seed=3, kind="smooth")).resize((w, h), Image.BILINEAR)
    detail = Image.fromarray(np.tile(imagegen.pixels(61, 53, seed=4), (h // 61 + 1, w // 53 + 1, 1))[:h, :w])
    return imagegen.encode(ImageChops.add(smooth, detail, scale=1.25, offset=-96), "JPEG", quality=85)


@each_large_size([(6000, 8000), (8000, 6000)])
def test_large_photos(size):
    pp, ref = PAIRS()
    assert_same(*_run(pp, ref, [_large_jpeg(*size)]))


def test_batch():
    """One-tile and multi-tile images, two of the same shape (HF groups those), in one
    request: tiles concatenated in image order; the vLLM split by patches_per_image
    gives each image's own tiles."""
    pp, ref = PAIRS()
    sizes = [(300, 500), (40, 40), (1200, 700), (300, 500), (2, 3000), (700, 1200)]
    raws = [imagegen.png(h, w, seed=i) for i, (h, w) in enumerate(sizes)]
    raws.append(imagegen.modes_corpus()["png_rgba"])
    ours, hf = _run(pp, ref, raws)
    assert_same(ours, hf)
    parts = np.split(ours.pixel_values, np.cumsum(ours.tensors["patches_per_image"])[:-1])
    for raw, part in zip(raws, parts):
        assert np.array_equal(part, run_torch_reference(ref.image_processor, [raw])["pixel_values"])
    assert pp.field_layout.flat == {"pixel_values": "patches_per_image"}
    assert set(pp.field_layout.batched) == {"aspect_ratios", "patches_per_image"}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    h=st.integers(1, 1600),
    w=st.integers(1, 1600),
    seed=st.integers(0, 2**16),
    kind=st.sampled_from(["noise", "smooth"]),
)
def test_random_sizes(h, w, seed, kind):
    pp, ref = PAIRS()
    raw = imagegen.png(h, w, seed=seed, kind=kind)
    assert_same(*_run(pp, ref, [raw]))


# -- geometry and the bfloat16 table against transformers' own helpers ------------------


def _hf_geometry(h: int, w: int, max_patches: int, tile: int, to_max: bool):
    """The canvas and resize size exactly as ``Llama4ImageProcessor._preprocess`` computes
    them (its helpers, its tensor types)."""
    from transformers.image_utils import SizeDict
    from transformers.models.llama4 import image_processing_llama4 as hf

    size = SizeDict(height=tile, width=tile)
    res = torch.tensor(hf.find_supported_resolutions(max_num_chunks=max_patches, patch_size=size))
    image_size = torch.Size([h, w])
    target = hf.get_best_fit(image_size, res, resize_to_max_canvas=to_max)
    if not to_max:
        limited = (min(max(h, tile), target[0]), min(max(w, tile), target[1]))
    else:
        limited = target
    nh, nw = hf.get_max_res_without_distortion(image_size, limited)
    return (int(target[0]), int(target[1])), (max(int(nh), 1), max(int(nw), 1))


def _geometry_sizes() -> list[tuple[int, int]]:
    rng = np.random.default_rng(7)
    out = [(h, w) for h in range(1, 60, 3) for w in range(1, 60, 4)]
    out += [tuple(int(v) for v in rng.integers(1, 9000, 2)) for _ in range(1500)]
    out += [tuple(int(v) for v in np.exp(rng.uniform(0, 10, 2))) for _ in range(1500)]
    out += [(336 * a + d, 336 * b + e) for a in (1, 2, 3, 5, 16) for b in (1, 4, 7, 16) for d in (-1, 0, 1)
            for e in (-1, 0, 1)]
    # sizes where a float64 version of HF's arithmetic gives a different resize size
    out += [(1342, 2464), (6600, 2750), (2464, 1386), (2415, 6900), (1743, 5229)]
    return out


@pytest.mark.parametrize(
    "max_patches, tile, to_max", [(16, 336, False), (16, 336, True), (6, 224, False), (1, 336, False)])
def test_geometry_matches_hf_helpers(max_patches, tile, to_max):
    """Canvas choice and resize size on ~3000 sizes, with HF's float32 scales and its
    tensor/int mix reproduced (these decide the output shape, so they must be exact)."""
    canvases = llama4.supported_canvases(max_patches, tile)
    from transformers.image_utils import SizeDict
    from transformers.models.llama4.image_processing_llama4 import find_supported_resolutions

    assert list(canvases) == find_supported_resolutions(max_patches, SizeDict(height=tile, width=tile))
    for h, w in _geometry_sizes():
        canvas = llama4.best_canvas(h, w, canvases, to_max)
        ours = canvas, llama4.resized_size(h, w, canvas, tile, to_max)
        assert ours == _hf_geometry(h, w, max_patches, tile, to_max), (h, w)


@pytest.mark.parametrize(
    "mean, std, factor, rescale, normalize",
    [
        ((0.5,) * 3, (0.5,) * 3, 1 / 255, True, True),
        ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711), 1 / 255, True, True),
        ((0.1, 0.7, 0.33), (0.9, 0.05, 0.6), 0.0137, True, True),
        ((0.5,) * 3, (0.5,) * 3, 1 / 127.5, True, False),
        ((0.5,) * 3, (0.5,) * 3, 1 / 255, False, False),
    ],
)
def test_normalize_table_is_hf_exhaustively(mean, std, factor, rescale, normalize):
    """All 256 values per channel through HF's own ``rescale_and_normalize``."""
    from sglang_mm_grpc.kernels.bf16 import bf16_backend_lut
    from transformers import Llama4ImageProcessor

    x = torch.arange(256, dtype=torch.uint8).reshape(1, 1, 256).expand(3, 1, 256).contiguous()
    hf = Llama4ImageProcessor().rescale_and_normalize(x, rescale, factor, normalize, list(mean), list(std))
    assert hf.dtype == (torch.bfloat16 if normalize else torch.float32 if rescale else torch.uint8)
    assert np.array_equal(bf16_backend_lut(mean, std, factor, rescale, normalize), hf.float().numpy()[:, 0])


# -- token expansion against the processor ----------------------------------------------


def _random_sizes(n: int, seed: int) -> list[tuple[int, int]]:
    rng = np.random.default_rng(seed)
    return [tuple(int(v) for v in np.exp(rng.uniform(0, 8.5, 2))) for _ in range(n)]


TOKEN_SIZES = _random_sizes(60, seed=99) + [(1, 1), (336, 336), (300, 500), (2000, 3000), (5376, 336), (336, 5376)]


def _expected(rows: int, cols: int, per_tile: int = 144) -> list[int]:
    """The sequence written out independently of the family's code."""
    seq = [LLAMA4_IDS["<|image_start|>"]]
    if rows * cols > 1:
        for _ in range(rows):
            for x in range(cols):
                seq += [PATCH] * per_tile
                seq += [LLAMA4_IDS["<|tile_x_separator|>"]] if x < cols - 1 else []
            seq.append(LLAMA4_IDS["<|tile_y_separator|>"])
    return seq + [IMAGE] + [PATCH] * per_tile + [LLAMA4_IDS["<|image_end|>"]]


PROMPT = "hello <|image|> describe these <|image|> world"


def _expand(pp, out, prompt_ids):
    """The driver's layout step over ``<|image|>`` placeholders, given a request's
    expansions (made with the default one-placeholder-per-image ids)."""
    from sglang_mm_grpc.core.layout import Expansion, apply_layout, placeholder_layout

    expansions = [Expansion(out.input_ids[o:o + n], PATCH) for o, n in out.structural_ranges]
    return apply_layout(placeholder_layout(prompt_ids, pp.family.placeholder_token_id, expansions))


def test_token_sequences_match_processor():
    """For 66 sizes (two images per prompt, text around them): the processor's ids equal
    our expansions placed at the ``<|image|>`` placeholders; each expansion is the
    written-out layout; patch-only ranges are the ``<|patch|>`` runs."""
    pp, ref = PAIRS()
    prompt_ids = np.asarray(ref.tokenizer(PROMPT)["input_ids"], dtype=np.int64)
    assert np.count_nonzero(prompt_ids == IMAGE) == 2
    checked = 0
    for a, b in zip(TOKEN_SIZES[0::2], TOKEN_SIZES[1::2]):
        raws = [harness.flat_png(*s) for s in (a, b)]
        hf = ref(images=[reference_input(r) for r in raws], text=[PROMPT], return_tensors="pt")
        ours = pp.preprocess(raws)  # ids = the two expansions back to back
        applied = _expand(pp, ours, prompt_ids)
        assert np.array_equal(applied.input_ids, hf["input_ids"][0].numpy())
        for im, (off, n), patch_runs, (rows, cols) in zip(
                ours.images, applied.structural_ranges, applied.patch_ranges, ours.tensors["aspect_ratios"].tolist()):
            exp = _expected(rows, cols)
            assert n == len(exp) == im.token_count
            assert applied.input_ids[off:off + n].tolist() == exp
            tiles = rows * cols
            assert len(patch_runs) == (tiles + 1 if tiles > 1 else 1)
            assert all(length == 144 for _, length in patch_runs)
            checked += 1
    assert checked == len(TOKEN_SIZES)


def test_prompt_placeholders_through_driver():
    """A chat-template prompt holds one ``<|image|>`` per image; the driver expands them."""
    pp, ref = PAIRS()
    prompt_ids = np.asarray(ref.tokenizer(PROMPT)["input_ids"], dtype=np.int64)
    raws = [harness.flat_png(300, 500), harness.flat_png(40, 40)]
    hf = ref(images=[reference_input(r) for r in raws], text=[PROMPT], return_tensors="pt")
    ours = pp.preprocess(raws, input_ids=prompt_ids)
    assert np.array_equal(ours.input_ids, hf["input_ids"][0].numpy())
    assert ours.image_token_id == PATCH


# -- presets against transformers' classes -------------------------------------------------


def test_preset_equals_class_defaults():
    """Scout's values are the defaults of the classes HF wrote for it, except the vision
    tower's image_size (class default 448; the checkpoint's 336 is the tile size)."""
    from transformers import Llama4Config, Llama4ImageProcessor

    ip, cfg = Llama4ImageProcessor(), Llama4Config()
    pp, ref = PAIRS()
    c = pp.family.config
    assert c.tile == ip.size["height"] == ip.size["width"] == ref.image_processor.size.height
    assert c.max_patches == ip.max_patches and c.resize_to_max_canvas == ip.resize_to_max_canvas is False
    assert c.resample == int(ip.resample) == 2 and c.rescale_factor == ip.rescale_factor
    assert c.image_mean == tuple(ip.image_mean) and c.image_std == tuple(ip.image_std)
    assert (c.image_start_token_id, c.image_end_token_id, c.patch_token_id) == (
        cfg.boi_token_index, cfg.eoi_token_index, cfg.image_token_index)
    assert c.patch_size == ref.patch_size == cfg.vision_config.patch_size
    assert ref.downsample_ratio == round(1 / c.pixel_shuffle_ratio**2) == 4
    assert c.pixel_shuffle_ratio == cfg.vision_config.pixel_shuffle_ratio
    assert c.tokens_per_tile == 144
    assert resolve(SCOUT).config["model_type"] == cfg.model_type
    assert resolve(SCOUT).config["vision_config"]["model_type"] == cfg.vision_config.model_type
    assert ref.image_token_id == IMAGE == pp.family.placeholder_token_id
    assert pp.info["image_token_id"] == PATCH


# -- model directories ------------------------------------------------------------------


SCOUT_CFG = resolve(SCOUT).config

# name: (preprocessor_config, config, processor_config)
DIRS = {
    "scout_real_files": (resolve(SCOUT).preprocessor_config, SCOUT_CFG, resolve(SCOUT).processor_config),
    "no_processor_file": ({"image_processor_type": "Llama4ImageProcessorFast"}, SCOUT_CFG, None),
    "bicubic_max_canvas_4": ({"resample": 3, "max_patches": 4, "resize_to_max_canvas": True}, SCOUT_CFG, {}),
    "tile_224_stats": ({"size": {"height": 224, "width": 224}, "image_mean": [0.48145466, 0.4578275, 0.40821073],
                        "image_std": [0.26862954, 0.26130258, 0.27577711], "max_patches": 6},
                       SCOUT_CFG, {"patch_size": 14}),
    "rescale_only_lanczos": ({"do_normalize": False, "rescale_factor": 0.0137, "resample": 1}, SCOUT_CFG, {}),
    "nearest": ({"resample": 0, "max_patches": 8}, SCOUT_CFG, {}),
    "no_rescale_no_normalize": ({"do_normalize": False, "do_rescale": False}, SCOUT_CFG, {}),
    "no_model_type_processor_only": ({"image_processor_type": "Llama4ImageProcessor", "max_patches": 9},
                                     {"image_token_index": 200092}, {}),
}


@pytest.mark.parametrize("name", sorted(DIRS))
def test_model_directory(tmp_path, name):
    pre, cfg, proc = DIRS[name]
    pp = harness.load_dir(tmp_path, pre, cfg, proc)
    assert pp.family.name == "llama4"
    ref = hf_llama4.reference(pre, proc or {})
    for size in harness.DIR_SIZES:
        assert_same(*_run(pp, ref, harness.png_and_jpeg(size)))
    tile = pp.family.config.tile
    hf = ref(images=[reference_input(harness.flat_png(700, 300))], text=["hello <|image|>"], return_tensors="pt")
    rows, cols = pp.preprocess([harness.flat_png(700, 300)]).tensors["aspect_ratios"][0].tolist()
    per_tile = (tile // 14) ** 2 // 4
    assert hf["input_ids"][0].tolist()[1:] == _expected(rows, cols, per_tile)


@pytest.mark.parametrize(
    "pre, cfg, proc, message",
    [
        ({"do_resize": False}, SCOUT_CFG, {}, "do_resize"),
        ({"resample": 4}, SCOUT_CFG, {}, "resample 4"),
        ({"resample": 5}, SCOUT_CFG, {}, "resample 5"),
        ({"size": {"height": 336, "width": 448}}, SCOUT_CFG, {}, "square"),
        ({"size": {"shortest_edge": 336}}, SCOUT_CFG, {}, "square"),
        ({"do_rescale": False}, SCOUT_CFG, {}, "do_normalize without do_rescale"),
        ({}, {**SCOUT_CFG, "image_token_index": 200091}, {}, "200091"),
        ({}, {**SCOUT_CFG, "boi_token_index": 1}, {}, "image_start_token 1"),
        ({}, SCOUT_CFG, {"image_token": "<image>"}, "'<image>'"),
    ],
)
def test_refused_configs(tmp_path, pre, cfg, proc, message):
    """What HF rejects or this service cannot reproduce exactly is refused at load."""
    e = harness.dir_error(tmp_path, pre, cfg, proc)
    assert e.code is Code.INVALID_ARGUMENT and message in str(e)


def test_hf_rejects_what_we_refuse():
    """HF itself fails on do_resize=false and on normalize without rescale."""
    from transformers import Llama4ImageProcessor

    img = reference_input(imagegen.png(30, 40))
    for kwargs in ({"do_resize": False}, {"do_rescale": False}):
        with pytest.raises((ValueError, TypeError)):
            Llama4ImageProcessor(**kwargs)([img], return_tensors="pt")


def test_family_selection():
    assert llama4.matches({}, {"model_type": "llama4"})
    assert llama4.matches({"image_processor_type": "Llama4ImageProcessorFast"}, {})
    assert not llama4.matches({"image_processor_type": "Llama4ImageProcessorFast"}, {"model_type": "llava"})
    assert not llama4.matches({}, {"model_type": "llama4_text"})
