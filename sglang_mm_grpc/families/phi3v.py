"""Phi-3-vision and Phi-3.5-vision images (Microsoft's remote-code ``Phi3VImageProcessor``).

There is no transformers class to match; this follows the published processor
(``image_processing_phi3_v.py``). Per image (``HD_transform``, num_crops = N):

* a portrait image is transposed (``Image.TRANSPOSE``) and worked on as landscape;
* ``scale`` = the largest s with s * ceil(s / (w/h)) <= N; the image is resized with
  Pillow BILINEAR (torchvision's PIL path) to width 336*s, height int(width / (w/h));
* the height is padded to a multiple of 336 with white, centred (top = int(pad / 2));
* the result is transposed back, then ``ToTensor`` + ``Normalize(CLIP)``;
* the global image is the normalized HD image resized to 336 x 336 with
  ``F.interpolate(mode="bicubic")`` (float, not antialiased), followed by the 336 x 336
  crops in raster order, zero crops up to N + 1.

Tensors: pixel_values [B, N+1, 3, 336, 336] float32, ``image_sizes`` int64 [B, 2] (the
HD image's height, width) and ``num_img_tokens`` int64 [B], all batched per image
(vLLM's ``phi3v`` reads ``pixel_values`` and ``image_sizes``).

Tokens: ((h/336)(w/336) + 1) * 144 + 1 + (h/336 + 1) * 12 per image. The HF processor
writes them as id -k for the prompt's ``<|image_k|>``; negative ids cannot travel as
uint32 and the model only tests ``id < 0``, so vLLM and SGLang replace them with
``<|image|>`` (id 32044) and merge embeddings on that id. This family does the same:
the request carries one 32044 per image, each becomes ``num_img_tokens`` of 32044.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..core.carriers import DecodedImage
from ..core.errors import invalid
from ..kernels import bicubic_f32, resample_pil, totensor, window
from ..core.layout import Expansion
from . import batching, hf_keys
from .base import CLIP_MEAN, CLIP_STD, Aux, Family, FieldLayout, ItemPlan

MODEL_TYPES = ("phi3_v",)
PROCESSOR = "Phi3VImageProcessor"
IMAGE_TOKEN_ID = 32044  # <|image|>
TILE = 336


@dataclass(frozen=True)
class HDGeometry:
    """One image's ``HD_transform`` outcome, in the image's own orientation."""

    transposed: bool
    resized_h: int  # the Pillow resize target, in the (possibly transposed) working frame
    resized_w: int
    hd_h: int  # the padded HD image
    hd_w: int
    top: int  # where the resized image sits on it
    left: int

    @property
    def crops(self) -> int:
        return (self.hd_h // TILE) * (self.hd_w // TILE)

    @property
    def num_img_tokens(self) -> int:
        rows, cols = self.hd_h // TILE, self.hd_w // TILE
        return (rows * cols + 1) * 144 + 1 + (rows + 1) * 12


def hd_geometry(height: int, width: int, num_crops: int) -> HDGeometry:
    """``HD_transform``'s sizes (with its float arithmetic); ``resized_h`` may be 0."""
    transposed = width < height
    w, h = (height, width) if transposed else (width, height)
    ratio = w / h
    scale = 1
    while scale * math.ceil(scale / ratio) <= num_crops:
        scale += 1
    scale -= 1
    new_w = int(scale * TILE)
    new_h = int(new_w / ratio)
    target = int(math.ceil(new_h / TILE) * TILE)
    pad_top = int((target - new_h) / 2)
    if transposed:
        return HDGeometry(True, new_h, new_w, new_w, target, 0, pad_top)
    return HDGeometry(False, new_h, new_w, target, new_w, pad_top, 0)


@dataclass(frozen=True)
class Phi3VConfig:
    num_crops: int = 16
    image_mean: tuple[float, ...] = CLIP_MEAN
    image_std: tuple[float, ...] = CLIP_STD
    image_token_id: int = IMAGE_TOKEN_ID


def config_from_hf(preprocessor: dict, config: dict, processor: dict | None = None) -> Phi3VConfig:
    """preprocessor_config.json's ``num_crops``, ``image_mean``, ``image_std`` (the class
    defaults are 1 crop and CLIP's statistics); the image id from config.json if it
    names one, else 32044."""
    hf_keys.refuse_false(preprocessor, "Phi-3-vision", "do_convert_rgb")
    return Phi3VConfig(
        num_crops=hf_keys.as_int(hf_keys.get(preprocessor, "num_crops", default=1), "num_crops"),
        **hf_keys.mean_std(preprocessor, CLIP_MEAN, CLIP_STD),
        image_token_id=hf_keys.token_id(config, "image_token_id", "image_token_index", default=IMAGE_TOKEN_ID),
    )


def matches(preprocessor: dict, config: dict) -> bool:
    """model_type "phi3_v"; or, with no model_type, ``Phi3VImageProcessor`` by name."""
    return hf_keys.claims(preprocessor, config, MODEL_TYPES, PROCESSOR)


class Phi3V(Family[Phi3VConfig, HDGeometry]):
    name = "phi3_v"
    reference_processor = "Phi3VImageProcessor (remote code, published algorithm)"

    def __init__(self, config: Phi3VConfig):
        self.config = config
        self.image_token_id = config.image_token_id
        # vLLM phi3v.py: pixel_values and image_sizes batched, nothing kept on the CPU
        self.field_layout = FieldLayout(batched=("pixel_values", "image_sizes", "num_img_tokens"))
        self._lut = totensor.totensor_normalize_lut(config.image_mean, config.image_std)

    def batch_shape(self, plans: Sequence[ItemPlan[HDGeometry]]) -> tuple[tuple[int, ...], batching.Slots]:
        """[B, N+1, 3, 336, 336]: every image has the same slot; it zeroes the crops it does not use."""
        return batching.stacked(plans)

    def plan(self, height: int, width: int, item: int) -> ItemPlan[HDGeometry]:
        g = hd_geometry(height, width, self.config.num_crops)
        if g.resized_h <= 0:
            raise invalid(f"{height}x{width} image: the aspect ratio is too extreme "
                          f"(its short side resizes to 0 pixels)", item=item)
        resized = (g.resized_w, g.resized_h) if g.transposed else (g.resized_h, g.resized_w)
        return ItemPlan(resized, (self.config.num_crops + 1, 3, TILE, TILE), g,
                        Expansion.repeat(self.image_token_id, g.num_img_tokens))

    def grid(self, plan: ItemPlan[HDGeometry]) -> tuple[int, ...]:
        """The HD image in 336 px crops: rows x columns."""
        return plan.geometry.hd_h // TILE, plan.geometry.hd_w // TILE

    def process_item(self, image: DecodedImage, plan: ItemPlan[HDGeometry], out: np.ndarray) -> Aux:
        g = plan.geometry
        rgb = image.rgb
        if g.transposed:
            rgb = np.ascontiguousarray(rgb.transpose(1, 0, 2))
        if rgb.shape[:2] != (g.resized_h, g.resized_w):
            rgb = resample_pil.resize(rgb, g.resized_h, g.resized_w, resample_pil.BILINEAR)
        if g.transposed:
            rgb = np.ascontiguousarray(rgb.transpose(1, 0, 2))
        rows, cols = g.hd_h // TILE, g.hd_w // TILE
        window.tiles_chw(rgb, g.top, g.left, rows, cols, self._lut, out[1: 1 + rows * cols], fill=255)
        out[1 + rows * cols:] = 0  # the crops this image does not use
        if (g.hd_h, g.hd_w) == (TILE, TILE):
            out[0] = out[1]  # the global resize is the identity
        else:
            bicubic_f32.resize_canvas_bicubic(rgb, g.top, g.left, g.hd_h, g.hd_w, self._lut, out[0], fill=255)
        return {
            "image_sizes": np.array([[g.hd_h, g.hd_w]], dtype=np.int64),
            "num_img_tokens": np.array([g.num_img_tokens], dtype=np.int64),
        }

    def warmup(self) -> None:
        window.warmup()
        bicubic_f32.warmup()
        resample_pil.warmup()
        # landscape and portrait (transposed) images, alone and batched
        self.run_batches([(37, 53)], [(300, 40), (TILE, TILE * 2), (20, 20)])
