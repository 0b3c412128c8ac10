"""Inkling images: HF ``InklingImageProcessor`` (torchvision) + ``InklingProcessor``.

Per image (``_preprocess``): with ``rescale_image_frac`` set, the long edge L becomes
``L * frac``, at most ``max(rescale_image_max_upscaled_long_edge, L)`` (the cap only
limits growth), each side ``floor(side * ratio + 0.5)`` (half up), resized with
``resample`` (LANCZOS by default) unless the ratio is exactly 1; without it (the
class default) the image keeps its size. ``divide_to_patches`` then cuts
``ceil(H / P)`` rows of ``W // P + 1`` patches (one column more than the image needs:
wholly padding when W is a multiple of P), each padded to P x P with -1.0 on the 0..255
scale and then rescaled and normalized with the torchvision backend's fused float32
arithmetic (the padding too), repeated twice along a temporal axis. Outputs:
``pixel_values`` float32 [patches, 2, P, P, 3] and ``num_patches`` int64 [images].

Tokens (``InklingProcessor``): the image placeholder ``<|unused_200054|>`` becomes one
token per patch; the ``<|content_image|>`` marker the chat template puts before it is an
ordinary token. The model counts positions 1-D (its attention has a relative position
bias, no rotary positions), so no positions are returned.

Two processors: "torchvision" (default, the HF class as it runs on a CPU: torch's
uint8 antialiased resize, ``resample_tv``) and "pil" (Pillow's resize of the uint8
image, as SGLang's own Inkling processor and the gateway resize, then the same patches).

Audio (``InklingFeatureExtractor`` + the processor's dMel bins, ``families.inkling.audio``):
each clip, mono at 16 kHz, becomes int32 bins [frames, 80], one placeholder
``<|unused_200053|>`` per frame (20 a second); the ``<|content_audio_input|>`` marker
before it is an ordinary token. The clips' bins are joined along the frames
(``input_audio_features``, flat by ``num_audio_tokens``), as vLLM's Inkling processor
and the gateway send them; HF's processor returns them padded per clip.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from ...core.carriers import DecodedImage
from ...core.errors import invalid
from ...kernels import normalize, patch_grid, resample_pil, resample_tv
from ...core.layout import Expansion
from .. import hf_keys
from ...core.carriers import AudioOptions
from ...core.errors import Code, PreprocessError
from ..audio import AudioFamily, AudioPlan, kept_samples
from ..base import CLIP_MEAN, CLIP_STD, Aux, FieldLayout, ImageOptions, ItemPlan, Normalization
from . import audio as inkling_audio

MODEL_TYPES = ("inkling_mm_model",)
#: What the processor pads each patch with, before rescale and normalize.
PAD_VALUE = -1.0
#: Each patch is repeated this many times (``image_patches[..., None].repeat(..., 2)``).
TEMPORAL_REPEAT = 2
PROCESSORS = ("torchvision", "pil")


@dataclass(frozen=True)
class InklingConfig(Normalization):
    """The resolved knobs (preprocessor_config.json + config.json); HF class defaults."""

    image_mean: tuple[float, ...] = CLIP_MEAN
    image_std: tuple[float, ...] = CLIP_STD
    patch_size: int = 40  # size.height == size.width
    resample: int = resample_pil.LANCZOS
    rescale_image_frac: float | None = None
    rescale_image_max_upscaled_long_edge: int | None = 2048
    image_token_id: int = 200054  # <|unused_200054|>
    image_bos_token_id: int = 200005  # <|content_image|>
    processor: str = "torchvision"  # which resize: one of PROCESSORS
    audio_token_id: int = 200053  # <|unused_200053|>
    audio_bos_token_id: int = 200020  # <|content_audio_input|>
    audio: inkling_audio.InklingAudioConfig = inkling_audio.DEFAULT


def _frac(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise hf_keys.ConfigError(f"rescale_image_frac must be a positive number or null, got {value!r}")
    return float(value)


def config_from_hf(preprocessor: dict, config: dict, processor: dict | None = None) -> InklingConfig:
    """Resolve the knobs from the checkpoint's JSON files (HF class defaults fill gaps)."""
    d = InklingConfig()
    g = hf_keys.get
    hf_keys.refuse_false(preprocessor, "Inkling", "do_resize", "do_convert_rgb")
    size = hf_keys.size_dict(g(preprocessor, "size", default={"height": d.patch_size, "width": d.patch_size}),
                             "size", default_to_square=True)
    if set(size) != {"height", "width"} or size["height"] != size["width"]:
        raise hf_keys.ConfigError(f"Inkling needs a square size {{height, width}} (its patch), got {size}")
    norm = hf_keys.normalization(preprocessor, d.image_mean, d.image_std, d.rescale_factor)
    cap = preprocessor.get("rescale_image_max_upscaled_long_edge", d.rescale_image_max_upscaled_long_edge)
    return InklingConfig(
        **norm,
        patch_size=size["height"],
        resample=hf_keys.resample(preprocessor, d.resample),
        rescale_image_frac=_frac(preprocessor.get("rescale_image_frac", d.rescale_image_frac)),
        rescale_image_max_upscaled_long_edge=None if cap is None else hf_keys.as_int(
            cap, "rescale_image_max_upscaled_long_edge"),
        image_token_id=hf_keys.token_id(config, "image_token_id", default=d.image_token_id),
        image_bos_token_id=hf_keys.token_id(config, "image_bos_token_id", default=d.image_bos_token_id),
        audio_token_id=hf_keys.token_id(config, "audio_token_id", default=d.audio_token_id),
        audio_bos_token_id=hf_keys.token_id(config, "audio_bos_token_id", default=d.audio_bos_token_id),
        audio=inkling_audio.InklingAudioConfig.from_hf((processor or {}).get("feature_extractor") or {}, processor),
    )


def matches(preprocessor: dict, config: dict) -> bool:
    return hf_keys.claims(preprocessor, config, MODEL_TYPES, "InklingImageProcessor")


def rescaled_size(height: int, width: int, frac: float | None, cap: int | None) -> tuple[int, int]:
    """``InklingImageProcessor._preprocess``'s size before patching (Python floats, as there)."""
    if frac is None:
        return height, width
    long_edge = max(height, width)
    target = long_edge * frac
    if cap is not None:
        target = min(target, max(cap, long_edge))
    ratio = target / long_edge
    if ratio == 1.0:
        return height, width
    return math.floor(height * ratio + 0.5), math.floor(width * ratio + 0.5)


class Grid(NamedTuple):
    """Patches: ``rows`` x ``cols``, raster order."""

    rows: int
    cols: int


def pad_values(config: Normalization, make=normalize.torchvision_backend_values) -> np.ndarray:
    """The normalized padding: -1.0 through the same float32 arithmetic as the pixels."""
    return make(np.float32(PAD_VALUE), config.image_mean, config.image_std, config.rescale_factor,
                config.do_rescale, config.do_normalize)[:, 0].copy()


@dataclass(frozen=True)
class ExtractorCall:
    """The extractor a request's options configure: the model's, and the samples kept."""

    config: inkling_audio.InklingAudioConfig
    max_samples: int | None = None  # truncation=True, max_length (None: the whole clip)

    @property
    def sampling_rate(self) -> int:
        return self.config.sampling_rate


class Inkling(AudioFamily[InklingConfig, Grid, ExtractorCall]):
    name = "inkling"
    processors = PROCESSORS
    audio_features_key = "input_audio_features"

    def __init__(self, config: InklingConfig):
        if config.processor not in PROCESSORS:
            raise hf_keys.ConfigError(f"unknown Inkling processor {config.processor!r} (one of {', '.join(PROCESSORS)})")
        self.pil = config.processor == "pil"
        if not self.pil and config.resample not in resample_tv.PIL_FILTER_MODES:
            raise hf_keys.ConfigError(
                f"resample={config.resample} has no torchvision equivalent for tensors (InklingImageProcessor fails)")
        self.config = config
        self.reference_processor = (
            "Pillow resize + InklingImageProcessor's patches" if self.pil
            else "InklingImageProcessor (torchvision) + InklingProcessor")
        self.image_token_id = config.image_token_id
        self.field_layout = FieldLayout(batched=("num_patches",), flat={"pixel_values": "num_patches"})
        # vLLM's Inkling fields (vllm/models/inkling/common/mm_preprocess.py): input_audio_features
        # flat_from_sizes by num_audio_tokens, num_audio_tokens batched (kept on the CPU)
        self.audio_token_id = config.audio_token_id
        self.audio_field_layout = FieldLayout(
            batched=("num_audio_tokens",), flat={"input_audio_features": "num_audio_tokens"},
            keep_on_cpu=("num_audio_tokens",), encoder_input_key="input_audio_features")
        self._lut = config.lut(normalize.torchvision_backend_lut)
        self._pad = pad_values(config)

    def with_processor(self, processor: str) -> "Inkling":
        super().with_processor(processor)
        return self if processor == self.config.processor else Inkling(replace(self.config, processor=processor))

    def configured(self, options: ImageOptions) -> "Inkling":
        """``detail: low`` is ``rescale_image_frac=None`` (no upscale; the processor takes
        it per call): the image keeps its own size. Sizes and token budgets are refused:
        the processor never downscales, so nothing it takes can cap an image's tokens."""
        for name in ("min_pixels", "max_pixels", "max_tokens"):
            value = getattr(options, name)
            if value is not None:
                raise self.refusal(name, value, "its processor never downscales (each image keeps its size, or "
                                   "grows by rescale_image_frac) and takes no size or token budget; detail low "
                                   "(no upscale) is the smallest it offers, and max_image_tokens refuses larger images")
        c = self.config
        if options.detail != "low" or c.rescale_image_frac is None:
            return self
        return Inkling(replace(c, rescale_image_frac=None))

    def plan(self, height: int, width: int, item: int) -> ItemPlan[Grid]:
        c = self.config
        h, w = rescaled_size(height, width, c.rescale_image_frac, c.rescale_image_max_upscaled_long_edge)
        if h < 1 or w < 1:
            raise invalid(f"{width}x{height} image rescales to {w}x{h} (rescale_image_frac "
                          f"{c.rescale_image_frac}): no pixels left", item=item)
        p = c.patch_size
        grid = Grid(-(-h // p), w // p + 1)
        n = grid.rows * grid.cols
        return ItemPlan((h, w), (n, TEMPORAL_REPEAT, p, p, 3), grid, Expansion.repeat(self.image_token_id, n))

    def _resized(self, image: DecodedImage, height: int, width: int) -> np.ndarray:
        if (image.height, image.width) == (height, width):
            return image.pixels
        if self.pil:
            return resample_pil.resize_rgb(image.pixels, height, width, self.config.resample)
        return resample_tv.resize_rgb(image.pixels, height, width, resample_tv.PIL_FILTER_MODES[self.config.resample])

    def process_item(self, image: DecodedImage, plan: ItemPlan[Grid], out: np.ndarray) -> Aux:
        pixels = self._resized(image, *plan.resized_size)
        patch_grid.cut_patches(pixels, self._lut, self._pad, plan.geometry.cols, out)
        return {"num_patches": np.array([plan.feature_shape[0]], dtype=np.int64)}

    def token_ids(self) -> dict[str, int]:
        c = self.config
        return {"image": c.image_token_id, "image_bos": c.image_bos_token_id, "audio": c.audio_token_id,
                "audio_bos": c.audio_bos_token_id}

    # -- audio -----------------------------------------------------------------------------

    def audio_config(self, options: AudioOptions | None = None) -> ExtractorCall:
        cfg = self.config.audio
        return ExtractorCall(cfg, kept_samples(options, cfg.sampling_rate))

    def sampling_rate(self, config: ExtractorCall) -> int:
        return config.sampling_rate

    def plan_audio(self, config: ExtractorCall, samples: int, item: int) -> AudioPlan:
        kept = samples if config.max_samples is None else min(samples, config.max_samples)
        if kept <= 0:
            raise PreprocessError(Code.INVALID_ARGUMENT, "the clip has no samples", item=item, kind="audio")
        frames = inkling_audio.frames_for(kept, config.config)
        return AudioPlan(kept, frames, Expansion.repeat(self.audio_token_id, frames))

    def process_audio(self, config: ExtractorCall, wave: np.ndarray, plan: AudioPlan) -> dict[str, np.ndarray]:
        return {"input_audio_features": inkling_audio.dmel(wave[:plan.samples], config.config),
                "num_audio_tokens": np.array([plan.frames], dtype=np.int64)}

    def audio_batch(self, clips: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        return {key: np.concatenate([c[key] for c in clips]) for key in ("input_audio_features", "num_audio_tokens")}

    def warmup(self) -> None:
        patch_grid.warmup()
        resample_pil.warmup()
        if not self.pil:
            resample_tv.warmup()
        p = self.config.patch_size
        # off and on the patch grid; one patch; resized (when rescaling) or not
        self.run_batches([(37, 53)], [(p, 2 * p)], [(1, 1), (3 * p + 1, p - 1)])
        inkling_audio.dmel(np.zeros(3 * self.config.audio.hop + 1, np.float32), self.config.audio)
