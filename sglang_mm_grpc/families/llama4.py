"""Llama 4 (Scout, Maverick) images: HF ``Llama4Processor`` over ``Llama4ImageProcessor``.

Per image: pick a canvas of rows x cols tiles (rows * cols <= max_patches) with
``get_best_fit``, resize into it without distortion (floor; an image smaller than a
tile grows only until its limiting side reaches one tile), torchvision's antialiased
uint8 resize, pad right and bottom with 0, rescale+normalize in bfloat16, cut into
tiles in raster order. With more than one tile, the whole image resized to one tile
(aspect not kept) follows as the global tile. Outputs: pixel_values
[sum tiles, 3, tile, tile]; ``aspect_ratios`` int64 [N, 2] = (rows, cols);
``patches_per_image`` int64 [N] = tiles per image, the global one included.

HF returns bfloat16 pixel values. Ours are float32 holding exactly those bfloat16
values (the normalize table reproduces HF's bfloat16 casts), so the backends' cast of
floating tensors to the model dtype (bfloat16) is lossless and yields HF's tensor. (With
normalize off HF returns float32, or uint8 with rescale off too; ours hold those values.)

Tokens (``Llama4Processor._prompt_split_image``): ``<|image_start|>``; for a multi-tile
image each tile row as tiles of T ``<|patch|>`` separated by ``<|tile_x_separator|>``
and ended by ``<|tile_y_separator|>``; then ``<|image|>``, T ``<|patch|>`` (the global
or only tile) and ``<|image_end|>``. T = (tile // patch)^2 // round(1 / ratio^2), 144 for
336 / 14 / 0.5. The chat template leaves one ``<|image|>`` per image (the placeholder);
features go to ``<|patch|>`` (config ``image_token_index``); the rest is structural.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from ..core.carriers import DecodedImage
from ..kernels import bf16, chw, resample_tv, window
from ..core.layout import Expansion
from . import hf_keys
from .base import Aux, Family, FieldLayout, ItemPlan, Normalization

MODEL_TYPES = ("llama4",)

# Llama 4's tokenizer (shared by Scout and Maverick). Llama4Config holds the first three
# (boi/eoi/image_token_index); the others are tokenizer facts.
LLAMA4_IDS = {
    "<|image_start|>": 200080,
    "<|image_end|>": 200081,
    "<|patch|>": 200092,
    "<|tile_x_separator|>": 200084,
    "<|tile_y_separator|>": 200085,
    "<|image|>": 200090,
}


@dataclass(frozen=True)
class Llama4Config(Normalization):
    """The resolved knobs (preprocessor_config.json + processor_config.json + config.json)."""

    tile: int = 336
    max_patches: int = 16
    resize_to_max_canvas: bool = False
    resample: int = 2  # BILINEAR
    image_mean: tuple[float, ...] = (0.5, 0.5, 0.5)
    image_std: tuple[float, ...] = (0.5, 0.5, 0.5)
    patch_size: int = 14  # the processor's
    pixel_shuffle_ratio: float = 0.5
    image_start_token_id: int = LLAMA4_IDS["<|image_start|>"]
    image_end_token_id: int = LLAMA4_IDS["<|image_end|>"]
    patch_token_id: int = LLAMA4_IDS["<|patch|>"]
    tile_x_separator_token_id: int = LLAMA4_IDS["<|tile_x_separator|>"]
    tile_y_separator_token_id: int = LLAMA4_IDS["<|tile_y_separator|>"]
    image_token_id: int = LLAMA4_IDS["<|image|>"]

    @property
    def tokens_per_tile(self) -> int:
        """``Llama4Processor``: (tile // patch)^2 // downsample_ratio."""
        downsample = int(round(1.0 / (self.pixel_shuffle_ratio**2)))
        return (self.tile // self.patch_size) * (self.tile // self.patch_size) // downsample


def _processor_value(processor: dict, vision: dict, key: str, default):
    """processor_config.json wins (``Llama4Processor`` is built with it); without it the
    vision tower's own value, so the count matches the features the model makes."""
    return hf_keys.get(processor, key, default=hf_keys.get(vision, key, default=default))


def config_from_hf(preprocessor: dict, config: dict, processor: dict | None = None) -> Llama4Config:
    """Resolve the knobs from the checkpoint's JSON files (HF class defaults fill gaps)."""
    processor = processor or {}
    d = Llama4Config()
    g = hf_keys.get
    hf_keys.refuse_false(preprocessor, "Llama 4", "do_resize", "do_convert_rgb")
    size = hf_keys.size_dict(g(preprocessor, "size", default={"height": d.tile, "width": d.tile}), "size",
                             default_to_square=True)
    if set(size) != {"height", "width"} or size["height"] != size["width"]:
        raise hf_keys.ConfigError(f"Llama 4 needs a square size {{height, width}}, got {size}")
    resample = hf_keys.resample(preprocessor, d.resample)
    if resample not in resample_tv.PIL_FILTER_MODES:
        raise hf_keys.ConfigError(f"resample {resample} (BOX / HAMMING) has no torchvision tensor resize")
    norm = hf_keys.normalization(preprocessor, d.image_mean, d.image_std, d.rescale_factor)
    if norm["do_normalize"] and not norm["do_rescale"]:  # HF normalizes the uint8 tensor and raises
        raise hf_keys.ConfigError("do_normalize without do_rescale is not supported for Llama 4")
    for key in ("image_token", "fake_image_token"):
        if g(processor, key, default="<|image|>") != "<|image|>":
            raise hf_keys.ConfigError(f"processor {key} {processor[key]!r} in place of '<|image|>': its id is unknown")
    vision = config.get("vision_config") or {}
    ratio = float(_processor_value(processor, vision, "pixel_shuffle_ratio", d.pixel_shuffle_ratio))
    if not 0 < ratio <= 1:
        raise hf_keys.ConfigError(f"pixel_shuffle_ratio must be in (0, 1], got {ratio}")
    ids = {
        "image_start_token_id": hf_keys.token_id(config, "boi_token_index", "boi_token_id",
                                                 default=d.image_start_token_id),
        "image_end_token_id": hf_keys.token_id(config, "eoi_token_index", "eoi_token_id",
                                               default=d.image_end_token_id),
        "patch_token_id": hf_keys.token_id(config, "image_token_index", "image_token_id", default=d.patch_token_id),
    }
    for key, value in ids.items():
        if value != getattr(d, key):
            raise hf_keys.ConfigError(
                f"{key.replace('_id', '')} {value} is not Llama 4's {getattr(d, key)}: "
                "the tile separator and <|image|> ids of this tokenizer are unknown")
    return Llama4Config(
        tile=size["height"],
        max_patches=hf_keys.as_int(g(preprocessor, "max_patches", default=d.max_patches), "max_patches"),
        resize_to_max_canvas=hf_keys.flag(preprocessor, "resize_to_max_canvas", False),
        resample=resample,
        **norm,
        patch_size=hf_keys.as_int(_processor_value(processor, vision, "patch_size", d.patch_size), "patch_size"),
        pixel_shuffle_ratio=ratio,
        image_start_token_id=ids["image_start_token_id"],
        image_end_token_id=ids["image_end_token_id"],
        patch_token_id=ids["patch_token_id"],
    )


def matches(preprocessor: dict, config: dict) -> bool:
    """model_type "llama4"; or, with no model_type, a Llama 4 image processor by name."""
    model_type = config.get("model_type")
    if model_type is not None:
        return model_type in MODEL_TYPES
    return str(preprocessor.get("image_processor_type") or "").startswith("Llama4ImageProcessor")


# -- geometry: transformers' llama4 helpers, with their dtypes -----------------------------


@lru_cache(maxsize=8)
def supported_canvases(max_patches: int, tile: int) -> tuple[tuple[int, int], ...]:
    """``find_supported_resolutions``: every rows x cols with rows * cols <= max_patches,
    grouped by aspect ratio in first-seen order (the order decides area ties)."""
    by_ratio: dict[float, list[tuple[int, int]]] = {}
    for n in range(max_patches, 0, -1):
        factors = sorted({f for i in range(1, int(n**0.5) + 1) if n % i == 0 for f in (i, n // i)})
        for f in factors:
            by_ratio.setdefault(f / (n // f), []).append((f, n // f))
    return tuple((h * tile, w * tile) for group in by_ratio.values() for h, w in group)


def best_canvas(height: int, width: int, canvases, resize_to_max_canvas: bool = False) -> tuple[int, int]:
    """``get_best_fit``. Its scales are float32 (an int64 tensor divided by an int), so
    they are computed, compared and tied in float32 here too."""
    res = np.asarray(canvases, dtype=np.int64)
    scales = np.minimum(res[:, 0].astype(np.float32) / np.float32(height),
                        res[:, 1].astype(np.float32) / np.float32(width))
    up = scales[scales >= 1]
    if len(up):
        chosen = up.max() if resize_to_max_canvas else up.min()
    else:
        chosen = scales[scales < 1].max()
    candidates = res[scales == chosen]
    best = candidates[int(np.argmin(candidates[:, 0] * candidates[:, 1]))]
    return int(best[0]), int(best[1])


def _ratio(target: int, is_tensor: bool, side: int):
    """``target / side`` as HF computes it: float32 when ``target`` is a 0-d int64 tensor."""
    return np.float32(target) / np.float32(side) if is_tensor else target / side


def resized_size(height: int, width: int, canvas: tuple[int, int], tile: int,
                 resize_to_max_canvas: bool = False) -> tuple[int, int]:
    """The no-distortion size inside ``canvas`` (``_preprocess`` + ``get_max_res_without_distortion``).

    Without ``resize_to_max_canvas`` the target side is ``min(max(side, tile), canvas
    side)``; Python's ``min`` returns the canvas side (a 0-d tensor, so float32 math
    follows) only when it is strictly smaller. Each side is at least 1.
    """
    ch, cw = canvas
    if resize_to_max_canvas:
        (th, h_tensor), (tw, w_tensor) = (ch, True), (cw, True)
    else:
        lim_h, lim_w = max(height, tile), max(width, tile)
        th, h_tensor = (ch, True) if ch < lim_h else (lim_h, False)
        tw, w_tensor = (cw, True) if cw < lim_w else (lim_w, False)
    scale_w = _ratio(tw, w_tensor, width)
    scale_h = _ratio(th, h_tensor, height)
    if w_tensor or h_tensor:  # a tensor compares with a Python float in float32
        narrower = np.float32(scale_w) < np.float32(scale_h)
    else:
        narrower = scale_w < scale_h
    if narrower:
        new_h, new_w = min(math.floor(_times(height, scale_w)), th), tw
    else:
        new_h, new_w = th, min(math.floor(_times(width, scale_h)), tw)
    return max(int(new_h), 1), max(int(new_w), 1)


def _times(side: int, scale):
    """``side * scale``: a float32 product when ``scale`` is a float32 tensor."""
    return np.float32(side) * scale if isinstance(scale, np.float32) else side * scale


def expansion_tokens(rows: int, cols: int, config: Llama4Config) -> np.ndarray:
    """``Llama4Processor._prompt_split_image`` as ids."""
    c = config
    per_tile = c.tokens_per_tile
    grid = np.empty(0, dtype=np.int64)
    if rows * cols > 1:
        row = np.full((cols, per_tile + 1), c.patch_token_id, dtype=np.int64)
        row[:, -1] = c.tile_x_separator_token_id
        row[-1, -1] = c.tile_y_separator_token_id
        grid = np.tile(row.reshape(-1), rows)
    tail = np.full(per_tile + 2, c.patch_token_id, dtype=np.int64)
    tail[0], tail[-1] = c.image_token_id, c.image_end_token_id
    return np.concatenate(([c.image_start_token_id], grid, tail)).astype(np.int64)


class Tiles(NamedTuple):
    """The canvas in tiles (the global tile, when there is one, comes on top)."""

    rows: int
    cols: int


class Llama4(Family[Llama4Config, Tiles]):
    name = "llama4"
    reference_processor = "Llama4Processor + Llama4ImageProcessor (torchvision)"
    #: transformers has only the torchvision class for Llama 4.
    processors = ("torchvision",)

    def __init__(self, config: Llama4Config):
        self.config = config
        self.image_token_id = config.patch_token_id
        # vLLM mllama4.py: pixel_values flat by patches_per_image, patches_per_image and
        # aspect_ratios batched, nothing kept on the CPU
        self.field_layout = FieldLayout(
            batched=("aspect_ratios", "patches_per_image"), flat={"pixel_values": "patches_per_image"})
        self._mode = resample_tv.PIL_FILTER_MODES[config.resample]
        self._canvases = np.asarray(supported_canvases(config.max_patches, config.tile), dtype=np.int64)
        self._lut = config.lut(bf16.bf16_backend_lut)
        self._expansions: dict[Tiles, Expansion] = {}  # per tile grid, built once (tokens read-only)

    @property
    def placeholder_token_id(self) -> int:
        """What the prompt holds once per image: ``<|image|>`` (features go to ``<|patch|>``)."""
        return self.config.image_token_id

    def plan(self, height: int, width: int, item: int) -> ItemPlan[Tiles]:
        c = self.config
        canvas = best_canvas(height, width, self._canvases, c.resize_to_max_canvas)
        size = resized_size(height, width, canvas, c.tile, c.resize_to_max_canvas)
        tiles = Tiles(canvas[0] // c.tile, canvas[1] // c.tile)
        n = tiles.rows * tiles.cols
        expansion = self._expansions.get(tiles)
        if expansion is None:
            tokens = expansion_tokens(tiles.rows, tiles.cols, c)
            tokens.flags.writeable = False  # shared by every image of this grid
            expansion = self._expansions.setdefault(tiles, Expansion(tokens, c.patch_token_id))
        return ItemPlan(size, (n + (n > 1), 3, c.tile, c.tile), tiles, expansion)

    def _resize(self, image: DecodedImage, height: int, width: int) -> np.ndarray:
        """torchvision's resize; an image already of that size is returned as is (Pillow's
        RGBX buffer, which the writers read in place)."""
        if (image.height, image.width) == (height, width):
            return image.pixels
        return resample_tv.resize_rgb(image.pixels, height, width, self._mode)

    def process_item(self, image: DecodedImage, plan: ItemPlan[Tiles], out: np.ndarray) -> Aux:
        tile = self.config.tile
        rows, cols = plan.geometry
        n = rows * cols
        size = plan.resized_size
        small: np.ndarray | None
        if n > 1 and (image.height, image.width) not in (size, (tile, tile)):
            # the tiles' and the global tile's resizes share their horizontal pass's reads
            resized, small = resample_tv.resize_rgb_two(image.pixels, size, (tile, tile), self._mode)
        else:
            resized = self._resize(image, *size)
            small = self._resize(image, tile, tile) if n > 1 else None
        # the canvas is the resized image padded right/bottom with 0: read, never built
        window.tiles_chw(resized, 0, 0, rows, cols, self._lut, out[:n], fill=0)
        if small is not None:
            chw.normalize_chw(small, self._lut, out[n])
        return {
            "aspect_ratios": np.array([[rows, cols]], dtype=np.int64),
            "patches_per_image": np.array([out.shape[0]], dtype=np.int64),
        }

    def token_ids(self) -> dict[str, int]:
        c = self.config
        return {
            "patch": c.patch_token_id,
            "image": c.image_token_id,
            "image_start": c.image_start_token_id,
            "image_end": c.image_end_token_id,
            "tile_x_separator": c.tile_x_separator_token_id,
            "tile_y_separator": c.tile_y_separator_token_id,
        }

    def warmup(self) -> None:
        window.warmup()
        resample_tv.warmup()
        resample_tv.warmup_two_sizes()
        tile = self.config.tile
        # one tile and several; down- and upscaled; already at the target size
        sizes = ((37, 53), (300, 500), (2000, 900), (tile, tile), (tile, 2 * tile), (1, 700))
        self.run_batches(*([s] for s in sizes))
