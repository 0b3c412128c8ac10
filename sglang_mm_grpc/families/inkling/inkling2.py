"""Inkling 2 images: HF ``Inkling2ImageProcessor`` (torchvision) + ``Inkling2Processor``.

No resize. A PIL image with transparency data (``has_transparency_data``: an alpha band,
a palette with alpha, a ``transparency`` key) is converted to RGBA, any other to RGB;
the RGBA one is composited in integers onto a checkerboard of 8-pixel squares, 204
where ``(y // 8 + x // 8)`` is even and 153 elsewhere:
``(c * a + bg * (255 - a) + 127) // 255`` (so this family decodes with
``transparency = "keep"``, and every other family keeps compositing onto white). The
image is padded right and bottom to ``ceil(H / ph) * ph`` x ``ceil(W / pw) * pw`` with
-1.0 on the 0..255 scale, rescaled and normalized (torchvision backend, fused float32;
mean = std = 0.5 by default) and cut into one ``ph x pw`` patch per image token, in
raster order. Outputs: ``pixel_values`` float32 [patches, ph, pw, 3] and
``image_grid_thw`` int64 [images, 3] = (1, rows, cols); ours adds ``patches_per_image``
(rows * cols per image), the sizes tensor vLLM splits ``pixel_values`` by.

Tokens (``Inkling2Processor``): the placeholder ``<|unused_200054|>`` becomes
rows * cols copies of itself. Positions are 1-D (no rotary positions in the language
model; the vision tower's 2-D rotary positions come from ``image_grid_thw``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ...core.carriers import DecodedImage
from ...kernels import normalize, patch_grid
from ...core.layout import Expansion
from .. import hf_keys
from ..base import Aux, Family, FieldLayout, ItemPlan, Normalization
from .inkling import pad_values

MODEL_TYPES = ("inkling2", "inkling2_loop")
#: ``Inkling2ImageProcessor.convert_to_rgb``'s background: (square side, light, dark).
CHECKERBOARD = (8, 204, 153)


@dataclass(frozen=True)
class Inkling2Config(Normalization):
    """The resolved knobs (preprocessor_config.json + config.json); HF class defaults."""

    image_mean: tuple[float, ...] = (0.5, 0.5, 0.5)
    image_std: tuple[float, ...] = (0.5, 0.5, 0.5)
    patch_height: int = 40  # size.height
    patch_width: int = 40  # size.width
    image_token_id: int = 200054  # <|unused_200054|>


def config_from_hf(preprocessor: dict, config: dict, processor: dict | None = None) -> Inkling2Config:
    """Resolve the knobs from the checkpoint's JSON files (HF class defaults fill gaps).
    ``do_resize`` and ``resample`` are not read: the processor never resizes."""
    d = Inkling2Config()
    hf_keys.refuse_false(preprocessor, "Inkling 2", "do_convert_rgb")
    size = hf_keys.size_dict(hf_keys.get(preprocessor, "size", default={"height": 40, "width": 40}), "size",
                             default_to_square=True)
    if set(size) != {"height", "width"}:
        raise hf_keys.ConfigError(f"Inkling 2 needs size {{height, width}} (its patch), got {size}")
    return Inkling2Config(
        **hf_keys.normalization(preprocessor, d.image_mean, d.image_std, d.rescale_factor),
        patch_height=size["height"],
        patch_width=size["width"],
        image_token_id=hf_keys.token_id(config, "image_token_id", default=d.image_token_id),
    )


def matches(preprocessor: dict, config: dict) -> bool:
    return hf_keys.claims(preprocessor, config, MODEL_TYPES, "Inkling2ImageProcessor")


class Grid(NamedTuple):
    rows: int
    cols: int


class Inkling2(Family[Inkling2Config, Grid]):
    name = "inkling2"
    reference_processor = "Inkling2ImageProcessor (torchvision) + Inkling2Processor"
    #: transformers has only the torchvision class.
    processors = ("torchvision",)
    transparency = "keep"

    def __init__(self, config: Inkling2Config):
        self.config = config
        self.image_token_id = config.image_token_id
        self.field_layout = FieldLayout(
            batched=("image_grid_thw", "patches_per_image"), flat={"pixel_values": "patches_per_image"})
        self._lut = config.lut(normalize.torchvision_backend_lut)
        self._pad = pad_values(config)

    def plan(self, height: int, width: int, item: int) -> ItemPlan[Grid]:
        ph, pw = self.config.patch_height, self.config.patch_width
        grid = Grid(-(-height // ph), -(-width // pw))
        n = grid.rows * grid.cols
        return ItemPlan((height, width), (n, ph, pw, 3), grid, Expansion.repeat(self.image_token_id, n))

    def process_item(self, image: DecodedImage, plan: ItemPlan[Grid], out: np.ndarray) -> Aux:
        rows, cols = plan.geometry
        board = CHECKERBOARD if image.alpha else None
        patch_grid.cut_patches(image.pixels, self._lut, self._pad, cols, out, board)
        return {
            "image_grid_thw": np.array([[1, rows, cols]], dtype=np.int64),
            "patches_per_image": np.array([rows * cols], dtype=np.int64),
        }

    def warmup(self) -> None:
        patch_grid.warmup()
        ph, pw = self.config.patch_height, self.config.patch_width
        self.run_batches([(37, 53)], [(ph, 2 * pw)], [(1, 1), (3 * ph + 1, pw - 1)])
        # a transparent image, as decoding hands it over
        rgba = np.random.default_rng(0).integers(0, 256, (ph + 3, 2 * pw - 1, 4), dtype=np.uint8)
        h, w = rgba.shape[:2]
        plan = self.plan(h, w, 0)
        self.process_item(DecodedImage(rgba, alpha=True), plan, np.empty(plan.feature_shape, np.float32))
