"""Qwen2-VL, Qwen2.5-VL and Qwen3-VL images (HF ``Qwen2VLImageProcessorPil``).

smart_resize to a multiple of patch*merge within [min_pixels, max_pixels], resample
(bicubic by default), rescale+normalize, then patchify into rows of
3*temporal*patch*patch ordered merge-block-major; each image becomes
t*h*w/merge**2 image pad tokens and gets M-RoPE positions.

Two processors, as transformers has two classes: "pil" (default, the PIL processor:
Pillow resize, two-step rescale/normalize) and "torchvision" (``Qwen2VLImageProcessor``,
what vLLM/SGLang run with the fast processor: torch's uint8 antialiased resize and the
fused rescale/normalize). Both are bit-exact with their class; they differ from each other.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar, Iterable, NamedTuple, Sequence

import numpy as np

from ...core.carriers import DecodedImage, VideoMeta, VideoOptions
from ...core.errors import Code, PreprocessError, invalid
from ...kernels import normalize, patchify, resample_pil, resample_tv, video_patchify
from ...core.layout import AppliedLayout, Expansion
from ...core.positions import MRope, RopeSpan, mrope_positions
from .. import hf_keys
from . import video as qwen_video
from .common import smart_resize
from ..base import PROCESSORS, Aux, FieldLayout, ImageOptions, ItemPlan, Normalization, effective_detail
from ..video import VideoFamily

MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe")
#: The vLLM 0.33 model classes that normalize pixels on the device
#: (``supports_mm_device_do_normalize = True``, inherited from Qwen3-VL by its MoE and
#: Qwen3.5), by model_type: every model_type this family claims.
DEVICE_NORMALIZATION = {
    "qwen2_vl": "vllm/model_executor/models/qwen2_vl.py Qwen2VLForConditionalGeneration",
    "qwen2_5_vl": "vllm/model_executor/models/qwen2_5_vl.py Qwen2_5_VLForConditionalGeneration",
    "qwen3_vl": "vllm/model_executor/models/qwen3_vl.py Qwen3VLForConditionalGeneration",
    "qwen3_vl_moe": "vllm/model_executor/models/qwen3_vl_moe.py Qwen3VLMoeForConditionalGeneration",
    "qwen3_5": "vllm/model_executor/models/qwen3_5.py Qwen3_5ForConditionalGeneration",
    "qwen3_5_moe": "vllm/model_executor/models/qwen3_5.py Qwen3_5MoeForConditionalGeneration",
}
#: ``detail: low``: at most this many tokens per image (max_pixels = 64 * (patch * merge)**2:
#: 224x224 for Qwen2/2.5-VL, 256x256 for Qwen3-VL), as OpenAI's low detail is one small
#: fixed budget (85 tokens there).
LOW_DETAIL_TOKENS = 64
#: The coefficients of an axis that keeps its size (never read).
_NO_COEFFS = (np.zeros((0, 2), np.int32), np.zeros((0, 1), np.int32))


@dataclass(frozen=True)
class QwenVLConfig(Normalization):
    """The resolved knobs (from preprocessor_config.json + config.json)."""

    model_type: str = "qwen2_vl"
    patch_size: int = 14
    temporal_patch_size: int = 2
    merge_size: int = 2
    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280
    resample: int = resample_pil.BICUBIC
    image_token_id: int = 151655
    video_token_id: int = 151656
    vision_start_token_id: int = 151652
    vision_end_token_id: int = 151653
    processor: str = "pil"  # which transformers class: one of PROCESSORS
    #: The video processor (``qwen_video``); None: the family takes no video.
    video: qwen_video.VideoConfig | None = None

    def as_raw(self) -> "QwenVLConfig":
        """Raw pixels for images and videos alike."""
        return replace(super().as_raw(), video=self.video.as_raw() if self.video is not None else None)


def config_from_hf(preprocessor: dict, config: dict, processor: dict | None = None, video: dict | None = None,
                   tokens: dict | None = None) -> QwenVLConfig:
    """Resolve the knobs from the checkpoint's JSON files (HF class defaults fill gaps).
    ``video``: the video processor dict as transformers loads it (None: processor_config's
    nested "video_processor", else the image processor's, transformers' fallback);
    ``tokens``: {"ids": the ids of ``qwen_video.TIMESTAMP_PIECES``, "source": where they
    come from} (None: processor_config's "timestamp_token_ids", which the config layer
    fills from a preset or tokenizer.json; absent: unknown)."""
    d = QwenVLConfig()
    g = hf_keys.get
    hf_keys.refuse_false(preprocessor, "Qwen-VL", "do_resize", "do_convert_rgb")
    min_pixels, max_pixels = hf_keys.pixel_bounds(preprocessor, d.min_pixels, d.max_pixels)
    ids = {k: hf_keys.token_id(config, k, default=getattr(d, k)) for k in (
        "image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")}
    processor = processor or {}
    video_dict = video if video is not None else processor.get("video_processor") or preprocessor
    stamps = tokens if tokens is not None else processor.get("timestamp_token_ids") or {}
    return QwenVLConfig(
        video=qwen_video.video_config_from_hf(video_dict, config, ids, stamps.get("ids"), stamps.get("source", "")),
        model_type=str(config.get("model_type") or d.model_type),
        patch_size=hf_keys.as_int(g(preprocessor, "patch_size", default=d.patch_size), "patch_size"),
        temporal_patch_size=hf_keys.as_int(
            g(preprocessor, "temporal_patch_size", default=d.temporal_patch_size), "temporal_patch_size"),
        merge_size=hf_keys.as_int(g(preprocessor, "merge_size", default=d.merge_size), "merge_size"),
        min_pixels=min_pixels,
        max_pixels=max_pixels,
        **hf_keys.normalization(preprocessor, d.image_mean, d.image_std),
        resample=hf_keys.resample(preprocessor, d.resample),
        image_token_id=ids["image_token_id"],
        video_token_id=ids["video_token_id"],
        vision_start_token_id=ids["vision_start_token_id"],
        vision_end_token_id=ids["vision_end_token_id"],
    )


def matches(preprocessor: dict, config: dict) -> bool:
    return config.get("model_type") in MODEL_TYPES or str(
        preprocessor.get("image_processor_type", "")).startswith("Qwen2VLImageProcessor")


class Grid(NamedTuple):
    """The image's patch grid: temporal x rows x columns of patch_size patches."""

    t: int
    h: int
    w: int


class QwenVL(VideoFamily[QwenVLConfig, Grid, qwen_video.VideoConfig, qwen_video.VideoPlan]):
    name = "qwen_vl"
    reference_processor = "Qwen2VLImageProcessorPil"
    uses_mrope = True
    #: ``mrope_positions``' ``after_max``: the text after a video starts past its temporal positions.
    positions_after_max = False
    processors = PROCESSORS
    modalities: ClassVar[tuple[str, ...]] = ("image", "video")

    def __init__(self, config: QwenVLConfig):
        if config.processor not in PROCESSORS:
            raise hf_keys.ConfigError(f"unknown Qwen-VL processor {config.processor!r} (one of {', '.join(PROCESSORS)})")
        self.torchvision = config.processor == "torchvision"
        if self.torchvision and config.resample not in resample_tv.PIL_FILTER_MODES:
            raise hf_keys.ConfigError(
                f"resample={config.resample} has no torchvision equivalent for tensors (Qwen2VLImageProcessor fails)")
        self.config = config
        if self.torchvision:
            self.reference_processor = "Qwen2VLImageProcessor"
        self.image_token_id = config.image_token_id
        # vLLM qwen2_vl.py _create_qwen2vl_field_factory (also used by qwen2_5_vl.py and
        # qwen3_vl.py): image_grid_thw=MultiModalFieldConfig.batched("image", keep_on_cpu=True)
        self.field_layout = FieldLayout(
            batched=("image_grid_thw", "patches_per_image"), flat={"pixel_values": "patches_per_image"},
            keep_on_cpu=("image_grid_thw",),
        )
        # vLLM qwen2_vl.py _create_qwen2vl_field_factory: pixel_values_videos=flat_from_sizes("video",
        # video_grid_sizes) (sizes: video_grid_thw.prod(-1)), video_grid_thw=batched("video", keep_on_cpu=True);
        # qwen2_5_vl.py Qwen2_5_VLMultiModalProcessor._get_mm_fields_config adds
        # second_per_grid_ts=batched("video", keep_on_cpu=True); qwen3_vl.py uses the qwen2_vl factory.
        video = config.video
        spg = ("second_per_grid_ts",) if video is not None and video.tokens_per_second is not None else ()
        self.video_field_layout = None if video is None else FieldLayout(
            batched=("video_grid_thw", "patches_per_video", *spg),
            flat={"pixel_values_videos": "patches_per_video"}, keep_on_cpu=("video_grid_thw", *spg),
            encoder_input_key="pixel_values_videos",
        )
        self.video_token_id = video.video_token_id if video is not None else None
        self._video_lut = qwen_video.video_lut(video) if video is not None else None
        self.factor = config.patch_size * config.merge_size
        self.row_width = 3 * config.temporal_patch_size * config.patch_size**2
        self._lut = config.lut(normalize.torchvision_backend_lut if self.torchvision else normalize.pil_backend_lut)

    @property
    def pixel_dtype(self) -> np.dtype:
        return self.config.pixel_dtype

    def device_normalization(self) -> str | None:
        return DEVICE_NORMALIZATION.get(self.config.model_type)

    def with_processor(self, processor: str) -> "QwenVL":
        super().with_processor(processor)
        return self if processor == self.config.processor else type(self)(replace(self.config, processor=processor))

    def configured(self, options: ImageOptions) -> "QwenVL":
        """min_pixels / max_pixels as ``Qwen2VLImageProcessor`` takes them per call. The
        effective max_pixels is the smallest of max_pixels (else the model's),
        ``max_tokens * (patch * merge)**2`` and, for ``detail: low``,
        ``LOW_DETAIL_TOKENS * (patch * merge)**2``. min_pixels is the request's (refused
        above that max) or the model's, lowered to the max when above it; when a token
        budget (max_tokens, detail low) sets the max, to at most a quarter of it, so that
        smart_resize's rounding up of a small image stays within the budget."""
        c = self.config
        unit = self.factor**2  # pixels per token
        token_caps = [n * unit for n in (options.max_tokens, LOW_DETAIL_TOKENS if options.detail == "low" else None)
                      if n is not None]
        max_pixels = min([options.max_pixels if options.max_pixels is not None else c.max_pixels, *token_caps])
        if options.min_pixels is not None:
            if options.min_pixels > max_pixels:
                raise self.refusal("min_pixels", options.min_pixels,
                                   f"it is above the effective max_pixels {max_pixels} (from max_pixels, max_tokens "
                                   f"x {unit} pixels per token and detail); smart_resize needs min <= max")
            min_pixels = options.min_pixels
        else:
            min_pixels = min(c.min_pixels, max_pixels)
            if token_caps and max_pixels == min(token_caps):
                min_pixels = min(min_pixels, max(1, max_pixels // 4))
        if (min_pixels, max_pixels) == (c.min_pixels, c.max_pixels):
            return self
        return type(self)(replace(c, min_pixels=min_pixels, max_pixels=max_pixels))

    def effective_options(self, options: ImageOptions | None) -> ImageOptions:
        """The pixel bounds smart_resize used, the request's max_tokens and the detail."""
        c = self.config
        return ImageOptions(min_pixels=c.min_pixels, max_pixels=c.max_pixels,
                            max_tokens=options.max_tokens if options is not None else None, detail=effective_detail(options))

    def plan(self, height: int, width: int, item: int) -> ItemPlan[Grid]:
        c = self.config
        try:
            h, w = smart_resize(height, width, self.factor, c.min_pixels, c.max_pixels)
        except ValueError as e:
            raise invalid(f"{height}x{width} image: {e}", item=item) from None
        if h <= 0 or w <= 0:
            raise invalid(f"{height}x{width} image resizes to {h}x{w}", item=item)
        grid = Grid(1, h // c.patch_size, w // c.patch_size)
        tokens = Expansion.repeat(self.image_token_id, grid.t * grid.h * grid.w // c.merge_size**2)
        return ItemPlan((h, w), (grid.h * grid.w, self.row_width), grid, tokens)

    def process_item(self, image: DecodedImage, plan: ItemPlan[Grid], out: np.ndarray) -> Aux:
        c = self.config
        h, w = plan.resized_size
        if self.torchvision:
            img = image.pixels
            mode = resample_tv.PIL_FILTER_MODES[c.resample]
            if (image.height, image.width) == (h, w) or mode not in resample_tv.MODES:
                if (image.height, image.width) != (h, w):
                    img = resample_tv.resize_rgb(img, h, w, mode)
                patchify.lut_patchify(img, self._lut, out, c.patch_size, c.merge_size, c.temporal_patch_size)
            else:  # torch's antialiased passes (horizontal first), resized a few bands at a time
                bh, kh = resample_tv.coeffs(image.width, w, mode) if w != image.width else _NO_COEFFS
                bv, kv = resample_tv.coeffs(image.height, h, mode) if h != image.height else _NO_COEFFS
                patchify.resampled_patchify(img, h, w, bh, kh, bv, kv, True, self._lut, out, c.patch_size,
                                            c.merge_size, c.temporal_patch_size)
        else:
            patchify.resize_normalize_patchify(
                image.pixels, h, w, c.resample, self._lut, c.patch_size, c.merge_size, c.temporal_patch_size, out=out
            )
        t, gh, gw = plan.geometry
        return {
            "image_grid_thw": np.array([[t, gh, gw]], dtype=np.int64),
            "patches_per_image": np.array([t * gh * gw], dtype=np.int64),
        }

    def positions(self, applied: AppliedLayout, plans: Sequence[ItemPlan[Grid]],
                  videos: Sequence[RopeSpan] = ()) -> MRope:
        """HF ``get_rope_index``; ``videos``: the videos' items (``video_items``), in any order."""
        images: list[RopeSpan] = [(off, n, p.geometry, None) for (off, n), p in zip(applied.structural_ranges, plans)]
        spans = sorted([*images, *videos], key=lambda item: item[0])
        return mrope_positions(len(applied.input_ids), spans, self.config.merge_size, self.positions_after_max)

    # -- video -------------------------------------------------------------------------

    def video_config(self, options: VideoOptions | None = None) -> qwen_video.VideoConfig:
        """The video processor as a call with ``options`` configures it."""
        video = self.config.video
        if video is None:
            raise self._no_video()
        return video if options is None or options == VideoOptions() else qwen_video.with_options(video, options)

    def with_video(self, **knobs) -> "QwenVL":
        """This checkpoint with its video processor's knobs changed (e.g. sampling frames as
        another loader does before the processor sees them)."""
        video = self.config.video
        if video is None:
            raise self._no_video()
        return type(self)(replace(self.config, video=replace(video, **knobs)))

    def _no_video(self) -> PreprocessError:
        return PreprocessError(Code.FAILED_PRECONDITION, f"the {self.name} family has no video processor "
                               "configured for this model", kind="video")

    def plan_video(self, video: qwen_video.VideoConfig, meta: VideoMeta, item: int) -> qwen_video.VideoPlan:
        return qwen_video.plan_video(video, meta, item)

    def process_video(self, video: qwen_video.VideoConfig, frames: Iterable[np.ndarray], plan: qwen_video.VideoPlan,
                      out: np.ndarray) -> Aux:
        """Write the video's rows of pixel_values_videos; its rows of the other tensors."""
        if self._video_lut is None:
            raise self._no_video()
        qwen_video.process_video(video, self._video_lut, frames, plan, out)
        t, h, w = plan.grid
        aux = {"video_grid_thw": np.array([[t, h, w]], dtype=np.int64),
               "patches_per_video": np.array([t * h * w], dtype=np.int64)}
        if plan.second_per_grid is not None:
            aux["second_per_grid_ts"] = np.array([plan.second_per_grid], dtype=np.float32)
        return aux

    def video_items(self, offset: int, plan: qwen_video.VideoPlan) -> list[RopeSpan]:
        """The video's M-RoPE items at ``offset`` in the expanded ids."""
        return [(offset + off, n, grid, interval) for off, n, grid, interval in plan.spans]

    def token_ids(self) -> dict[str, int]:
        c = self.config
        return {
            "image_pad": c.image_token_id,
            "video_pad": c.video_token_id,
            "vision_start": c.vision_start_token_id,
            "vision_end": c.vision_end_token_id,
        }

    def warmup(self) -> None:
        resample_pil.warmup()
        if self.torchvision or self.config.video is not None:
            resample_tv.warmup()
        if self.config.video is not None:
            video_patchify.warmup(self.config.video.patch_size, self.config.video.merge_size,
                                  self.config.video.temporal_patch_size, dtype=self.pixel_dtype)
        self.run_batches([(37, 53)], [(300, 40)], [(40, 300)])
