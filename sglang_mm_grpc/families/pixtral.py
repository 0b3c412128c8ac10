"""Pixtral-12B (llava + pixtral tower) and Mistral-Small-3.x (mistral3) images.

HF reference: ``PixtralProcessor`` driving ``PixtralImageProcessorPil``. The processor
replaces the image processor's patch size with ``patch_size * spatial_merge_size`` (P):
fit the image inside the longest edge (floor), round each side up to a multiple of P,
resample (bicubic by default), rescale+normalize, and zero-pad the batch to its largest
height and width. Each image becomes rows of ``[IMG]`` x (w/P), each row ended by
``[IMG_BREAK]`` and the last one by ``[IMG_END]``; positions are 1-D.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np

from ..core.carriers import DecodedImage
from ..core.errors import invalid
from ..kernels import chw, normalize, resample_pil
from ..core.layout import Expansion
from . import batching, hf_keys
from .base import Aux, Family, FieldLayout, ItemPlan, Normalization

# The special tokens of Mistral's Tekken tokenizer (shared by Pixtral and Mistral-Small-3.x).
# Only [IMG] is also a config value (image_token_index); the other two are tokenizer facts.
TEKKEN_IDS = {"[IMG]": 10, "[IMG_BREAK]": 12, "[IMG_END]": 13}


def fit_size(height: int, width: int, max_height: int, max_width: int, patch: int) -> tuple[int, int]:
    """transformers' pixtral ``get_resize_output_image_size``: shrink to fit (floor), then
    round each side up to a multiple of ``patch`` (which may upscale slightly)."""
    ratio = max(height / max_height, width / max_width)
    if ratio > 1:
        height = int(math.floor(height / ratio))
        width = int(math.floor(width / ratio))
    return ((height - 1) // patch + 1) * patch, ((width - 1) // patch + 1) * patch


@dataclass(frozen=True)
class PixtralConfig(Normalization):
    """The resolved knobs (preprocessor_config.json + processor_config.json + config.json)."""

    model_type: str = "llava"
    max_height: int = 1024
    max_width: int = 1024
    patch_size: int = 16  # the processor's (vision tower) patch size
    spatial_merge_size: int = 1
    resample: int = resample_pil.BICUBIC
    image_token_id: int = TEKKEN_IDS["[IMG]"]
    image_break_token_id: int = TEKKEN_IDS["[IMG_BREAK]"]
    image_end_token_id: int = TEKKEN_IDS["[IMG_END]"]

    @property
    def unit(self) -> int:
        """The side granularity and the pixels per token: patch * spatial_merge_size."""
        return self.patch_size * self.spatial_merge_size


def _processor_value(processor: dict, config: dict, key: str, fallback) -> int:
    """processor_config.json wins (it is what PixtralProcessor is built with); without it,
    the model's own config.json value, so a checkpoint whose processor file omits
    ``spatial_merge_size`` still gets the token count the model consumes."""
    return hf_keys.as_int(hf_keys.get(processor, key, default=hf_keys.get(config, key, default=fallback)), key)


def config_from_hf(preprocessor: dict, config: dict, processor: dict | None = None) -> PixtralConfig:
    """Resolve the knobs from the checkpoint's JSON files (HF class defaults fill gaps)."""
    processor = processor or config.get("processor_config") or {}
    d = PixtralConfig()
    g = hf_keys.get
    hf_keys.refuse_false(preprocessor, "Pixtral", "do_resize", "do_convert_rgb")
    if hf_keys.flag(preprocessor, "do_center_crop", False):
        raise hf_keys.ConfigError("do_center_crop=true is not supported for the Pixtral family")
    model_type = str(config.get("model_type") or d.model_type)
    mistral3 = model_type == "mistral3"
    vision = config.get("vision_config") or {}
    # Class defaults where a file is silent: Mistral3Config (vision patch 14, merge 2),
    # PixtralVisionConfig / PixtralProcessor (patch 16, merge 1).
    patch = _processor_value(processor, vision, "patch_size", 14 if mistral3 else 16)
    merge = _processor_value(processor, config, "spatial_merge_size", 2 if mistral3 else 1)
    tokens = {
        "[IMG]": g(processor, "image_token", default="[IMG]"),
        "[IMG_BREAK]": g(processor, "image_break_token", default="[IMG_BREAK]"),
        "[IMG_END]": g(processor, "image_end_token", default="[IMG_END]"),
    }
    for want, got in tokens.items():
        if got != want:
            raise hf_keys.ConfigError(f"processor token {got!r} in place of {want!r}: its id is unknown here")
    # Class defaults: Mistral3Config 10, LlavaConfig 32000 (then not a Tekken checkpoint).
    image_id = hf_keys.as_int(
        g(config, "image_token_index", "image_token_id", default=10 if mistral3 else 32000), "image_token_index")
    if image_id != TEKKEN_IDS["[IMG]"]:
        raise hf_keys.ConfigError(
            f"image_token_index {image_id} is not the Tekken [IMG] id {TEKKEN_IDS['[IMG]']}: "
            "the [IMG_BREAK]/[IMG_END] ids of this tokenizer are unknown")
    max_h, max_w = hf_keys.longest_edge_box(preprocessor, d.max_height)
    return PixtralConfig(
        model_type=model_type,
        max_height=max_h,
        max_width=max_w,
        patch_size=patch,
        spatial_merge_size=merge,
        **hf_keys.normalization(preprocessor, d.image_mean, d.image_std, d.rescale_factor),
        resample=hf_keys.resample(preprocessor, d.resample),
        image_token_id=image_id,
    )


def matches(preprocessor: dict, config: dict) -> bool:
    """mistral3; llava with a pixtral vision tower or a Pixtral image processor; or, with
    no model_type, a Pixtral image processor. Other model types that reuse the Pixtral
    image processor (their own tokens and processor) are left to their own family."""
    model_type = config.get("model_type")
    vision = config.get("vision_config") or {}
    pixtral_processor = str(preprocessor.get("image_processor_type", "")).startswith("PixtralImageProcessor")
    pixtral_tower = isinstance(vision, dict) and vision.get("model_type") == "pixtral"
    return (
        model_type == "mistral3"
        or (model_type == "llava" and (pixtral_tower or pixtral_processor))
        or (not model_type and pixtral_processor)
    )


class Grid(NamedTuple):
    """The image in tokens: rows x columns of ``unit`` x ``unit`` pixels."""

    rows: int
    cols: int


class Pixtral(Family[PixtralConfig, Grid]):
    name = "pixtral"
    reference_processor = "PixtralProcessor + PixtralImageProcessorPil"

    def __init__(self, config: PixtralConfig):
        self.config = config
        self.image_token_id = config.image_token_id
        # vLLM llava.py PixtralHFMultiModalProcessor and mistral3.py crop each image's
        # pixel_values to its image_sizes in _call_hf_processor ("Avoid padding since we
        # need the output for each image to be independent") and batch pixel_values only;
        # the gRPC servicer skips that processor, so padded images cannot go to vLLM.
        self.field_layout = FieldLayout(batched=("pixel_values", "image_sizes"), unpadded_by="image_sizes")
        self._lut = config.lut(normalize.pil_backend_lut)

    @property
    def pixel_dtype(self) -> np.dtype:
        return self.config.pixel_dtype

    def device_normalization(self) -> str | None:
        """Mistral 3 only: vLLM's llava.py (Pixtral-12B's LlavaForConditionalGeneration)
        does not normalize on the device."""
        if self.config.model_type == "mistral3":
            return "vllm/model_executor/models/mistral3.py Mistral3ForConditionalGeneration"
        return None

    def batch_shape(self, plans: Sequence[ItemPlan[Grid]]) -> tuple[tuple[int, ...], batching.Slots]:
        return batching.padded_planes(plans)

    def plan(self, height: int, width: int, item: int) -> ItemPlan[Grid]:
        c = self.config
        h, w = fit_size(height, width, c.max_height, c.max_width, c.unit)
        if h <= 0 or w <= 0:
            raise invalid(
                f"{height}x{width} image: a side shrinks to 0 pixels inside {c.max_height}x{c.max_width}", item=item
            )
        grid = Grid(h // c.unit, w // c.unit)
        return ItemPlan((h, w), (3, h, w), grid, self._expansion(grid))

    def _expansion(self, grid: Grid) -> Expansion:
        """Rows of [IMG], each ended by [IMG_BREAK], the last by [IMG_END]."""
        c = self.config
        tokens = np.full((grid.rows, grid.cols + 1), c.image_token_id, dtype=np.int64)
        tokens[:, -1] = c.image_break_token_id
        flat = tokens.reshape(-1)
        flat[-1] = c.image_end_token_id
        return Expansion(flat, c.image_token_id)

    def process_item(self, image: DecodedImage, plan: ItemPlan[Grid], out: np.ndarray) -> Aux:
        h, w = plan.resized_size
        rgb = image.rgb
        if rgb.shape[:2] != (h, w):
            rgb = resample_pil.resize(rgb, h, w, self.config.resample)
        chw.normalize_chw(rgb, self._lut, out)
        return {"image_sizes": np.array([[h, w]], dtype=np.int64)}

    def token_ids(self) -> dict[str, int]:
        c = self.config
        return {"image": c.image_token_id, "image_break": c.image_break_token_id, "image_end": c.image_end_token_id}

    def warmup(self) -> None:
        resample_pil.warmup()
        unit = self.config.unit
        # a lone image (its slot is a contiguous plane) and a padded batch (strided slots)
        self.run_batches([(37, 53)], [(37, 53), (300, 40), (unit, 2 * unit)])
