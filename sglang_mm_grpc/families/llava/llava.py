"""LLaVA-1.5 images (HF ``CLIPImageProcessorPil`` / ``LlavaImageProcessorPil``).

Optionally pad to a square with the mean colour (``LlavaImageProcessor`` with
``do_pad``), resize the shortest edge (bicubic), center crop, rescale+normalize:
pixel_values [N, 3, crop_h, crop_w]. Each ``<image>`` placeholder becomes
``(h // patch) * (w // patch) + num_additional_image_tokens`` (minus one for the
"default" feature strategy) ``<image>`` tokens: 576 for 336/14.

Only the crop window of the resized image is computed, and the square padding is
never materialised (``kernels.resize_region``); the crop (and its zero padding when
the image is smaller than the crop) is read through the normalize table into the
image's slot (``kernels.window``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...core.carriers import DecodedImage
from ...kernels import normalize, resample_pil, resize_region, window
from ...core.layout import Expansion
from .. import batching, hf_keys
from ..base import Aux, Family, FieldLayout, ItemPlan
from .common import ClipKnobs, TokenKnobs, clip_knobs, token_knobs

MODEL_TYPES = ("llava",)
IMAGE_PROCESSORS = ("CLIPImageProcessor", "LlavaImageProcessor")


@dataclass(frozen=True)
class LlavaConfig:
    """The resolved knobs (preprocessor_config.json + config.json + processor_config.json)."""

    image: ClipKnobs = ClipKnobs()
    tokens: TokenKnobs = TokenKnobs()
    #: ``LlavaImageProcessor``'s do_pad: pad to a square with the mean colour first.
    pad_to_square: bool = False
    image_token_id: int = 32000


def config_from_hf(preprocessor: dict, config: dict, processor: dict | None = None) -> LlavaConfig:
    image = clip_knobs(preprocessor, "LLaVA")
    kind = str(preprocessor.get("image_processor_type") or "LlavaImageProcessor")
    do_pad = hf_keys.flag(preprocessor, "do_pad", False)
    pad_to_square = do_pad and kind.startswith("LlavaImageProcessor")
    if do_pad and not pad_to_square and preprocessor.get("pad_size") is not None:
        raise hf_keys.ConfigError("CLIPImageProcessor do_pad with pad_size is not supported")
    if pad_to_square and not all(0 <= int(m * 255) <= 255 for m in image.image_mean):
        raise hf_keys.ConfigError(f"image_mean {image.image_mean} gives no uint8 padding colour")
    fixed = image.do_resize and ("height" in image.size_dict or pad_to_square)
    if not image.do_center_crop and not fixed:
        # Without a crop each image keeps its own size; only one size per batch stacks.
        raise hf_keys.ConfigError("do_center_crop=false is supported only when every image gets one size")
    return LlavaConfig(
        image=image,
        tokens=token_knobs(config, processor or {}),
        pad_to_square=pad_to_square,
        image_token_id=hf_keys.token_id(config, "image_token_index", "image_token_id",
                                        default=LlavaConfig.image_token_id),
    )


def matches(preprocessor: dict, config: dict) -> bool:
    """model_type "llava" with a CLIP/LLaVA image processor (the same model_type also
    serves e.g. Pixtral's); or, with no model_type, ``LlavaImageProcessor`` by name."""
    kind = str(preprocessor.get("image_processor_type") or "")
    model_type = config.get("model_type")
    if model_type in MODEL_TYPES:
        return not kind or kind.startswith(IMAGE_PROCESSORS)
    return model_type is None and kind.startswith("LlavaImageProcessor")


class Llava(Family[LlavaConfig, None]):
    name = "llava"
    reference_processor = "CLIPImageProcessorPil"

    def __init__(self, config: LlavaConfig):
        self.config = config
        if config.pad_to_square:
            self.reference_processor = "LlavaImageProcessorPil"
        self.image_token_id = config.image_token_id
        # vLLM llava.py LlavaMultiModalProcessor: pixel_values batched, nothing kept on the CPU
        self.field_layout = FieldLayout(batched=("pixel_values",))
        c = config.image
        self._lut = c.lut(normalize.pil_backend_lut)
        self._color = tuple(int(m * 255) for m in c.image_mean)
        self._zero = np.zeros(3, np.uint8)

    def _canvas(self, height: int, width: int) -> tuple[int, int, int, int]:
        """(top, left, canvas_h, canvas_w): the square padding, or the image itself."""
        if not self.config.pad_to_square or height == width:
            return 0, 0, height, width
        side = max(height, width)
        return (side - height) // 2, (side - width) // 2, side, side

    def batch_shape(self, plans: Sequence[ItemPlan[None]]) -> tuple[tuple[int, ...], batching.Slots]:
        return batching.stacked(plans)

    def plan(self, height: int, width: int, item: int) -> ItemPlan[None]:
        c = self.config.image
        _, _, ch, cw = self._canvas(height, width)
        rh, rw = c.resize_to(ch, cw) if c.do_resize else (ch, cw)
        oh, ow = c.crop_size if c.do_center_crop else (rh, rw)
        t = self.config.tokens
        tokens = (oh // t.patch_size) * (ow // t.patch_size) + t.num_additional_image_tokens - t.dropped
        return ItemPlan((rh, rw), (3, oh, ow), None, Expansion.repeat(self.image_token_id, tokens))

    def process_item(self, image: DecodedImage, plan: ItemPlan[None], out: np.ndarray) -> Aux:
        c = self.config.image
        top, left, ch, cw = self._canvas(image.height, image.width)
        rh, rw = plan.resized_size
        _, oh, ow = plan.feature_shape
        # center_crop's window of the resized image; the part outside it is zero-padded.
        y0, x0 = (rh - oh) // 2, (rw - ow) // 2
        ya, yb = max(y0, 0), min(y0 + oh, rh)
        xa, xb = max(x0, 0), min(x0 + ow, rw)
        pad = (top, left, ch, cw, self._color) if (ch, cw) != (image.height, image.width) else None
        part = resize_region.resize_region(image.rgb, rh, rw, c.resample, (ya, xa, yb - ya, xb - xa), pad)
        window.window_chw(part, y0 - ya, x0 - xa, self._lut, out, self._zero)
        return {}

    def warmup(self) -> None:
        window.warmup()
        resample_pil.warmup()
        resize_region.warmup()
        # Both pass orders, no resize, thin.
        sizes = ((37, 53), (500, 40), (40, 500), (2000, 900), (900, 2000), (336, 336), (336, 500))
        self.run_batches(*([s] for s in sizes))
