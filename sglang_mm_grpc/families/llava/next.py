"""LLaVA-NeXT (v1.6, anyres) images (HF ``LlavaNextImageProcessorPil``).

Per image: pick the grid pinpoint that keeps the most resolution
(``select_best_resolution``), resize into it keeping the aspect (bicubic), center it
on a black canvas of the pinpoint's size, cut that into tile x tile squares in raster
order; the whole image resized to one tile (aspect not kept) goes first. The images of
a batch are padded with all-zero tiles to the largest tile count:
pixel_values [N, max_tiles, 3, tile, tile], image_sizes int64 [N, 2] = original (h, w).
Each ``<image>`` placeholder becomes ``LlavaNextProcessor._get_number_of_features``
``<image>`` tokens (unpadded grid features, one newline per row, the base tile, extra
tokens; minus one for the "default" feature strategy).

The canvas is never built: each tile is read from the resized image through the
normalize table straight into its slot, black outside it (``kernels.window``). The
batch is padded even when ``do_pad`` is false (HF would then return ragged lists).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...core.carriers import DecodedImage
from ...kernels import chw, normalize, resample_pil, window
from ...core.layout import Expansion
from .. import batching, hf_keys
from ..base import Aux, Family, FieldLayout, ItemPlan
from .common import ClipKnobs, TokenKnobs, clip_knobs, token_knobs

MODEL_TYPES = ("llava_next",)
DEFAULT_PINPOINTS = ((336, 672), (672, 336), (672, 672), (1008, 336), (336, 1008))


def select_best_resolution(height: int, width: int, pinpoints: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """transformers' ``select_best_resolution``: most effective pixels, then least waste
    (a thin image every pinpoint scales to 0 rows gets the least wasteful one). ``pinpoints``
    is not empty (``hf_keys.pinpoints``)."""
    best, max_effective, min_wasted = pinpoints[0], 0, float("inf")
    for ph, pw in pinpoints:
        scale = min(pw / width, ph / height)
        down_w, down_h = int(width * scale), int(height * scale)
        effective = min(down_w * down_h, width * height)
        wasted = ph * pw - effective
        if effective > max_effective or (effective == max_effective and wasted < min_wasted):
            max_effective, min_wasted, best = effective, wasted, (ph, pw)
    return best


def patch_output_size(height: int, width: int, target: tuple[int, int]) -> tuple[int, int]:
    """transformers' ``get_patch_output_size``: fit inside ``target`` keeping the aspect."""
    th, tw = target
    scale_w, scale_h = tw / width, th / height
    if scale_w < scale_h:
        return min(math.ceil(height * scale_w), th), tw
    return th, min(math.ceil(width * scale_h), tw)


def number_of_features(height: int, width: int, tile_h: int, tile_w: int, pinpoints: Sequence[tuple[int, int]],
                       tokens: TokenKnobs) -> int:
    """``LlavaNextProcessor._get_number_of_features`` (before the strategy's -1)."""
    best_h, best_w = select_best_resolution(height, width, pinpoints)
    scale_h, scale_w = best_h // tile_h, best_w // tile_w
    patches_h, patches_w = tile_h // tokens.patch_size, tile_w // tokens.patch_size
    cur_h, cur_w = patches_h * scale_h, patches_w * scale_w
    if width / height > cur_w / cur_h:
        new_h = int(round(height * (cur_w / width), 7))
        cur_h -= ((cur_h - new_h) // 2) * 2
    else:
        new_w = int(round(width * (cur_h / height), 7))
        cur_w -= ((cur_w - new_w) // 2) * 2
    return cur_h * cur_w + cur_h + patches_h * patches_w + tokens.num_additional_image_tokens


@dataclass(frozen=True)
class LlavaNextConfig:
    """The resolved knobs (preprocessor_config.json + config.json + processor_config.json)."""

    image: ClipKnobs = ClipKnobs()
    tokens: TokenKnobs = TokenKnobs()
    image_grid_pinpoints: tuple[tuple[int, int], ...] = DEFAULT_PINPOINTS
    image_token_id: int = 32000

    @property
    def tile(self) -> int:
        """Tile side: ``crop_size.height``, as the HF class cuts them."""
        return self.image.crop_size[0]


def config_from_hf(preprocessor: dict, config: dict, processor: dict | None = None) -> LlavaNextConfig:
    image = clip_knobs(preprocessor, "LLaVA-NeXT")
    tile = image.crop_size[0]
    size = image.size_dict
    base = (size["height"], size["width"]) if "height" in size else (size["shortest_edge"],) * 2
    # The HF class runs resize and center crop on every tile and on the base image; they
    # are exact no-ops only when all of them are tile x tile. Other settings are refused.
    if image.crop_size != (tile, tile) or base != (tile, tile):
        raise hf_keys.ConfigError(
            f"LLaVA-NeXT needs size and crop_size equal and square, got size {size}, crop_size {image.crop_size}")
    pins = hf_keys.pinpoints(hf_keys.get(preprocessor, "image_grid_pinpoints", default=DEFAULT_PINPOINTS))
    if any(h % tile or w % tile for h, w in pins):
        raise hf_keys.ConfigError(f"image_grid_pinpoints {pins} must be multiples of the tile size {tile}")
    return LlavaNextConfig(
        image=image,
        tokens=token_knobs(config, processor or {}),
        image_grid_pinpoints=pins,
        image_token_id=hf_keys.token_id(config, "image_token_index", "image_token_id",
                                        default=LlavaNextConfig.image_token_id),
    )


def matches(preprocessor: dict, config: dict) -> bool:
    """model_type "llava_next" with its image processor (or none named); or, with no
    model_type, ``LlavaNextImageProcessor`` by name. Other model types reusing this
    image processor count their tokens their own way and are not claimed."""
    kind = str(preprocessor.get("image_processor_type") or "")
    model_type = config.get("model_type")
    if model_type in MODEL_TYPES:
        return not kind or kind.startswith("LlavaNextImageProcessor")
    return model_type is None and kind.startswith("LlavaNextImageProcessor")


def _resize(image: DecodedImage, height: int, width: int, resample: int) -> np.ndarray:
    """Pillow's resize; an image already of that size is used as is (Pillow copies it;
    its RGBX buffer is read in place)."""
    if (image.height, image.width) == (height, width):
        return image.pixels
    return resample_pil.resize_rgb(image.pixels, height, width, resample)


class LlavaNext(Family[LlavaNextConfig, tuple[int, int]]):
    """Geometry: the chosen pinpoint (height, width)."""

    name = "llava_next"
    reference_processor = "LlavaNextImageProcessorPil"

    def __init__(self, config: LlavaNextConfig):
        self.config = config
        self.image_token_id = config.image_token_id
        # vLLM llava_next.py: pixel_values and image_sizes batched, nothing kept on the CPU;
        # its model drops the padded tiles itself ("Image patches might be padded for batch
        # processing" in _merge_image_patch_embeddings)
        self.field_layout = FieldLayout(batched=("pixel_values", "image_sizes"))
        self._lut = config.image.lut(normalize.pil_backend_lut)

    def batch_shape(self, plans: Sequence[ItemPlan[tuple[int, int]]]) -> tuple[tuple[int, ...], batching.Slots]:
        return batching.stacked_padded_rows(plans)

    def plan(self, height: int, width: int, item: int) -> ItemPlan[tuple[int, int]]:
        c = self.config
        best = select_best_resolution(height, width, c.image_grid_pinpoints)
        resized = patch_output_size(height, width, best)
        tile = c.tile
        tiles = 1 + (best[0] // tile) * (best[1] // tile)
        tokens = number_of_features(height, width, tile, tile, c.image_grid_pinpoints, c.tokens) - c.tokens.dropped
        return ItemPlan(resized, (tiles, 3, tile, tile), best, Expansion.repeat(self.image_token_id, tokens))

    def process_item(self, image: DecodedImage, plan: ItemPlan[tuple[int, int]], out: np.ndarray) -> Aux:
        c = self.config
        tile = c.tile
        f = c.image.resample
        best_h, best_w = plan.geometry
        nh, nw = plan.resized_size
        if (image.height, image.width) in ((tile, tile), (nh, nw)):
            base, resized = _resize(image, tile, tile, f), _resize(image, nh, nw, f)
        else:  # the source's rows read once for both horizontal passes where Pillow's passes allow
            base, resized = resample_pil.resize_rgb_two(image.pixels, (tile, tile), (nh, nw), f)
        chw.normalize_chw(base, self._lut, out[0])
        window.tiles_chw(resized, (best_h - nh) // 2, (best_w - nw) // 2, best_h // tile, best_w // tile,
                         self._lut, out[1:], fill=0)
        return {"image_sizes": np.array([[image.height, image.width]], dtype=np.int64)}

    def warmup(self) -> None:
        window.warmup()
        resample_pil.warmup()
        resample_pil.warmup_two_sizes()
        # Both pass orders, one-axis resizes, images already of a target size.
        tile = self.config.tile
        sizes = ((37, 53), (500, 40), (40, 500), (2000, 900), (tile, tile), (tile, 2 * tile), (tile, 500))
        self.run_batches(*([s] for s in sizes))
